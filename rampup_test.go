package throttle

import (
	"math"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rampConfig() ScopeConfig {
	cfg := backoffConfig()
	cfg.Delay = time.Second
	cfg.Rampup.Enabled = true
	cfg.Rampup.MaxConcurrency = 64
	return cfg
}

// quietWindow sends a request and lets a window pass without signals.
func (p *policy) quietWindow() {
	p.request(10*ms, ok)
	p.advance(p.s.cfg.Window)
}

// rate is the scope's rampup rate now, in starts per second.
func (p *policy) rate() float64 { return p.s.rampup.current(&p.s.cfg) }

// answer answers a request started at started, now, with fb.
func (p *policy) answer(started time.Time, fb Feedback) {
	p.s.Finish(p.now, Ticket{Slot: -1, Cost: 1, Start: started}, &fb)
}

// TestRampupSlowStart: from the configured pace, each round of two good
// answers to requests paced at the rate doubles the rate: 1, 2, 4, 8 ...
// (one doubling per round trip, as TCP's slow start), and the slots
// follow: twice the rate times the latency.
func TestRampupSlowStart(t *testing.T) {
	p := newPolicy(t, rampConfig())
	var rates []float64
	for range 6 {
		rates = append(rates, p.rate())
		// Answers to requests paced at the rate, until the round ends
		// (two answers, spanning 100 ms at least).
		gap := time.Duration(float64(time.Second) / p.rate())
		for start, r := p.now, p.rate(); p.rate() == r; start = start.Add(gap) {
			p.now = start.Add(50 * ms)
			p.answer(start, Feedback{Status: 200, Latency: 50 * ms})
		}
	}
	assert.Equal(t, []float64{1, 2, 4, 8, 16, 32}, rates)
	assert.Equal(t, 64.0, p.rate())
	assert.Equal(t, int(math.Ceil(2*64*0.05)), p.s.concurrency(), "twice rate x latency")
	assert.Equal(t, time.Second/64, p.delay())
	_, why := p.s.delay()
	assert.Equal(t, ReasonRampup, why)
}

// TestRampupHeldBackProvesNothing: a round whose requests started slower
// than the rate (another rule, another scope, a lack of requests held
// them back) proves nothing: the rate does not climb (issue: rampup rose
// to level 16 while another cap bound the rate).
func TestRampupHeldBackProvesNothing(t *testing.T) {
	p := newPolicy(t, rampConfig())
	for range 10 {
		a := p.now
		b := a.Add(3 * time.Second) // the rate allows one a second
		p.now = b.Add(50 * ms)
		p.answer(a, ok)
		p.answer(b, ok)
	}
	assert.Equal(t, 1.0, p.rate(), "never climbed")
}

// TestRampupProbeFailsBackToGood: a signal at a rate above the last good
// one returns there at once and marks that rate bad; the search then
// bisects geometrically between the two.
func TestRampupProbeFailsBackToGood(t *testing.T) {
	p := newPolicy(t, rampConfig())
	for range 3 { // 1 -> 2 -> 4 -> 8
		gap := time.Duration(float64(time.Second) / p.rate())
		a := p.now
		p.now = a.Add(gap + 10*ms)
		p.answer(a, ok)
		p.answer(a.Add(gap), ok)
	}
	require.Equal(t, 8.0, p.rate())
	p.now = p.now.Add(10 * ms)
	p.answer(p.now.Add(-5*ms), tooMany)
	assert.Equal(t, 4.0, p.rate(), "back to the good rate")
	assert.Equal(t, 8.0, p.s.rampup.bad)
	assert.Zero(t, p.s.backoff.delay, "rampup took the signal, not backoff")
	// Answers to requests sent at 8 before the step move nothing.
	p.answer(p.now.Add(-8*ms), tooMany)
	assert.Equal(t, 4.0, p.rate())
	// Four good answers at 4 prove it: bisect to sqrt(4*8).
	for i := range 4 {
		p.now = p.now.Add(250 * ms)
		p.answer(p.now.Add(-time.Duration(3-i)*10*ms), ok)
	}
	assert.InDelta(t, math.Sqrt(32), p.rate(), 1e-9)
}

// TestRampupDeliveredAfterABurst: a round at or below the good rate that
// draws signals says the good rate was not (a token bucket's burst
// answered the probes): the rate falls to what the round delivered.
func TestRampupDeliveredAfterABurst(t *testing.T) {
	p := newPolicy(t, rampConfig())
	for range 4 { // 1 -> 16
		gap := time.Duration(float64(time.Second) / p.rate())
		a := p.now
		p.now = a.Add(gap + 10*ms)
		p.answer(a, ok)
		p.answer(a.Add(gap), ok)
	}
	p.answer(p.now, tooMany) // 16 fails: back to 8
	require.Equal(t, 8.0, p.rate())
	// At 8, one in four refused: the server delivers 6 a second.
	for _, fb := range []Feedback{ok, tooMany, ok, ok} {
		p.now = p.now.Add(125 * ms)
		p.answer(p.now.Add(-ms), fb)
	}
	assert.InDelta(t, 0.97*6, p.rate(), 1e-9)
	assert.Equal(t, 8.0, p.s.rampup.bad)
}

// TestRampupProvenRateOutlivesACycle: a steady rate proven by a quiet
// window at least as long as the shortest quota cycle is what the next
// cycle settles at, when the cycle's average is lower.
func TestRampupProvenRateOutlivesACycle(t *testing.T) {
	p := newPolicy(t, rampConfig())
	r := p.s.rampup
	r.rate, r.good, r.settled, r.cycleLen = 4, 4, true, 10*time.Second
	r.cycle, r.cycleOK = p.now, 0
	p.s.refresh()
	p.now = p.now.Add(time.Second)
	p.s.rampup.tick(p.now, &p.s.cfg, 16) // the window starts
	// A quiet minute at 4 req/s proves 4.
	for range 240 {
		p.answer(p.now.Add(-10*ms), ok)
		p.now = p.now.Add(250 * ms)
	}
	p.s.rampup.tick(p.now, &p.s.cfg, 16)
	require.Equal(t, 4.0, r.proven)
	// A period of nothing but 429s, then a success: the cycle's end, its
	// average (240 in 60 s plus the refusals) below 4.
	for range 12 {
		p.answer(p.now.Add(-10*ms), tooMany)
		p.now = p.now.Add(500 * ms)
	}
	p.answer(p.now.Add(-10*ms), ok)
	require.True(t, r.settled)
	assert.InDelta(t, 4*(1-rampupEpsilon), r.good, 1e-9, "settled at the proven rate, less 2 %%")
	assert.Zero(t, r.proven, "a proof serves one cycle")
}

// TestRampupOutage: four 5xx in a row with no success and no 429 between
// are an outage: rampup pauses (the rate is kept, no rate is marked bad)
// and backoff probes once per OutageProbe; the first success resumes the
// rate rampup had.
func TestRampupOutage(t *testing.T) {
	p := newPolicy(t, rampConfig())
	p.s.rampup.rate, p.s.rampup.good, p.s.rampup.settled = 8, 8, true
	p.s.refresh()
	for range 4 {
		p.now = p.now.Add(125 * ms)
		p.answer(p.now.Add(-ms), Feedback{Status: 503})
	}
	assert.True(t, p.s.rampup.paused)
	assert.True(t, p.s.backoff.outage, "backoff probes the outage")
	assert.Equal(t, 5*time.Second, p.delay(), "the first probe after 5 s")
	assert.Zero(t, p.s.rampup.bad, "no rate blamed")
	p.now = p.now.Add(5 * time.Second)
	p.answer(p.now.Add(-ms), Feedback{Status: 503})
	assert.Equal(t, time.Minute, p.delay(), "then one probe a minute")
	p.now = p.now.Add(time.Minute)
	p.answer(p.now.Add(-ms), ok)
	assert.False(t, p.s.rampup.paused)
	assert.False(t, p.s.backoff.outage)
	assert.Equal(t, 8.0, p.rate())
	assert.Equal(t, time.Second/8, p.delay())
}

// An "outage" that answers the first probe was a rate limiter refusing a
// run of requests far above its limit: rampup searches down from half
// the rate and takes no run for an outage again until it settles.
func TestRampupOutageThatWasARateLimit(t *testing.T) {
	p := newPolicy(t, rampConfig())
	p.s.rampup.rate, p.s.rampup.good = 16, 16
	p.s.refresh()
	for range 4 {
		p.now = p.now.Add(60 * ms)
		p.answer(p.now.Add(-ms), Feedback{Status: 503})
	}
	require.True(t, p.s.rampup.paused)
	p.now = p.now.Add(5 * time.Second)
	p.answer(p.now.Add(-ms), ok)
	assert.False(t, p.s.rampup.paused)
	assert.Equal(t, 8.0, p.rate())
	assert.Equal(t, 16.0, p.s.rampup.bad)
	for range 4 {
		p.now = p.now.Add(125 * ms)
		p.answer(p.now.Add(-ms), Feedback{Status: 503})
	}
	assert.False(t, p.s.rampup.paused, "no outage again")
}

// TestRampupPacesAtAStatedLimit: a server that states its limit (here 10
// a second, as go-chi/httprate's X-RateLimit-Limit over its reset does) is
// paced just below it from its first response, and never above it.
func TestRampupPacesAtAStatedLimit(t *testing.T) {
	p := newPolicy(t, rampConfig())
	p.now = p.now.Add(50 * ms)
	p.answer(p.now.Add(-50*ms), Feedback{Status: 200, Latency: 50 * ms, StatedRate: 10})
	assert.InDelta(t, 9.8, p.rate(), 1e-9)
	assert.True(t, p.s.rampup.settled)
	for range 40 { // quiet windows would climb: not past the stated rate
		for i := range 600 {
			p.answer(p.now.Add(time.Duration(i)*100*ms), Feedback{Status: 200, Latency: 50 * ms, StatedRate: 10})
		}
		p.advance(time.Minute)
	}
	assert.LessOrEqual(t, p.rate(), 10.0)
	// A lower statement (a later response, nearer its window's start)
	// lowers the pace.
	p.answer(p.now, Feedback{Status: 200, Latency: 50 * ms, StatedRate: 5})
	assert.InDelta(t, 4.9, p.rate(), 1e-9)
}

func TestRampupValidation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Default.Rampup.MinSignals = 0
	_, err := New(cfg)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Default.Rampup.MinSignals", ce.Field)
	cfg = DefaultConfig()
	cfg.Default.Rampup.MaxSignals = 0
	_, err = New(cfg)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Default.Rampup.MaxSignals", ce.Field)
}

