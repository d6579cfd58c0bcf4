package throttle

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statedWindow states a quota per window of its count, as a server
// sending X-RateLimit-Limit, -Remaining and -Reset does: windows of
// period, each ending reset after its start (the period itself for a
// fixed window; HAProxy's counter, stated by the end of its second
// period, names twice that), the count left as left makes it of the
// requests counted. It accepts everything: the tests read how the scope
// paces against the statement, not the refusals.
type statedWindow struct {
	start         time.Time
	period, reset time.Duration
	quota         int
	left          func(used int) int // the count it names as left, of the requests in the window so far
	n             int                // the window of used
	used          int
}

// answer is the answer to a request started at now.
func (w *statedWindow) answer(now time.Time) Feedback {
	n := int(now.Sub(w.start) / w.period)
	if n != w.n {
		w.n, w.used = n, 0
	}
	w.used++
	wait := w.start.Add(time.Duration(n)*w.period + w.reset).Sub(now)
	secs := max(1, math.Ceil(wait.Seconds())) // as ratelimit reads a reset: whole seconds
	return Feedback{Status: 200, StatedRate: float64(w.quota) / secs, HasWait: true, Wait: wait,
		Remaining: int64(w.left(w.used)), HasRemaining: true}
}

// serve answers requests paced at the scope's rate for d, each 10 ms
// after its start; after each answer, each(now) runs.
func (p *policyRig) serve(w *statedWindow, d time.Duration, each func()) {
	end := p.now.Add(d)
	for p.now.Before(end) {
		start := later(p.next, p.now.Add(-10*ms))
		p.paced(1, 10*ms, w.answer(start))
		if each != nil {
			each()
		}
	}
}

// settledAtWindow is a scope crawling a fixed window of 40 per 10 s for
// 5 s: settled 2 % under its stated limit.
func settledAtWindow(t *testing.T) (*policyRig, *statedWindow) {
	p := newPolicy(t, rampConfig())
	w := &statedWindow{start: p.now, period: 10 * time.Second, reset: 10 * time.Second, quota: 40,
		left: func(used int) int { return max(0, 40-used) }}
	p.serve(w, 5*time.Second, nil)
	return p, w
}

// TestRampupWindowClimbHolds (rule 7): a scope settled 2 % under a
// window's stated limit tries more after 30 s, and each climb from 2 %
// under that limit up holds two of the server's windows (the longest wait
// for its reset it named) before it proves anything: a sliding count
// shows a rise within two windows, not within a round.
func TestRampupWindowClimbHolds(t *testing.T) {
	p, w := settledAtWindow(t)
	r := p.s.rampup
	require.True(t, r.soft)
	require.InDelta(t, 0.98*r.hint, p.rate(), 1e-9, "settled 2 % under the window's 40 in 10 s (11, as its reset rounds up)")
	var holds []time.Duration // from a climb's start to the rise of G it proved
	var climb time.Time
	g := r.good
	p.serve(w, 2*time.Minute, func() {
		if r.good > g {
			holds = append(holds, p.now.Sub(climb))
			climb = time.Time{}
		}
		if climb.IsZero() && p.rate() > r.good {
			climb = p.now
		}
		g = r.good
	})
	require.NotEmpty(t, holds, "the window's limit is tried")
	assert.Greater(t, r.good, r.hint, "a server that accepts more is climbed past its statement")
	for i, d := range holds {
		assert.GreaterOrEqual(t, d, 2*w.period-time.Second, "climb %d: held two windows", i)
	}
	assert.LessOrEqual(t, len(holds), 5, "90 s of climbs held 20 s each")
}

// TestRampupWindowLeftBoundsB (rule 7): a window's statement whose count
// left stayed over 10 % of the quota while the scope paced at its limit
// understates the rate: HAProxy's 18 per 10 s, stated by the end of its
// counter's two periods (18 in 20 s, 0.9 req/s), leaves 9 at 0.88 req/s.
// When the statement has held, the climb is bounded by G times the quota
// over what G used of it (1.76 req/s), not by the statement.
func TestRampupWindowLeftBoundsB(t *testing.T) {
	p := newPolicy(t, rampConfig())
	w := &statedWindow{start: p.now, period: 10 * time.Second, reset: 20 * time.Second, quota: 18,
		left: func(int) int { return 9 }}
	r := p.s.rampup
	p.serve(w, 25*time.Second, nil)
	require.True(t, r.soft, "settled under the window's limit")
	require.InDelta(t, 0.98*18/21, r.good, 1e-9, "2 % under 18 in 20 s (21, as its reset rounds up)")
	g := r.good
	p.serve(w, 20*time.Second, func() {
		if !r.soft && r.bRule5 {
			g = r.good
		}
	})
	require.False(t, r.soft, "the statement held and was tried")
	assert.InDelta(t, 2*g, r.bad, 1e-9, "B: G x 18/(18-9)")
	assert.True(t, r.bRule5, "an estimate no refusal confirmed: passed once near")

	// A server whose count left fell to nothing stated its window: no bound.
	q := newPolicy(t, rampConfig())
	wq := &statedWindow{start: q.now, period: 10 * time.Second, reset: 10 * time.Second, quota: 40,
		left: func(used int) int { return max(0, 40-used) }}
	q.serve(wq, 25*time.Second, nil)
	q.serve(wq, 10*time.Second, nil)
	assert.False(t, q.s.rampup.bRule5, "the count left fell under 10 %%: the statement stands")
}

