package throttle

import (
	"container/heap"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
// ones counted too (HAProxy's stick table on http_req_rate). The slow
// start's overshoot keeps the counter full for longer than its period, so
// the first cycle (rule 5) measures it low, about 3.1 req/s; rampup must
// climb from there and never freeze below it (it sat at 64-77 % of the
// limit for minutes). It climbs slowly: each climb holds two cycles, the
// time such a counter can take to refuse it. The second minute's 76 % is
// a known gap (the grid's counting shapes reach 90 % after 2-6 minutes);
// the bounds below are today's, so that it cannot get worse unseen.
func TestRampupLimiterThatCountsRefusals(t *testing.T) {
	cfg := defaultScopeConfig()
	cfg.Rampup.Enabled = true
	res := runScope(t, cfg, countingServer(50, 10*time.Second), 10*ms, 16, 10*time.Minute)
	assert.GreaterOrEqual(t, res.okRate(time.Minute, 2*time.Minute), 0.75*5, "second minute")
	assert.GreaterOrEqual(t, res.okRate(5*time.Minute, 10*time.Minute), 0.95*5, "minutes 5-10")
	assert.LessOrEqual(t, res.signalsPerMin(2*time.Minute, 10*time.Minute), 2.0)
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
	scope  *defaultScope
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

// scopeEvent is a request in flight: its answer, fb, comes at at.
type scopeEvent struct {
	at     time.Time
	seq    int
	ticket Ticket
	fb     Feedback
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

// runScopeLogger, when not nil, logs runScope's adjustments (a debug
// aid: set it in a test to see a crawl's).
var runScopeLogger *slog.Logger

// runScope drives one default ScopeManager with cfg against srv, whose
// answers take lat, with at most workers requests in flight, for d: a
// crawl in explicit time, no goroutines, deterministic (jitter seeded).
func runScope(t *testing.T, cfg ScopeConfig, srv answerer, lat time.Duration, workers int, dur time.Duration) *scopeRun {
	t.Helper()
	require.NoError(t, cfg.validate("test"))
	s := NewDefaultScopeManager(ScopeParams{Key: "s", Config: cfg, GlobalConcurrency: 16,
		Rand: rand.New(rand.NewPCG(1, 2)), Logger: runScopeLogger}).(*defaultScope)
	d := &scopeDriver{s: s, now: time.Unix(1_000_000, 0), workers: workers}
	run := &scopeRun{t0: d.now, scope: s}
	end := d.now.Add(dur)
	for d.now.Before(end) {
		d.start(func(now time.Time) Feedback {
			run.peak = max(run.peak, d.inFlight)
			st := srv.answer(now)
			run.starts = append(run.starts, now.Sub(run.t0))
			run.status = append(run.status, st)
			return Feedback{Status: st, Latency: lat}
		})
		d.advance(end)
	}
	return run
}

// scopeDriver drives one default ScopeManager in explicit time, no
// goroutines: at most workers requests in flight, each answered when its
// Feedback's Latency has passed.
type scopeDriver struct {
	s             *defaultScope
	now           time.Time
	workers       int
	evs           scopeEvents
	seq, inFlight int
}

// start starts what may start now; answer gives each request's Feedback
// (called once the request counts as in flight).
func (d *scopeDriver) start(answer func(now time.Time) Feedback) {
	for d.inFlight < d.workers {
		if adm := d.s.Admit(d.now, 1); adm.Reason != ReasonNone {
			return
		}
		tk := d.s.Start(d.now, 1)
		d.inFlight++
		fb := answer(d.now)
		d.seq++
		heap.Push(&d.evs, scopeEvent{at: d.now.Add(fb.Latency), seq: d.seq, ticket: tk, fb: fb})
	}
}

// advance moves now to the next answer or admission, whichever comes
// first and no later than end, and delivers the answers due.
func (d *scopeDriver) advance(end time.Time) {
	next := end
	if d.inFlight < d.workers {
		if adm := d.s.Admit(d.now, 1); !adm.At.IsZero() && adm.At.Before(next) {
			next = adm.At
		}
	}
	if len(d.evs) > 0 && d.evs[0].at.Before(next) {
		next = d.evs[0].at
	}
	if !next.After(d.now) {
		next = d.now.Add(time.Microsecond)
	}
	d.now = next
	for len(d.evs) > 0 && !d.evs[0].at.After(d.now) {
		e := heap.Pop(&d.evs).(scopeEvent)
		d.inFlight--
		d.s.Finish(e.at, e.ticket, &e.fb)
	}
}