// A rampup record in the learned state round-trips whole: every field of
// rampup (set here by reflection, so a field added later and left out of
// the record fails this test), as a Store shares it between workers.
func TestRampupLearnedRoundTrip(t *testing.T) {
	p := newPolicy(t, rampConfig())
	v := reflect.ValueOf(p.s.rampup).Elem()
	base := time.Unix(1_000_000, 0)
	for i := range v.NumField() {
		f := reflect.NewAt(v.Field(i).Type(), unsafe.Pointer(v.Field(i).UnsafeAddr())).Elem()
		switch x := f.Addr().Interface().(type) {
		case *float64:
			*x = float64(i) + 0.5
		case *int:
			*x = 1 + i%3
		case *bool:
			*x = true
		case *time.Duration:
			*x = time.Duration(i) * ms
		case *time.Time:
			*x = base.Add(time.Duration(i) * time.Second)
		default:
			t.Fatalf("field %s: type %s not covered", v.Type().Field(i).Name, f.Type())
		}
	}
	want := *p.s.rampup
	st := p.s.exportLearned()
	q := newPolicy(t, rampConfig())
	require.NoError(t, q.s.importLearned(&st))
	got := *q.s.rampup
	got.rate = want.rate // configure clamps the rate to its bounds
	assert.Equal(t, want, got)
}

