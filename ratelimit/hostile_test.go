package ratelimit

// Hostile servers (issue 9, item 3): each test ends in a figure it logs.

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allocsPerCall returns the allocations and the bytes f makes per call,
// averaged over runs calls after a warm-up, on one P as
// testing.AllocsPerRun does.
func allocsPerCall(runs int, f func()) (n, bytes float64) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs), float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}

// TestHostileRateLimitHeaders: 10,000 parameters or items in one RateLimit
// field, a 1 MB field value, a million digits of Retry-After. The parsers
// stop after 64 items or 64 parameters and Parse ignores values over
// 4 KiB, so the work is bounded by those caps, not by what the server
// sent: measured in bytes looked at and allocations, not wall time. The
// same headers through a real server and the throttle's Transport are
// TestHostileRateLimitHeaders in package throttle.
func TestHostileRateLimitHeaders(t *testing.T) {
	const n = 10_000
	mb := strings.Repeat("a", 1<<20)
	values := []struct {
		name, v string
	}{
		{"10,000 parameters", `"default";r=0;t=5` + strings.Repeat(";x=1", n)},
		{"10,000 items", strings.Repeat("a;r=1;t=1, ", n-1) + "a;r=0;t=5"},
		{"1 MB policy name", `"` + mb + `";r=0;t=5`},
		{"1 MB parameter", `"default";r=0;t=5;x="` + mb + `"`},
		{"1 MB escaped name", `"\\` + mb + `";r=0;t=5`},
	}
	benign := `"default";r=0;t=5`
	benignAllocs, benignBytes := allocsPerCall(100, func() { ParseRateLimit(benign) })
	t.Logf("benign %q: %.0f allocs, %.0f B per ParseRateLimit", benign, benignAllocs, benignBytes)
	for _, c := range values {
		// Each 1 MB pass takes a while under the race detector: as few
		// passes as will do.
		var items []Item
		var ok bool
		allocs, bytes := allocsPerCall(1, func() { items, ok = ParseRateLimit(c.v) })
		looked := len(c.v)
		if !ok {
			p := sfParser{s: c.v}
			p.intList("r", "t")
			looked = p.i
		}
		t.Logf("%-18s (%7d B): ok=%-5v looked at %7d B, %.0f allocs, %.0f B per ParseRateLimit",
			c.name, len(c.v), ok, looked, allocs, bytes)
		sw := Parse(http.Header{"Ratelimit": {c.v}}, time.Now())
		assert.False(t, sw.Present, "%s: a value over 4 KiB is ignored by Parse", c.name)
		if strings.HasPrefix(c.name, "10,000") {
			assert.False(t, ok, "%s: more than 64 is malformed", c.name)
			assert.Nil(t, items)
			assert.Less(t, looked, 1024, "%s: stops after 64", c.name)
			assert.LessOrEqual(t, allocs, 8.0, c.name)
			assert.LessOrEqual(t, bytes, 8192.0, c.name)
			continue
		}
		// One item with a 1 MB name or parameter: valid, and read once.
		require.True(t, ok, c.name)
		require.Len(t, items, 1)
		assert.Equal(t, int64(0), items[0].Remaining)
		assert.Equal(t, 5*time.Second, items[0].Reset)
		assert.LessOrEqual(t, allocs, benignAllocs+2, c.name)
		// An escape makes the name a copy: the unescaped bytes, then the
		// string made of them.
		assert.LessOrEqual(t, bytes, 2*float64(len(c.v))+64<<10, "%s: at most two copies (and the allocator's rounding)", c.name)
	}
	// Delta seconds of a million digits: one pass, nothing allocated.
	digits := strings.Repeat("9", 1<<20)
	var d time.Duration
	var ok bool
	n1, _ := allocsPerCall(1, func() { d, ok = ParseRetryAfter(digits, time.Now()) })
	t.Logf("Retry-After of 1 MB of digits: %v, %v; %.0f allocs", d, ok, n1)
	assert.True(t, ok)
	assert.Equal(t, MaxWait, d)
	assert.Zero(t, n1)
}
