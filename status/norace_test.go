//go:build !race

package status

// raceEnabled reports whether the race detector is on: TestStatusAllocs
// then skips, as sync.Pool drops items at random.
const raceEnabled = false