// settledAt puts the policy's rampup in its steady state at rate good,
// with no bad rate known, and starts a window.
func (p *policy) settledAt(good float64) *rampup {
	r := p.s.rampup
	r.rate, r.good, r.settled = good, good, true
	r.changed = p.now
	p.s.refresh()
	r.newWindow(p.now)
	return r
}

// steadyWindow answers a window's requests paced at the rate, all 200,
// then closes the window.
func (p *policy) steadyWindow() {
	gap := time.Duration(float64(time.Second) / p.rate())
	for end := p.now.Add(p.s.cfg.Window); p.now.Before(end); p.now = p.now.Add(gap) {
		p.answer(p.now.Add(-10*ms), ok)
	}
	p.s.tick(p.now)
}

// TestRampupSteadyClimbsCapped: quiet steady windows climb 5, 10, then
// 20 % per window, never more: doubling on (40 %) overshot HAProxy's
// limit by 23 % from a first estimate of 63 % of it.
func TestRampupSteadyClimbsCapped(t *testing.T) {
	p := newPolicy(t, rampConfig())
	p.settledAt(10)
	var climbs []float64
	for range 5 {
		before := p.rate()
		p.steadyWindow()
		climbs = append(climbs, math.Round(100*(p.rate()/before-1)))
	}
	assert.Equal(t, []float64{5, 10, 20, 20, 20}, climbs)
}

