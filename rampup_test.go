package throttle

import (
	"container/heap"
	"math"
	"math/rand/v2"
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

// TestRampupFollowsALimitBelowThePace: a server that allows less than the
// configured pace is followed down by rampup (it owns the rate signals),
// not left to backoff's doubling.
func TestRampupFollowsALimitBelowThePace(t *testing.T) {
	cfg := rampConfig()
	res := runScope(t, cfg, bucketServer(0.25, 1), 50*ms, 8, 20*time.Minute)
	rate := res.okRate(10*time.Minute, 20*time.Minute)
	assert.GreaterOrEqual(t, rate, 0.9*0.25, "rate %.3f", rate)
	assert.LessOrEqual(t, rate, 0.25)
	assert.LessOrEqual(t, res.signalsPerMin(10*time.Minute, 20*time.Minute), 2.0)
}

// TestRampupColdStart: with rampup on and every other setting default, a
// token bucket of 20 req/s (burst 10, 50 ms) is reached within the first
// minute (trailing-60 s 2xx rate >= 90 % of it by 60 s), then held at >=
// 95 % with <= 2 signals a minute.
func TestRampupColdStart(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	res := runScope(t, cfg, bucketServer(20, 11), 50*ms, 32, 10*time.Minute)
	assert.GreaterOrEqual(t, res.okRate(0, time.Minute), 0.9*20, "first minute")
	assert.GreaterOrEqual(t, res.okRate(2*time.Minute, 10*time.Minute), 0.95*20)
	assert.LessOrEqual(t, res.signalsPerMin(2*time.Minute, 10*time.Minute), 2.0)
}

// TestRampupQuotaPerMinute: a quota of 600 per fixed minute, no headers.
// Rampup spends it in the first seconds, then measures the cycle from one
// end of refusals to the next (a quota's new window) and settles at
// 600/min: >= 95 % of it from the third minute.
func TestRampupQuotaPerMinute(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	res := runScope(t, cfg, windowServer(600, time.Minute), 50*ms, 32, 10*time.Minute)
	assert.GreaterOrEqual(t, res.okRate(2*time.Minute, 10*time.Minute), 0.95*10)
	assert.LessOrEqual(t, res.okRate(2*time.Minute, 10*time.Minute), 10.0)
}

// TestRampupLimiterThatCountsRefusals: 50 requests in any 10 s, refused
// ones counted too (HAProxy's stick table on http_req_rate). The first
// cycle, from the first request to the end of the refusals the search's
// overshoot drew, is longer than the server's memory (the client's own
// knocking kept it refused), so its estimate is low: rampup judges it in
// windows of one cycle and climbs from it, and a refusal period after a
// failed probe settles at the rate a quiet window proved, not at the
// cycle's average. (It sat at 64-77 % of the limit for minutes.)
func TestRampupLimiterThatCountsRefusals(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	res := runScope(t, cfg, countingServer(50, 10*time.Second), 10*ms, 16, 10*time.Minute)
	assert.GreaterOrEqual(t, res.okRate(time.Minute, 2*time.Minute), 0.8*5, "second minute")
	assert.GreaterOrEqual(t, res.okRate(5*time.Minute, 10*time.Minute), 0.9*5, "minutes 5-10")
	assert.LessOrEqual(t, res.signalsPerMin(2*time.Minute, 10*time.Minute), 2.0)
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

// Interleaved 503s are a rate limit, not an outage: nginx's limit_req
// answers 503 by default.
func TestRampup503BetweenSuccessesIsARateLimit(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	srv := bucketServer(5, 1)
	srv.status = 503
	res := runScope(t, cfg, srv, 50*ms, 16, 10*time.Minute)
	assert.GreaterOrEqual(t, res.okRate(0, time.Minute), 0.9*5, "first minute")
	assert.GreaterOrEqual(t, res.okRate(2*time.Minute, 10*time.Minute), 0.95*5)
	assert.LessOrEqual(t, res.signalsPerMin(2*time.Minute, 10*time.Minute), 2.0)
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

func TestRampupCapDefaultsToGlobalConcurrency(t *testing.T) {
	cfg := rampConfig()
	cfg.Rampup.MaxConcurrency = 0
	res := runScope(t, cfg, bucketServer(1e6, 1e6), time.Second, 64, 2*time.Minute)
	assert.Equal(t, 16, res.peak, "GlobalConcurrency 16 of the test's ScopeParams")
}

// TestRampupSteadyProbesSpaceOut: at a strict limit (no burst) with a
// high latency, each probe costs the requests it had in flight; failed
// probes come further apart so the steady state stays near the target
// of one signal per window.
func TestRampupSteadyProbesSpaceOut(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	cfg.Rampup.MaxConcurrency = 128
	res := runScope(t, cfg, bucketServer(20, 1), 2*time.Second, 128, 30*time.Minute)
	assert.GreaterOrEqual(t, res.okRate(10*time.Minute, 30*time.Minute), 0.95*20)
	assert.LessOrEqual(t, res.signalsPerMin(10*time.Minute, 30*time.Minute), 2.0)
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

// ---- a policy-level crawl in explicit time, for the rules above ----

// bucket is a token bucket of rate per second holding at most size
// tokens (size 1: no burst, as nginx's limit_req burst=0), answering
// status (429 by default) without a token.
type bucket struct {
	rate, size, tokens float64
	last               time.Time
	status             int
}

func bucketServer(rate, size float64) *bucket {
	return &bucket{rate: rate, size: size, tokens: size, status: 429}
}

func (b *bucket) answer(now time.Time) int {
	if !b.last.IsZero() {
		b.tokens = math.Min(b.size, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return 200
	}
	return b.status
}

// window is a quota of n per fixed window w (aligned to the epoch).
type window struct {
	n     int
	w     time.Duration
	cur   int64
	count int
}

func windowServer(n int, w time.Duration) *window { return &window{n: n, w: w, cur: -1} }

func (q *window) answer(now time.Time) int {
	if k := now.UnixNano() / int64(q.w); k != q.cur {
		q.cur, q.count = k, 0
	}
	if q.count < q.n {
		q.count++
		return 200
	}
	return 429
}

// counting is a limit of n requests in any trailing w, refused ones
// counted too (HAProxy's stick table on http_req_rate).
type counting struct {
	n    int
	w    time.Duration
	seen []time.Time
}

func countingServer(n int, w time.Duration) *counting { return &counting{n: n, w: w} }

func (c *counting) answer(now time.Time) int {
	i := 0
	for i < len(c.seen) && !c.seen[i].After(now.Add(-c.w)) {
		i++
	}
	c.seen = append(c.seen[i:], now)
	if len(c.seen) <= c.n {
		return 200
	}
	return 429
}

type answerer interface{ answer(time.Time) int }

// scopeRun is what runScope recorded: each request's start and status.
type scopeRun struct {
	t0     time.Time
	starts []time.Duration
	status []int
	peak   int
}

func (r *scopeRun) okRate(from, to time.Duration) float64 {
	n := 0
	for i, s := range r.starts {
		if s >= from && s < to && r.status[i] < 300 {
			n++
		}
	}
	return float64(n) / (to - from).Seconds()
}

func (r *scopeRun) signalsPerMin(from, to time.Duration) float64 {
	n := 0
	for i, s := range r.starts {
		if s >= from && s < to && r.status[i] >= 400 {
			n++
		}
	}
	return float64(n) / (to - from).Minutes()
}

type scopeEvent struct {
	at     time.Time
	seq    int
	ticket Ticket
	status int
}

type scopeEvents []scopeEvent

func (h scopeEvents) Len() int { return len(h) }
func (h scopeEvents) Less(i, j int) bool {
	return h[i].at.Before(h[j].at) || h[i].at.Equal(h[j].at) && h[i].seq < h[j].seq
}
func (h scopeEvents) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *scopeEvents) Push(x any)   { *h = append(*h, x.(scopeEvent)) }
func (h *scopeEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// runScope drives one default ScopeManager with cfg against srv, whose
// answers take lat, with at most workers requests in flight, for d: a
// crawl in explicit time, no goroutines, deterministic (jitter seeded).
func runScope(t *testing.T, cfg ScopeConfig, srv answerer, lat time.Duration, workers int, d time.Duration) *scopeRun {
	t.Helper()
	require.NoError(t, cfg.validate("test"))
	s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
		Rand: rand.New(rand.NewPCG(1, 2))}).(*defaultScope)
	now := time.Unix(1_000_000, 0)
	run := &scopeRun{t0: now}
	end := now.Add(d)
	var evs scopeEvents
	seq, inFlight := 0, 0
	for now.Before(end) {
		// Start what may start now.
		for inFlight < workers {
			adm := s.Admit(now, 1)
			if adm.Reason != ReasonNone {
				break
			}
			tk := s.Start(now, 1)
			inFlight++
			run.peak = max(run.peak, inFlight)
			st := srv.answer(now)
			run.starts = append(run.starts, now.Sub(run.t0))
			run.status = append(run.status, st)
			seq++
			heap.Push(&evs, scopeEvent{at: now.Add(lat), seq: seq, ticket: tk, status: st})
		}
		// Advance to the next answer or the next admission, whichever
		// comes first.
		next := end
		if inFlight < workers {
			if adm := s.Admit(now, 1); !adm.At.IsZero() && adm.At.Before(next) {
				next = adm.At
			}
		}
		if len(evs) > 0 && evs[0].at.Before(next) {
			next = evs[0].at
		}
		if !next.After(now) {
			next = now.Add(time.Microsecond)
		}
		now = next
		for len(evs) > 0 && !evs[0].at.After(now) {
			e := heap.Pop(&evs).(scopeEvent)
			inFlight--
			s.Finish(e.at, e.ticket, &Feedback{Status: e.status, Latency: lat})
		}
	}
	return run
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
