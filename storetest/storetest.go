// Package storetest is the conformance suite every store.Store runs:
// two managers (two workers) share one store and a fake clock, and each
// rule of admission and each kind of learned state must hold across them.
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
//			return mystore.New(..., clock)
//		})
//	}
//
// The store must take its time from clock, so the suite can move it.
// The cases of waiters' turns (first come, first served across workers)
// run on every store; those of foreign state, which a store must hold
// within each request's bounds, run when the store says how to plant it
// (WithForeign).
package storetest

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/throttletest"
)

// NewStore returns an empty store on clock. Each call must return a store
// whose state is independent of the stores returned before (a fresh key
// prefix, say).
type NewStore func(t *testing.T, clock throttle.Clock) store.Store

// An Option changes what the suite expects. A nil Option panics when Run
// applies it.
type Option func(*options)

type options struct {
	partial  bool
	plant    Plant
	leaseTTL time.Duration
}

// PartialAdmission is for stores that admit a multi-scope request scope by
// scope (redisstore with Options.Cluster): a refused request gives back the
// slots it took in its other scopes, but may have used a delay turn there.
func PartialAdmission() Option { return func(o *options) { o.partial = true } }

// Run runs the suite on the stores newStore makes.
func Run(t *testing.T, newStore NewStore, opts ...Option) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	for _, tc := range []struct {
		name string
		f    func(*testing.T, *pair)
	}{
		{"ConcurrencyAcrossWorkers", testConcurrency},
		{"DelayAcrossWorkers", testDelay},
		{"ClockMovedBack", testClockMovedBack},
		{"SlotDelay", testSlotDelay},
		{"SlotsAboveLoweredConcurrency", testSlotsAboveLoweredConcurrency},
		{"QuotaAndCorrection", testQuota},
		{"MultiScopeAllOrNothing", testMultiScope},
		{"GateShared", testGate},
		{"BackoffShared", testBackoff},
		{"AutoThrottleMergedOnConflict", testAutoThrottleMerge},
		{"WokenByRelease", testWake},
		{"DeadlineBeforeReady", testDeadline},
		{"CancelledWaitConsumesNothing", testCancel},
		{"ReleaseIdempotentUnknownLease", testRelease},
		{"LearnedVersions", testVersions},
		{"TurnOrder", testTurnOrder},
		{"TurnGrace", testTurnGrace},
		{"TurnsAcrossWorkers", testTurnsAcrossWorkers},
		{"ForeignLease", testForeignLease},
		{"ForeignTimes", testForeignTimes},
		{"ForeignLimits", testForeignLimits},
		{"ForeignGarbage", testForeignGarbage},
		{"ForeignVersion", testForeignVersion},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.name, "Foreign") && o.plant == nil {
				t.Skip("the store gave no way to plant foreign state (storetest.WithForeign)")
			}
			// Near the real time: context deadlines are real times.
			clock := throttletest.NewClock(time.Now().Truncate(time.Second))
			tc.f(t, &pair{t: t, clock: clock, store: newStore(t, clock), opts: o})
		})
	}
}

// pair is two workers on one store.
type pair struct {
	opts  options
	t     *testing.T
	clock *throttletest.Clock
	store store.Store
	// workerClock, when set, is the workers' clock instead of clock (a
	// view of it).
	workerClock throttle.Clock
}

// config is a scope with no jitter and no delays unless a test sets them.
func config(f func(*throttle.ScopeConfig)) throttle.ScopeConfig {
	sc := throttle.DefaultConfig().Default
	sc.Delay, sc.SlotDelay, sc.Jitter, sc.Backoff.Jitter = 0, 0, throttle.Jitter{}, throttle.Jitter{}
	if f != nil {
		f(&sc)
	}
	return sc
}

func (p *pair) workers(sc throttle.ScopeConfig) (*throttle.ThrottlingManager, *throttle.ThrottlingManager) {
	p.t.Helper()
	mk := func() *throttle.ThrottlingManager {
		cfg := throttle.DefaultConfig()
		cfg.Default = sc
		cfg.Clock = p.clock
		if p.workerClock != nil {
			cfg.Clock = p.workerClock
		}
		cfg.Store = p.store
		cfg.Robots.Enabled = false
		m, err := throttle.New(cfg)
		if err != nil {
			p.t.Fatal(err)
		}
		return m
	}
	return mk(), mk()
}