// TestRampupFailedSteadyProbeDips: a steady probe above the good rate
// refused with a 429 goes back to half the good rate until the next
// success, which restores the good rate (a limiter that counts refused
// requests stays shut while the client knocks near its limit); a probe
// answered by a success that says the quota is spent goes back to the
// good rate at once (the server's gate holds the scope meanwhile).
func TestRampupFailedSteadyProbeDips(t *testing.T) {
	p := newPolicy(t, rampConfig())
	r := p.settledAt(10)
	p.steadyWindow()
	require.InDelta(t, 10.5, p.rate(), 1e-9, "a quiet window probes 5 % above")
	p.now = p.now.Add(time.Second)
	p.answer(p.now.Add(-10*ms), tooMany)
	assert.Equal(t, 5.0, p.rate(), "half the good rate")
	assert.Equal(t, 10.5, r.bad)
	p.now = p.now.Add(time.Second)
	p.answer(p.now.Add(-10*ms), ok)
	assert.Equal(t, 10.0, p.rate(), "the next success restores the good rate")

	p = newPolicy(t, rampConfig())
	r = p.settledAt(10)
	p.steadyWindow()
	require.InDelta(t, 10.5, p.rate(), 1e-9)
	p.now = p.now.Add(time.Second)
	p.answer(p.now.Add(-10*ms), Feedback{Status: 200, Exhausted: true})
	assert.Equal(t, 10.0, p.rate(), "a spent quota's success: back to the good rate, no dip")
	assert.False(t, r.dip)
}

// TestRampupStatedRateStepsDown: a server that states 10 req/s and
// refuses at 9.8 with Retry-After: 1 (go-chi/httprate rounds its sliding
// count, and asks for its whole window after each refusal) gets a step
// down of 5 %, not the pace its gates left (7.3 req/s in internal/sim's
// cold-10per1s-httprate before this rule, 80 % of what it admits); a
// server that states nothing still gets that pace.
func TestRampupStatedRateStepsDown(t *testing.T) {
	for _, stated := range []float64{10, 0} {
		p := newPolicy(t, rampConfig())
		p.answer(p.now.Add(-10*ms), Feedback{Status: 200, StatedRate: 10})
		r := p.settledAt(9.8)
		r.stated = stated
		rate := 9.8
		gap := time.Duration(float64(time.Second) / rate)
		for i := 1; p.s.rampup.rate == 9.8 && i < 1000; i++ {
			p.now = p.now.Add(gap)
			if i%20 == 0 {
				p.answer(p.now.Add(-ms), Feedback{Status: 429, Wait: time.Second, HasWait: true})
				p.now = p.now.Add(time.Second) // the gate
				continue
			}
			p.answer(p.now.Add(-ms), ok)
		}
		if stated > 0 {
			assert.InDelta(t, 9.8*0.95, p.rate(), 1e-9, "stated: a 5 %% step")
		} else {
			assert.Less(t, p.rate(), 9.8*0.85, "not stated: the pace the gates left")
		}
	}
}