// TestRampupLowerWindowAfterClimb (rule 7): once G is proven above a
// window's limit the scope settled at, a lower statement of it (a reset
// rounded up a second more) settles nothing again.
func TestRampupLowerWindowAfterClimb(t *testing.T) {
	p, w := settledAtWindow(t)
	r := p.s.rampup
	require.True(t, r.windows)
	r.good, r.rate, r.bad, r.soft, r.stated = 6, 6, 0, false, 0 // proven past the 4 req/s stated
	w.quota, w.left = 35, func(int) int { return 20 }           // 3.5 req/s, never spent
	p.serve(w, 12*time.Second, nil)                             // into the next window
	assert.GreaterOrEqual(t, r.good, 6.0, "not settled again under the lower statement (35 in 10 s)")
}

// TestRampupWindowFarOverBNotSettled (rule 7): a window's stated limit is
// no ceiling to settle at when the server refused a rate under a quarter
// of it since (B): a token bucket of 1.22 req/s stating X-RateLimit-*
// read as a window of 30.5 req/s, and a scope settled there from G = 1.27
// sent 29.9 req/s. Within 4 B, a window is still settled at: one spent
// early by the slow start refuses slower rates.
func TestRampupWindowFarOverBNotSettled(t *testing.T) {
	for _, tc := range []struct {
		quota  int
		settle bool
	}{
		{103, false}, // 51.5 req/s: over 4 B
		{60, true},   // 30 req/s: within 4 B
	} {
		p := settledAt8(t)
		r := p.s.rampup
		require.Equal(t, 8.1, r.bad, "the server refused 8.1 req/s")
		end := p.now.Add(3 * time.Second) // the window's end, two answers a second apart before it
		left := 5
		for range 24 {
			left = max(left-1, 0)
			p.paced(1, 10*ms, Feedback{Status: 200, StatedRate: float64(tc.quota) / 2, HasWait: true, Wait: end.Sub(p.now),
				Remaining: int64(left), HasRemaining: true})
		}
		require.True(t, r.windows, "%d per 2 s: read as a window", tc.quota)
		if tc.settle {
			assert.InDelta(t, 0.98*float64(tc.quota)/2, r.good, 1e-9, "%d per 2 s: settled 2 %% under it", tc.quota)
		} else {
			assert.Equal(t, 8.0, r.good, "%d per 2 s: G stays", tc.quota)
			assert.LessOrEqual(t, p.rate(), 8.1, "%d per 2 s: no rate over B", tc.quota)
		}
	}
}

// TestRampupWindowRefutedByWhatPassed (rule 7): a window's stated limit
// under what the server let through over a window or more is no window's
// limit (over a span T of one window W or more, a window lets through at
// most its rate times T + W): a leaky bucket's X-RateLimit-Reset, the
// time its burst takes to drain, read as a window's end, held nginx's 7
// per minute at 60 % of it. Refuted, it stays refuted once the spans that
// refute it are cut short (an outage, a drain). Let through for less than
// a window, the same statement is settled at: a window whose quota is not
// spent yet lets any rate through.
func TestRampupWindowRefutedByWhatPassed(t *testing.T) {
	for _, tc := range []struct {
		passed time.Duration // at 8 req/s before the statement
		settle bool
	}{
		{30 * time.Second, false}, // three of its 10 s windows, at 8 times its rate
		{5 * time.Second, true},   // half a window: its quota may be unspent yet
	} {
		p := newPolicy(t, rampConfig())
		r := p.s.rampup
		p.paced(1, 10*ms, ok) // the first answer: what passed is counted from here
		r.rate, r.good, r.bad, r.step = 8, 8, 8.1, rampupEpsilon
		r.gAt, r.changed, r.cut = p.now, p.now, p.now
		r.probeAt = p.now.Add(time.Hour)
		p.s.refresh()
		for end := p.now.Add(tc.passed); p.now.Before(end); {
			p.paced(1, 10*ms, ok)
		}
		// 10 per window of 10 s (1 req/s), its end fixed, the count left
		// never rising: a window, as rule 7 reads one.
		reset := p.now.Add(10 * time.Second)
		stated := func(n int) {
			for range n {
				p.paced(1, 10*ms, Feedback{Status: 200, StatedRate: 1, HasWait: true, Wait: reset.Sub(p.now),
					Remaining: 1, HasRemaining: true})
			}
		}
		stated(24)
		require.True(t, r.windows, "passed %v: read as a window", tc.passed)
		if tc.settle {
			assert.InDelta(t, 0.98, r.good, 1e-9, "passed %v: settled 2 %% under it", tc.passed)
			continue
		}
		assert.Equal(t, 8.0, r.good, "passed %v: G stays", tc.passed)
		assert.Equal(t, 8.0, p.rate(), "passed %v: R stays", tc.passed)
		// The spans that refuted it cut short, as an outage's end does:
		// the statement is still no window's limit.
		r.accAt, r.accOK, r.gAt, r.gOK = p.now, 0, p.now, 0
		stated(8)
		assert.Equal(t, 8.0, r.good, "refuted before: G stays")
	}
}