func req(t *testing.T, host string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustTry(t *testing.T, m *throttle.ThrottlingManager, r *http.Request) *throttle.Permit {
	t.Helper()
	p, adm, err := m.TryAcquire(r)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if p == nil {
		t.Fatalf("TryAcquire refused: %v at %v", adm.Reason, adm.At)
	}
	return p
}

func mustRefuse(t *testing.T, m *throttle.ThrottlingManager, r *http.Request, why throttle.Reason, at time.Time) {
	t.Helper()
	p, adm, err := m.TryAcquire(r)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if p != nil {
		p.Release(nil, nil)
		t.Fatalf("TryAcquire admitted; want refused (%v)", why)
	}
	if adm.Reason != why {
		t.Fatalf("refused for %v, want %v", adm.Reason, why)
	}
	if at.IsZero() && why == throttle.ReasonConcurrency {
		// "At a release"; a store may name a fallback, such as the
		// earliest lease expiry, but never the past.
		if !adm.At.IsZero() && adm.At.Before(p0(m)) {
			t.Fatalf("ready at %v, in the past", adm.At)
		}
		return
	}
	if d := adm.At.Sub(at); d < -time.Millisecond || d > time.Millisecond {
		t.Fatalf("ready at %v, want %v", adm.At, at)
	}
}

// p0 is m's time now.
func p0(m *throttle.ThrottlingManager) time.Time { return m.Clock().Now() }

var ok200 = &http.Response{StatusCode: http.StatusOK, Header: http.Header{}}

func testConcurrency(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Concurrency = 2 }))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	b := mustTry(t, w2, r)
	mustRefuse(t, w1, r, throttle.ReasonConcurrency, time.Time{})
	mustRefuse(t, w2, r, throttle.ReasonConcurrency, time.Time{})
	a.Release(ok200, nil)
	c := mustTry(t, w1, r)
	b.Release(ok200, nil)
	c.Release(ok200, nil)
}

func testDelay(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Delay = time.Second; sc.Concurrency = 4 }))
	r := req(t, "a.test")
	t0 := p.clock.Now()
	mustTry(t, w1, r).Release(ok200, nil)
	mustRefuse(t, w2, r, throttle.ReasonDelay, t0.Add(time.Second))
	p.clock.Advance(999 * time.Millisecond)
	mustRefuse(t, w2, r, throttle.ReasonDelay, t0.Add(time.Second))
	p.clock.Advance(time.Millisecond)
	mustTry(t, w2, r).Release(ok200, nil)
	mustRefuse(t, w1, r, throttle.ReasonDelay, t0.Add(2*time.Second))
}

// testClockMovedBack: the store's clock set back an hour holds the next
// start at most what its rule has left, counted from the jump: a delay of
// 1 s after a start, a server's gate of 10 s after a 429. The start
// recorded "in the future" counts as now, not an hour and a second from
// now, and the gate goes back with it (yet holds: the server asked).
func testClockMovedBack(t *testing.T, p *pair) {
	for _, tc := range []struct {
		name string
		host string
		resp func(*http.Request) *http.Response
		left time.Duration
	}{
		{"delay", "delay.test", func(*http.Request) *http.Response { return ok200 }, time.Second},
		{"gate", "gate.test", func(r *http.Request) *http.Response { return tooMany(r, 10) }, 10 * time.Second},
	} {
		w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Delay = time.Second; sc.Concurrency = 4 }))
		r := req(t, tc.host)
		mustTry(t, w1, r).Release(tc.resp(r), nil)
		p.clock.Advance(-time.Hour)
		t0 := p.clock.Now()
		if pm, _, err := w2.TryAcquire(r); err != nil || pm != nil {
			t.Fatalf("%s: admitted at the jump (%v): the rule had %v left", tc.name, err, tc.left)
		}
		for {
			p.clock.Advance(100 * time.Millisecond)
			pm, _, err := w2.TryAcquire(r)
			if err != nil {
				t.Fatal(err)
			}
			if pm != nil {
				pm.Release(ok200, nil)
				break
			}
			if waited := p.clock.Now().Sub(t0); waited > tc.left {
				t.Fatalf("%s: refused %v after the jump; the rule had %v left", tc.name, waited, tc.left)
			}
		}
	}
}

