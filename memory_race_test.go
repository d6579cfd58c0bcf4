//go:build race

package throttle

// raceEnabled reports whether the race detector is on: the memory tests
// then crawl 100,000 hosts instead of a million.
const raceEnabled = true