// TestRampupBisectionEnd: the search stops bisecting at 4 % where a failed
// probe is cheap (rate x latency <= 2: one refusal or so, and at 1 req/s
// each cost the first minute about one answer in sixty), at 2 % where it
// is not (50 req/s at 100 ms: about 3 refusals a probe, 50 at 2 s, better
// spent in the search than in the steady state's windows).
func TestRampupBisectionEnd(t *testing.T) {
	for _, c := range []struct {
		good, bad float64
		lat       time.Duration
		settled   bool
	}{
		{1, 1.05, 50 * ms, false},
		{1, 1.03, 50 * ms, true},
		{1, 1.03, 2 * time.Second, true},
		{50, 51.5, 100 * ms, false},
		{50, 50.9, 100 * ms, true},
	} {
		p := newPolicy(t, rampConfig())
		r := p.s.rampup
		r.lat, r.good, r.bad = c.lat, c.good, c.bad
		r.set(p.now, &p.s.cfg, 16, c.good)
		gap := time.Duration(float64(time.Second) / c.good)
		for i := 0; i < 10 && r.rate == c.good && !r.settled; i++ { // one good round at the good rate
			p.now = p.now.Add(gap)
			p.answer(p.now.Add(-ms), ok)
		}
		assert.Equal(t, c.settled, r.settled, "good %v bad %v at %v", c.good, c.bad, c.lat)
		if !c.settled {
			assert.InDelta(t, math.Sqrt(c.good*c.bad), r.rate, 1e-9, "bisects")
		}
	}
}

// TestRampupRefusalsAfterACycleNotCounted: refusals in the 5 s after a
// period of refusals ended are the server's memory letting go (a sliding
// window frees what the start-up burst took at the pace it was taken),
// not the steady rate's: the window does not count them, and does not step
// the rate down for them (cold-600pm-sliding held 94.5 % of its limit for
// that step, 98.5 % without it).
func TestRampupRefusalsAfterACycleNotCounted(t *testing.T) {
	p := newPolicy(t, rampConfig())
	r := p.settledAt(10)
	r.released = p.now
	for range 3 {
		p.now = p.now.Add(time.Second)
		p.answer(p.now.Add(-10*ms), tooMany)
	}
	assert.Zero(t, r.winSignals, "within 5 s of the release")
	p.now = p.now.Add(3 * time.Second)
	p.answer(p.now.Add(-10*ms), tooMany)
	assert.Equal(t, 1, r.winSignals, "6 s after it")
}

// TestRampupFailedProbeExcusesOnlyItself: a window with a failed steady
// probe does not step down for the probe's refusal, but does for refusals
// at the good rate after it (a token bucket's burst proved a rate just over
// its limit good for a window).
func TestRampupFailedProbeExcusesOnlyItself(t *testing.T) {
	for _, after := range []int{0, 3} {
		p := newPolicy(t, rampConfig())
		r := p.settledAt(10)
		r.bad = 10.4
		p.steadyWindow() // a quiet window: probes above 10 next
		require.Greater(t, p.rate(), 10.0)
		p.now = p.now.Add(time.Second)
		p.answer(p.now.Add(-10*ms), tooMany) // the probe fails: back to 10 (halved until a success)
		p.now = p.now.Add(time.Second)
		p.answer(p.now.Add(-10*ms), ok)
		require.Equal(t, 10.0, p.rate())
		for range after {
			p.now = p.now.Add(5 * time.Second)
			p.answer(p.now.Add(-10*ms), tooMany)
		}
		p.advance(p.s.cfg.Window)
		if after == 0 {
			assert.Equal(t, 10.0, p.rate(), "the probe's own refusal: no step down")
		} else {
			assert.Less(t, p.rate(), 10.0, "refusals at the good rate after the probe: a step down")
		}
	}
}

// TestRampupCycleWindowsOutliveARefusal: after a first quota cycle's
// estimate, the steady state judges in windows of one cycle, and keeps
// to them once a climb is refused, so the bisection towards the refused
// rate goes on a cycle apart, not a minute apart (a limiter that counts
// refusals: 90 % of its limit after 129 s instead of 280).
func TestRampupCycleWindowsOutliveARefusal(t *testing.T) {
	p := newPolicy(t, rampConfig())
	r := p.settledAt(4)
	r.span, r.cycleLen = 13*time.Second, 13*time.Second
	r.rate = 4.4 // a climb
	p.now = p.now.Add(time.Second)
	p.answer(p.now.Add(-10*ms), tooMany)
	assert.Equal(t, 13*time.Second, r.window(&p.s.cfg), "still a cycle")
	assert.Less(t, r.window(&p.s.cfg), p.s.cfg.Window)
}