// testSlotDelay is the slot-delay rule's worked example: Concurrency 2, Delay 0.3 s,
// SlotDelay 1 s: starts at 0.0, 0.3, 1.0, the workers alternating.
func testSlotDelay(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) {
		sc.Concurrency, sc.Delay, sc.SlotDelay = 2, 300*time.Millisecond, time.Second
	}))
	r := req(t, "a.test")
	t0 := p.clock.Now()
	mustTry(t, w1, r).Release(ok200, nil)
	mustRefuse(t, w2, r, throttle.ReasonDelay, t0.Add(300*time.Millisecond))
	p.clock.Advance(300 * time.Millisecond)
	mustTry(t, w2, r).Release(ok200, nil)
	mustRefuse(t, w1, r, throttle.ReasonSlotDelay, t0.Add(time.Second))
	p.clock.Advance(700 * time.Millisecond)
	mustTry(t, w1, r).Release(ok200, nil)
}

// testSlotsAboveLoweredConcurrency: Concurrency 4, Delay 0, SlotDelay
// 1 s; four starts at 0, then the concurrency drops to 1. The one slot
// left paces the scope: starts at 1.0, 2.0, not at 1.0 and then at once
// in the slots the concurrency no longer has.
func testSlotsAboveLoweredConcurrency(t *testing.T, p *pair) {
	sc := config(func(sc *throttle.ScopeConfig) { sc.Concurrency, sc.Delay, sc.SlotDelay = 4, 0, time.Second })
	w1, w2 := p.workers(sc)
	r := req(t, "a.test")
	t0 := p.clock.Now()
	var held []*throttle.Permit
	for i := range 4 {
		held = append(held, mustTry(t, []*throttle.ThrottlingManager{w1, w2}[i%2], r))
	}
	for _, h := range held {
		h.Release(ok200, nil)
	}
	one := sc
	one.Concurrency = 1
	for _, w := range []*throttle.ThrottlingManager{w1, w2} {
		if err := w.SetScopeConfig("a.test", one); err != nil {
			t.Fatal(err)
		}
	}
	p.clock.Advance(time.Second)
	mustTry(t, w1, r).Release(ok200, nil)
	mustRefuse(t, w2, r, throttle.ReasonSlotDelay, t0.Add(2*time.Second))
	p.clock.Advance(100 * time.Millisecond)
	mustRefuse(t, w1, r, throttle.ReasonSlotDelay, t0.Add(2*time.Second))
}

func testQuota(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) {
		sc.Concurrency, sc.Quota, sc.Window = 8, 3, time.Minute
	}))
	costly := func(n int64) *http.Request {
		r := req(t, "api.test")
		return r.WithContext(throttle.WithScopes(r.Context(), throttle.Scope{Key: "api", Cost: n}))
	}
	t0 := p.clock.Now()
	a := mustTry(t, w1, costly(2))
	mustRefuse(t, w2, costly(2), throttle.ReasonQuota, t0.Add(time.Minute))
	// The request cost 1, not 2: the window has room for 2 more.
	a.ReleaseFeedback(throttle.Feedback{Status: 200, Quota: []throttle.QuotaUse{{Scope: "api", Cost: 1, HasCost: true}}})
	mustTry(t, w2, costly(2)).Release(ok200, nil)
	mustRefuse(t, w1, costly(1), throttle.ReasonQuota, t0.Add(time.Minute))
	p.clock.Advance(time.Minute)
	mustTry(t, w1, costly(3)).Release(ok200, nil)
	// The server says 0 remain: the window is full for everyone.
	p.clock.Advance(time.Minute)
	b := mustTry(t, w1, costly(1))
	b.ReleaseFeedback(throttle.Feedback{Status: 200, Quota: []throttle.QuotaUse{{Scope: "api", Remaining: 0, HasRemaining: true}}})
	mustRefuse(t, w2, costly(1), throttle.ReasonQuota, t0.Add(3*time.Minute))
}

