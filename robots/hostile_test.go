package robots

// Hostile inputs (issue 9, item 3): each test ends in a figure it logs.
// The hostile servers themselves, which stream, trickle or never end a
// robots.txt, are tested where it is fetched, in package throttle
// (hostile_test.go there).

import (
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// liveHeap returns the live heap: HeapAlloc after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestHostileLinkFarmRobots: TestMemoryLinkFarm (package throttle,
// memory_test.go) shows a million hosts held to MaxScopes in scopes. With
// robots.txt on, each origin also has an entry in the robots.txt cache,
// which is bounded by Robots.MaxOrigins (100,000), not by MaxScopes, and a
// farm's robots.txt can be MaxSize of the shortest rules. This measures
// what one such file keeps on the heap once parsed, and so the cache's
// worst case.
func TestHostileLinkFarmRobots(t *testing.T) {
	worst := 0.0
	for _, line := range []string{"Allow:/\n", "Disallow:/a\n", "Disallow: /" + strings.Repeat("x", 100) + "\n"} {
		b := []byte("User-agent: *\n" + strings.Repeat(line, MaxSize/len(line)+1))
		const files = 4
		before := liveHeap()
		rs := make([]*Robots, files)
		for i := range rs {
			rs[i] = ParseBytes(b)
		}
		per := float64(int64(liveHeap())-int64(before)) / files
		runtime.KeepAlive(rs)
		rules := len(rs[0].groups[0].rules)
		t.Logf("robots.txt of %d B of %q: %d rules, %.0f B of live heap per parsed file (%.1f B per rule)",
			len(b), line, rules, per, per/float64(rules))
		worst = max(worst, per)
	}
	// The cache's defaults, DefaultConfig().Robots.MaxOrigins and MaxBytes
	// in package throttle, which this package cannot import.
	const origins, maxBytes = 100_000, 256 << 20
	t.Logf("without a byte budget the robots.txt cache could reach %d origins (Robots.MaxOrigins) x %.1f MB = %.0f GB; "+
		"Robots.MaxBytes (default %d MiB) bounds it: TestHostileLinkFarmRobotsBudget",
		origins, worst/1e6, float64(origins)*worst/1e9, maxBytes>>20)
	assert.LessOrEqual(t, worst, float64(4<<20), "a parsed robots.txt keeps at most 4 MiB")
}