func testMultiScope(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Delay = time.Second }))
	both := req(t, "a.test")
	both = both.WithContext(throttle.WithScopeKeys(both.Context(), "a", "b"))
	onlyB := req(t, "b.test")
	onlyB = onlyB.WithContext(throttle.WithScopeKeys(onlyB.Context(), "b"))
	onlyA := req(t, "a.test")
	onlyA = onlyA.WithContext(throttle.WithScopeKeys(onlyA.Context(), "a"))
	held := mustTry(t, w1, onlyB)
	// b is busy: the two-scope request is refused and takes nothing in a.
	mustRefuse(t, w2, both, throttle.ReasonConcurrency, time.Time{})
	if p.opts.partial {
		// a's slot was given back; its delay turn may be used.
		p.clock.Advance(time.Second)
	}
	mustTry(t, w1, onlyA).Release(ok200, nil)
	held.Release(ok200, nil)
	p.clock.Advance(time.Second)
	mustTry(t, w2, both).Release(ok200, nil)
	mustRefuse(t, w1, onlyA, throttle.ReasonDelay, p.clock.Now().Add(time.Second))
	mustRefuse(t, w1, onlyB, throttle.ReasonDelay, p.clock.Now().Add(time.Second))
}

func tooMany(r *http.Request, retryAfter int) *http.Response {
	return throttletest.Response(r, http.StatusTooManyRequests, "", "Retry-After", strconv.Itoa(retryAfter))
}

func testGate(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Concurrency = 4 }))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	a.Release(tooMany(r, 10), nil)
	mustRefuse(t, w2, r, throttle.ReasonGate, p.clock.Now().Add(10*time.Second))
	p.clock.Advance(10 * time.Second)
	mustTry(t, w2, r).Release(ok200, nil)
}

func testBackoff(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Concurrency = 4 }))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	a.Release(throttletest.Response(r, http.StatusServiceUnavailable, ""), nil)
	// Delay 0 draws its first step at MinDelay (1 s), for both workers.
	mustRefuse(t, w2, r, throttle.ReasonBackoff, a.Acquired().Add(time.Second))
	p.clock.Advance(time.Second)
	b := mustTry(t, w2, r)
	b.Release(throttletest.Response(r, http.StatusServiceUnavailable, ""), nil)
	mustRefuse(t, w1, r, throttle.ReasonBackoff, b.Acquired().Add(2*time.Second))
}

// testAutoThrottleMerge: both workers hold permits on the same version of
// the learned state and release with latency 2 s: the second release
// conflicts, and its merge must give what one process would learn from the
// two responses in turn, 5 -> 3.5 -> 2.75 s, not 3.5 s twice.
func testAutoThrottleMerge(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) {
		sc.Concurrency = 4
		sc.AutoThrottle.Enabled = true
	}))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	p.clock.Advance(5 * time.Second)
	b := mustTry(t, w2, r)
	p.clock.Advance(2 * time.Second)
	a.ReleaseFeedback(throttle.Feedback{Status: 200, Latency: 2 * time.Second})
	b.ReleaseFeedback(throttle.Feedback{Status: 200, Latency: 2 * time.Second})
	p.clock.Advance(10 * time.Second)
	c := mustTry(t, w1, r)
	want := c.Acquired().Add(2750 * time.Millisecond)
	mustRefuse(t, w2, r, throttle.ReasonAutoThrottle, want)
	mustRefuse(t, w1, r, throttle.ReasonAutoThrottle, want)
	c.Release(nil, context.Canceled) // a transport error changes no delay
}

func testWake(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(nil))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	got := make(chan error, 1)
	go func() {
		pm, err := w2.Acquire(context.Background(), r)
		if err == nil {
			pm.Release(ok200, nil)
		}
		got <- err
	}()
	waitWaiting(t, w2)
	a.Release(ok200, nil) // no clock movement: only the release wakes w2
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a waiter was not woken by a release in another worker")
	}
}

// waitWaiting returns once m has a caller waiting in Acquire.
func waitWaiting(t *testing.T, m *throttle.ThrottlingManager) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Waiting() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no caller started waiting")
		}
		runtime.Gosched() // let the Acquire goroutine reach its wait
	}
}

func testDeadline(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Delay = time.Minute; sc.Concurrency = 2 }))
	r := req(t, "a.test")
	mustTry(t, w1, r).Release(ok200, nil)
	// A deadline a minute's delay will not meet. It is a real time, and
	// the clock starts up to a second behind the real one, so it is
	// placed 10 s on: 1 s could leave a loaded machine a few milliseconds
	// to ask the store, and a deadline that passes during the call makes
	// a WaitError with no scope (the caller left, nothing refused it).
	ctx, cancel := context.WithDeadline(context.Background(), p.clock.Now().Add(10*time.Second))
	defer cancel()
	_, err := w2.Acquire(ctx, r)
	var we *throttle.WaitError
	if !errors.As(err, &we) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want a *WaitError with DeadlineExceeded at once", err)
	}
	if we.Reason != throttle.ReasonDelay || we.Scope != "a.test" {
		t.Fatalf("WaitError names %q (%v), want a.test (delay)", we.Scope, we.Reason)
	}
}

func testCancel(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(nil))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := w2.Acquire(ctx, r)
		got <- err
	}()
	waitWaiting(t, w2)
	cancel()
	if err := <-got; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	a.Release(ok200, nil)
	mustTry(t, w1, r).Release(ok200, nil) // the cancelled wait took no slot
}

func testRelease(t *testing.T, p *pair) {
	w1, w2 := p.workers(config(nil))
	r := req(t, "a.test")
	a := mustTry(t, w1, r)
	a.Release(ok200, nil)
	a.Release(ok200, nil)
	b := mustTry(t, w2, r)
	a.Release(ok200, nil) // must not free b's slot
	mustRefuse(t, w1, r, throttle.ReasonConcurrency, time.Time{})
	b.Release(ok200, nil)
	ans, err := p.store.Release(context.Background(), &store.Release{
		Lease: "no-such-lease", Scopes: []store.ReleaseScope{{Key: "a.test", QuotaFloor: -1}}})
	if err != nil || len(ans.Conflicts) != 0 {
		t.Fatalf("releasing an unknown lease: %v, %v", ans, err)
	}
	mustTry(t, w1, r).Release(ok200, nil)
}

// testVersions checks the store's side of learned state directly: a
// record is stored only on the version it was derived from (or where the
// store has none), and handed out only to callers holding an older one.
func testVersions(t *testing.T, p *pair) {
	ctx := context.Background()
	rel := func(v int64, data string) store.ReleaseAnswer {
		ans, err := p.store.Release(ctx, &store.Release{Scopes: []store.ReleaseScope{{
			Key: "v.test", QuotaFloor: -1, Learned: true, Version: v, Data: []byte(data),
			Delay: 0, Concurrency: 10}}})
		if err != nil {
			t.Fatal(err)
		}
		return ans
	}
	if ans := rel(0, `{"v":1}`); len(ans.Conflicts) != 0 {
		t.Fatalf("first record refused: %+v", ans)
	}
	if ans := rel(0, `{"v":1,"x":1}`); len(ans.Conflicts) != 1 || ans.Conflicts[0].Learned.Version != 1 || string(ans.Conflicts[0].Learned.Data) != `{"v":1}` {
		t.Fatalf("stale record: %+v, want a conflict with version 1", ans)
	}
	if ans := rel(1, `{"v":1,"y":2}`); len(ans.Conflicts) != 0 {
		t.Fatalf("record on the current version refused: %+v", ans)
	}
	admit := func(v int64) store.Answer {
		ans, err := p.store.Admit(ctx, &store.Request{Lease: "l" + strconv.FormatInt(v, 10), Scopes: []store.Scope{{
			Key: "v.test", Cost: 1, Concurrency: 10, Jitter: 1, Version: v}}})
		if err != nil {
			t.Fatal(err)
		}
		if !ans.Admitted {
			t.Fatalf("refused: %+v", ans)
		}
		return ans
	}
	if ans := admit(0); ans.Learned[0].Version != 2 || string(ans.Learned[0].Data) != `{"v":1,"y":2}` {
		t.Fatalf("admission with an old version got %+v, want version 2", ans.Learned)
	}
	if ans := admit(2); ans.Learned[0].Data != nil {
		t.Fatalf("admission with the current version got data %q", ans.Learned[0].Data)
	}
}
