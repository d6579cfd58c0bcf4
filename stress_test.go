package throttle

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestStressInvariants (issue 9 item 1) drives a manager with random
// configurations, 200 goroutines, multi-scope requests with costs, random
// cancellations and random feedback, in fake time, and checks the admission rules
// 1-6 below afterwards with a checker of its own that reads only what it recorded
// from outside: every permit's scopes, costs, start and end, and, for a
// third of the scopes, the order of the Start and Finish calls their policy
// saw (recScope). Zero violations are required. The rules as checked:
//
//  1. per scope, at most Concurrency permits at once;
//  2. consecutive starts in a scope at least Delay*(1+Jitter.Min) apart
//     (AutoThrottle and backoff may only lengthen that);
//  3. at most Concurrency starts in a scope within any SlotDelay (slots
//     can't be seen from outside: this is the consequence that can);
//  4. quota windows from the scope's first start, back to back: a start
//     is admitted only into an empty window or if the window's count plus
//     its cost is within Quota, the count corrected by the actual costs
//     (for the window of the start) and remaining counts given at release;
//  5. a permit's start is the instant Acquire returned, its scopes are
//     its request's, and each recorded scope's policy saw exactly those
//     starts, with those costs, and one finish per permit;
//  6. at most GlobalConcurrency permits at once.
//
// Events at the same fake instant are ordered in the library's favour
// from the permits' records (a release before a start), exactly from a
// recorded scope's sequence. After the workers: nothing held or waiting
// (Waiting, Stats), the counts agree with the permits seen, the bubble
// has its goroutines of before, and every scope admits up to its
// concurrency (or the global cap) again. The figures "at the limits" count
// starts made at a rule's limit, to show the rules were put to the test.
// Rampup (which lowers the delay on purpose), robots.txt and Stores are
// not part of it; scopes are never forgotten during a run.
//
// A failure prints its seed; replay it with
//
//	go test -run TestStressInvariants -stress.seed=N .
//	THROTTLE_STRESS_SEED=N go test -run TestStressInvariants .
//
// The configuration and each goroutine's requests are the same on replay;
// the interleaving within one fake instant is the scheduler's.

var stressSeedFlag = flag.String("stress.seed", "", "replay TestStressInvariants with this seed (or $THROTTLE_STRESS_SEED)")

const (
	stressWorkers = 200
	stressKeys    = 50
)

// stressSize returns how many seeds to run and how many requests each:
// three seeds of 100,000 requests (1-1.5 s a seed on a 2-core machine);
// under the race detector, which makes a seed of 100,000 take 7-12 s
// there, two seeds of 60,000; with -short, one seed of 10,000.
func stressSize() (seeds, requests int) {
	switch {
	case testing.Short():
		return 1, 10_000
	case raceEnabled:
		return 2, 60_000
	}
	return 3, 100_000
}

func TestStressInvariants(t *testing.T) {
	nseeds, requests := stressSize()
	var seeds []uint64
	s := *stressSeedFlag
	if s == "" {
		s = os.Getenv("THROTTLE_STRESS_SEED")
	}
	if s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("stress seed %q: %v", s, err)
		}
		seeds = []uint64{seed}
	} else {
		for range nseeds {
			seeds = append(seeds, rand.Uint64())
		}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Logf("seed %d (replay: go test -run 'TestStressInvariants' -stress.seed=%d .)", seed, seed)
			runStress(t, seed, requests)
		})
	}
}

// stressScope is one scope of the pool and its configuration.
type stressScope struct {
	key      string
	cfg      ScopeConfig
	recorded bool    // its policy is wrapped in a recScope
	signal   float64 // the share of its answers that are backoff signals
}

// stressPermit is what the test saw of one permit, from outside.
type stressPermit struct {
	keys     []string // merged and sorted, as the test computed them
	costs    []int64  // per key, merged
	start    time.Time
	observed time.Time // time.Now() when Acquire returned
	end      time.Time // when it was released
	quota    []QuotaUse
	gotKeys  []string // p.Scopes()
}

// scopeEv is one call to a recorded scope's policy, in the order the
// manager made them (under the scope's lock).
type scopeEv struct {
	start  bool
	at     time.Time
	cost   int64     // Start: its cost; Finish: the ticket's cost
	tStart time.Time // Finish: the ticket's start
	quota  []QuotaUse
}

// recScope wraps the default policy and records the Start and Finish
// calls the manager makes. The manager serialises calls to one scope, so
// evs needs no lock of its own.
type recScope struct {
	ScopeManager
	evs []scopeEv
}

func (r *recScope) Start(now time.Time, cost int64) Ticket {
	r.evs = append(r.evs, scopeEv{start: true, at: now, cost: cost})
	return r.ScopeManager.Start(now, cost)
}

func (r *recScope) Finish(now time.Time, t Ticket, fb *Feedback) {
	r.evs = append(r.evs, scopeEv{at: now, cost: t.Cost, tStart: t.Start, quota: slices.Clone(fb.Quota)})
	r.ScopeManager.Finish(now, t, fb)
}

// stressRun is one seed's run.
type stressRun struct {
	t      *testing.T
	seed   uint64
	m      *ThrottlingManager
	gc     int
	scopes []stressScope
	byKey  map[string]*stressScope
	// cumWeight are the scopes' cumulative weights: requests pick half
	// their scopes in proportion to the scope's capacity, so that the fast
	// scopes too have callers waiting at their limits instead of all of
	// them piling up behind the slowest few; the other half uniformly.
	cumWeight []float64

	recMu sync.Mutex
	recs  map[string][]*recScope // two callers racing for a new scope may both make one: one is dropped

	mu      sync.Mutex
	permits []stressPermit

	attempts, canceled, deadline, tryHits, doubles, badErrs atomic.Int64
}

func stressDuration(r *rand.Rand, maxD time.Duration) time.Duration {
	switch r.IntN(10) {
	case 0, 1:
		return 0
	case 2:
		return time.Duration(1 + r.Int64N(int64(maxD))) // any nanosecond
	}
	return time.Duration(1+r.Int64N(int64(maxD/time.Millisecond))) * time.Millisecond
}

func stressJitter(r *rand.Rand) Jitter {
	switch r.IntN(6) {
	case 0:
		return Jitter{}
	case 1:
		return symmetricJitter(0.5)
	case 2:
		return symmetricJitter(r.Float64())
	case 3:
		return Jitter{Min: -0.3 * r.Float64(), Max: 0.8 * r.Float64()} // asymmetric, e.g. -10 %..+30 %
	case 4:
		lo := 0.1 + 0.3*r.Float64()
		return Jitter{Min: lo, Max: lo + r.Float64()} // never shorter than the delay
	}
	return Jitter{Min: -1, Max: 0}
}

// config draws the manager's and the scopes' configuration.
func (st *stressRun) config(r *rand.Rand) Config {
	cfg := DefaultConfig()
	cfg.GlobalConcurrency = 1 + r.IntN(64)
	if r.IntN(4) == 0 {
		cfg.GlobalConcurrency = 1 + r.IntN(8) // callers queue for the cap often
	}
	cfg.JitterSeed = st.seed | 1
	// Scopes are never forgotten during a run, so each quota window grid
	// keeps the origin the checker models (the first start).
	cfg.IdleTimeout, cfg.LearnedIdleTimeout = 1000*time.Hour, 1000*time.Hour
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.Scopes = make(map[string]ScopeConfig)
	st.gc = cfg.GlobalConcurrency
	st.byKey = make(map[string]*stressScope)
	st.recs = make(map[string][]*recScope)
	for i := range stressKeys {
		sc := defaultScopeConfig()
		sc.Concurrency = 1 + r.IntN(32)
		sc.Delay = stressDuration(r, 2*time.Second)
		sc.SlotDelay = stressDuration(r, 2*time.Second)
		sc.Jitter = stressJitter(r)
		sc.Window = time.Duration(1+r.IntN(60)) * time.Second
		if r.IntN(5) == 0 {
			sc.Window += time.Duration(r.Int64N(int64(time.Second)))
		}
		if r.IntN(5) < 2 {
			sc.Quota = 1 + r.Int64N(40)
		}
		// Profiles that put one rule at the limit more often.
		switch x := r.IntN(20); {
		case x < 4: // slot delay
			sc.Concurrency = 2 + r.IntN(7)
			sc.Delay = stressDuration(r, 50*time.Millisecond)
			sc.SlotDelay = time.Second + stressDuration(r, 2*time.Second) // longer than most requests
		case x < 7: // concurrency
			sc.Concurrency = 1 + r.IntN(4)
			sc.Delay, sc.SlotDelay = 0, 0
		case x < 10: // quota
			sc.Concurrency = 4 + r.IntN(29)
			sc.Delay = stressDuration(r, 200*time.Millisecond)
			sc.Quota = 5 + r.Int64N(36)
			sc.Window = time.Second + stressDuration(r, 9*time.Second)
		}
		b := &sc.Backoff
		b.MaxDelay = time.Duration(2+r.IntN(59)) * time.Second
		b.Factor = 1.5 + 1.5*r.Float64()
		b.OutageProbe = []time.Duration{0, 5 * time.Second, time.Minute}[r.IntN(3)]
		b.ConcurrencyFactor = []float64{0.5, 1, 0.25}[r.IntN(3)]
		if r.IntN(5) == 0 {
			b.Jitter = symmetricJitter(r.Float64() * 0.5)
		}
		if r.IntN(4) == 0 {
			a := &sc.AutoThrottle
			a.Enabled = true
			a.StartDelay = stressDuration(r, 5*time.Second)
			a.MaxDelay = time.Duration(10+r.IntN(51)) * time.Second
			a.TargetConcurrency = 0.5 + 3.5*r.Float64()
		}
		ss := stressScope{key: fmt.Sprintf("s%02d.test", i), cfg: sc, recorded: i%3 == 0}
		switch x := r.IntN(20); {
		case x < 12:
			ss.signal = 0.0005
		case x < 19:
			ss.signal = 0.005
		default:
			ss.signal = 0.05 // a struggling server
		}
		if ss.recorded {
			key := ss.key
			sc.NewManager = func(p ScopeParams) ScopeManager {
				rs := &recScope{ScopeManager: NewDefaultScopeManager(p)}
				st.recMu.Lock()
				st.recs[key] = append(st.recs[key], rs)
				st.recMu.Unlock()
				return rs
			}
		}
		cfg.Scopes[ss.key] = sc
		st.scopes = append(st.scopes, ss)
	}
	var sum float64
	for i := range st.scopes {
		st.byKey[st.scopes[i].key] = &st.scopes[i]
		sum += stressCapacity(&st.scopes[i].cfg)
		st.cumWeight = append(st.cumWeight, sum)
	}
	return cfg
}

// stressCapacity estimates the requests per second a scope admits, as
// its tightest limit allows (requests last about a second).
func stressCapacity(c *ScopeConfig) float64 {
	rate := float64(c.Concurrency)
	if d := float64(c.Delay) * (1 + (c.Jitter.Min+c.Jitter.Max)/2); d > 0 {
		rate = min(rate, float64(time.Second)/d)
	}
	if c.SlotDelay > 0 {
		rate = min(rate, float64(c.Concurrency)*float64(time.Second)/float64(c.SlotDelay))
	}
	if c.Quota > 0 {
		rate = min(rate, float64(c.Quota)/2/c.Window.Seconds()) // costs 2 on average
	}
	return max(rate, 0.01)
}

func runStress(t *testing.T, seed uint64, requests int) {
	st := &stressRun{t: t, seed: seed}
	r := rand.New(rand.NewPCG(seed, 0))
	cfg := st.config(r)
	realStart := time.Now()
	var fake time.Duration
	// synctest.Test ends the test (FailNow) when something failed in the
	// bubble: the records are checked and the figures given all the same.
	defer func() { st.report(t, fake, time.Since(realStart)) }()
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, cfg)
		st.m = m
		t0 := time.Now()
		goroutines, _ := bubbleGoroutines()
		var wg sync.WaitGroup
		for w := range stressWorkers {
			n := requests / stressWorkers
			if w < requests%stressWorkers {
				n++
			}
			wg.Go(func() { st.worker(w, n) })
		}
		wg.Wait()
		synctest.Wait()
		if g, stacks := bubbleGoroutines(); g != goroutines {
			t.Errorf("goroutines in the bubble: %d before the workers, %d after:\n%s", goroutines, g, stacks)
		}
		st.checkIdle(t, "after the workers")
		st.liveness(t)
		st.checkIdle(t, "after the liveness check")
		fake = time.Since(t0)
	})
}

// report checks the records and logs the run's figures.
func (st *stressRun) report(t *testing.T, fake, real time.Duration) {
	seed := st.seed
	v := st.check()
	var starts, scopeStarts int
	for _, p := range st.permits {
		starts++
		scopeStarts += len(p.keys)
	}
	t.Logf("seed %d: %d requests from %d goroutines, %d permits (%d via TryAcquire), %d scope starts, %d double releases; "+
		"stopped waiting: %d cancelled, %d deadline; global concurrency %d; %v fake, %v real",
		seed, st.attempts.Load(), stressWorkers, starts, st.tryHits.Load(), scopeStarts, st.doubles.Load(),
		st.canceled.Load(), st.deadline.Load(), st.gc, fake.Round(time.Second), real.Round(time.Millisecond))
	t.Logf("seed %d: at the limits: %s", seed, v.pressureSummary())
	t.Logf("seed %d: violations per rule: %s", seed, v.summary())
	if v.total() > 0 {
		for _, e := range v.examples {
			t.Error(e)
		}
		t.Errorf("seed %d: %d violations", seed, v.total())
	}
	if n := st.badErrs.Load(); n > 0 {
		t.Errorf("seed %d: %d unexpected errors", seed, n)
	}
}

// bubbleGoroutines counts the goroutines of the synctest bubble (the only
// one while the test runs; runtime.NumGoroutine would count goroutines of
// other tests still on their way out) and returns their stacks.
func bubbleGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var in []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if head, _, _ := strings.Cut(g, "\n"); strings.Contains(head, "synctest bubble") {
			in = append(in, g)
		}
	}
	return len(in), strings.Join(in, "\n\n")
}

// checkIdle checks that nothing is held or waiting.
func (st *stressRun) checkIdle(t *testing.T, when string) {
	t.Helper()
	if n := st.m.Waiting(); n != 0 {
		t.Errorf("%s: Waiting() = %d", when, n)
	}
	stats := st.m.Stats()
	if stats.InFlight != 0 || stats.Waiting != 0 {
		t.Errorf("%s: Stats InFlight %d, Waiting %d", when, stats.InFlight, stats.Waiting)
	}
	want := make(map[string]uint64)
	st.mu.Lock()
	for _, p := range st.permits {
		for _, k := range p.keys {
			want[k]++
		}
	}
	st.mu.Unlock()
	for _, ss := range stats.Scopes {
		if ss.InFlight != 0 || ss.Waiting != 0 {
			t.Errorf("%s: scope %s: InFlight %d, Waiting %d", when, ss.Key, ss.InFlight, ss.Waiting)
		}
		var answered uint64
		for _, n := range ss.Counts.Responses {
			answered += n
		}
		if ss.Counts.Requests != want[ss.Key] || answered != want[ss.Key] {
			t.Errorf("%s: scope %s: %d requests and %d answers counted, %d permits seen", when, ss.Key, ss.Counts.Requests, answered, want[ss.Key])
		}
	}
}

// stressReqPlan is one request's random choices, all drawn up front so a
// goroutine's sequence of requests does not depend on outcomes.
type stressReqPlan struct {
	scopes   []Scope
	withCost bool
	onReq    bool // scopes on the request's context, not Acquire's
	ctxMode  int
	ctxAfter time.Duration
	try      bool
	noAdjust bool
	dur      time.Duration
	signal   []float64 // per scope: below the scope's rate, a backoff signal
	targeted bool      // the signal names the scope (Feedback.BackoffScopes)
	kind     int       // which signal
	okKind   int       // which answer when no signal
	retry    int       // Retry-After seconds
	quotaSel int
	quotaR   uint64
	double   bool
	think    time.Duration
}

func (st *stressRun) plan(r *rand.Rand) stressReqPlan {
	var p stressReqPlan
	n := 1
	switch x := r.IntN(20); {
	case x >= 18:
		n = 4
	case x >= 15:
		n = 3
	case x >= 10:
		n = 2
	}
	p.withCost = r.IntN(2) == 0
	for range n {
		i, _ := slices.BinarySearch(st.cumWeight, r.Float64()*st.cumWeight[len(st.cumWeight)-1])
		if r.IntN(2) == 0 {
			i = r.IntN(len(st.scopes))
		}
		sc := Scope{Key: st.scopes[min(i, len(st.scopes)-1)].key}
		if p.withCost {
			sc.Cost = r.Int64N(6) // 0 counts as 1
		}
		p.scopes = append(p.scopes, sc)
	}
	p.onReq = r.IntN(4) == 0
	p.ctxMode = r.IntN(100)
	p.ctxAfter = time.Duration(r.Int64N(int64(10 * time.Second)))
	p.try = r.IntN(10) == 0
	p.noAdjust = r.IntN(50) == 0
	p.dur = time.Millisecond + time.Duration(r.ExpFloat64()*float64(time.Second))
	if r.IntN(20) == 0 { // a slow response: its release may fall in another quota window
		p.dur = time.Second + time.Duration(r.ExpFloat64()*float64(5*time.Second))
	}
	p.dur = min(p.dur, 30*time.Second)
	for range p.scopes {
		p.signal = append(p.signal, r.Float64())
	}
	p.targeted = len(p.scopes) > 1 && r.IntN(5) > 0
	p.kind = r.IntN(8)
	p.okKind = r.IntN(100)
	p.retry = 1 + r.IntN(20)
	p.quotaSel = r.IntN(3)
	p.quotaR = r.Uint64()
	p.double = r.IntN(50) == 0
	if r.IntN(4) == 0 {
		p.think = time.Duration(r.Int64N(int64(200 * time.Millisecond)))
	}
	return p
}

// stressMerge merges a request's scopes as the manager must: one slot per
// distinct key, costs added, a zero cost counting as 1; sorted by key.
func stressMerge(scopes []Scope) ([]string, []int64) {
	costs := make(map[string]int64)
	for _, s := range scopes {
		costs[s.Key] += max(s.Cost, 1)
	}
	keys := make([]string, 0, len(costs))
	for k := range costs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = costs[k]
	}
	return keys, out
}

func (st *stressRun) worker(id, n int) {
	r := rand.New(rand.NewPCG(st.seed, uint64(id)+1))
	for range n {
		st.request(st.plan(r))
	}
}

func (st *stressRun) request(pl stressReqPlan) {
	st.attempts.Add(1)
	ctx := context.Background()
	var cancel context.CancelFunc = func() {}
	switch {
	case pl.ctxMode < 4: // cancelled before Acquire
		ctx, cancel = context.WithCancel(ctx)
		cancel()
	case pl.ctxMode < 50: // a deadline: a crawler's workers don't wait for a slow host for ever
		ctx, cancel = context.WithTimeout(ctx, pl.ctxAfter)
	case pl.ctxMode < 60: // cancelled while it may be waiting
		var c context.CancelFunc
		ctx, c = context.WithCancel(ctx)
		tm := time.AfterFunc(pl.ctxAfter, c)
		cancel = func() { tm.Stop(); c() }
	}
	defer cancel()
	if pl.noAdjust {
		ctx = WithoutAdjust(ctx)
	}
	var scoped context.Context
	if pl.withCost {
		scoped = WithScopeCosts(ctx, pl.scopes...)
	} else {
		keys := make([]string, len(pl.scopes))
		for i, s := range pl.scopes {
			keys[i] = s.Key
		}
		scoped = WithScopes(ctx, keys...)
	}
	req, err := http.NewRequest(http.MethodGet, "http://stress.test/", nil)
	if err != nil {
		panic(err)
	}
	acqCtx := scoped
	if pl.onReq {
		req = req.WithContext(scoped)
		acqCtx = ctx
	}
	keys, costs := stressMerge(pl.scopes)

	var p *Permit
	if pl.try {
		tr := req
		if !pl.onReq {
			tr = req.WithContext(scoped)
		}
		p, _, err = st.m.TryAcquire(tr)
		if err != nil {
			st.badErr(err)
			return
		}
		if p != nil {
			st.tryHits.Add(1)
		}
	}
	if p == nil {
		p, err = st.m.Acquire(acqCtx, req)
	}
	if err != nil {
		var we *WaitError
		switch {
		case !errors.As(err, &we):
			st.badErr(err)
		case errors.Is(err, context.Canceled):
			st.canceled.Add(1)
		case errors.Is(err, context.DeadlineExceeded):
			st.deadline.Add(1)
		default:
			st.badErr(err)
		}
		time.Sleep(pl.think)
		return
	}
	rec := stressPermit{keys: keys, costs: costs, start: p.Acquired(), observed: time.Now(), gotKeys: p.Scopes()}
	time.Sleep(pl.dur)

	var fb *Feedback // nil: Release with a response or error
	var resp *http.Response
	var rerr error
	// The first scope that draws a backoff signal at its own rate fails
	// the request: the signal goes to it alone (Feedback.BackoffScopes)
	// or, as a plain response, to every scope of the request.
	bad := ""
	for i, sc := range pl.scopes {
		if pl.signal[i] < st.byKey[sc.Key].signal {
			bad = sc.Key
			break
		}
	}
	var only []string
	if bad != "" && pl.targeted {
		only = []string{bad}
	}
	wait := time.Duration(pl.retry) * time.Second
	switch {
	case bad == "" && pl.okKind < 40:
		resp = &http.Response{StatusCode: 200, Header: http.Header{}}
	case bad == "" && pl.okKind < 80:
		fb = &Feedback{Status: 200, Size: -1}
	case bad == "":
		fb = &Feedback{Status: 200, Size: -1, Quota: stressQuota(pl, keys, costs, st.byKey)}
		rec.quota = fb.Quota
	case pl.kind < 2 && only == nil:
		resp = &http.Response{StatusCode: 429, Header: http.Header{}}
	case pl.kind < 2:
		fb = &Feedback{Status: 429, Backoff: true, BackoffScopes: only}
	case pl.kind < 4 && only == nil:
		resp = &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {strconv.Itoa(pl.retry)}}}
	case pl.kind < 4:
		fb = &Feedback{Status: 429, Backoff: true, Wait: wait, HasWait: true, BackoffScopes: only}
	case pl.kind < 6 && only == nil:
		resp = &http.Response{StatusCode: 503, Header: http.Header{}}
	case pl.kind < 6:
		fb = &Feedback{Status: 503, Backoff: true, BackoffScopes: only}
	case only == nil:
		rerr = context.DeadlineExceeded // DefaultFeedback: a timeout, a backoff signal
	default:
		fb = &Feedback{Err: context.DeadlineExceeded, Timeout: true, Backoff: true, Size: -1, BackoffScopes: only}
	}
	release := func() {
		if fb != nil {
			p.ReleaseFeedback(*fb)
		} else {
			p.Release(resp, rerr)
		}
	}
	rec.end = time.Now()
	if pl.double {
		// Release is idempotent and safe from any goroutine: two at once.
		st.doubles.Add(1)
		var wg sync.WaitGroup
		wg.Go(release)
		wg.Go(release)
		wg.Wait()
	} else {
		release()
	}
	release() // and once more: nothing happens
	st.mu.Lock()
	st.permits = append(st.permits, rec)
	st.mu.Unlock()
	time.Sleep(pl.think)
}

// stressQuota draws the quota corrections of a release: the actual cost
// for every scope of the request, or per scope, or the server's remaining
// count for one scope. At most one cost per scope, so corrections never
// stack.
func stressQuota(pl stressReqPlan, keys []string, costs []int64, byKey map[string]*stressScope) []QuotaUse {
	r := rand.New(rand.NewPCG(pl.quotaR, 7))
	switch pl.quotaSel {
	case 0:
		return []QuotaUse{{Cost: r.Int64N(6), HasCost: true}}
	case 1:
		var q []QuotaUse
		for i, k := range keys {
			if r.IntN(3) > 0 {
				q = append(q, QuotaUse{Scope: k, Cost: r.Int64N(2*costs[i] + 1), HasCost: true})
			}
		}
		return q
	}
	k := keys[r.IntN(len(keys))]
	return []QuotaUse{{Scope: k, Remaining: r.Int64N(max(byKey[k].cfg.Quota, 1) + 1), HasRemaining: true}}
}

func (st *stressRun) badErr(err error) {
	if st.badErrs.Add(1) <= 5 {
		st.t.Errorf("unexpected error: %v", err)
	}
}

// liveness checks that, once everything is released, every scope admits
// again up to its concurrency (all its slots free), or up to the global
// cap: it takes permits with TryAcquire, sleeping until each refusal's
// At, until the scope refuses for concurrency or the global cap.
func (st *stressRun) liveness(t *testing.T) {
	// Past the end of every window the workers used, so that backoff's
	// recovery steps are all taken (Stats ticks every scope) and the
	// liveness requests, which learn nothing, leave the limits as they
	// are.
	time.Sleep(61 * time.Second)
	st.m.Stats()
	for _, sc := range st.scopes {
		conc := effConcurrency(st.m, sc.key)
		want := min(conc, st.gc)
		var held []*Permit
		var recs []stressPermit
		giveUp := time.Now().Add(4 * time.Hour)
		var why Reason
		for {
			req, _ := http.NewRequestWithContext(WithScopes(context.Background(), sc.key), http.MethodGet, "http://stress.test/", nil)
			p, adm, err := st.m.TryAcquire(req)
			if err != nil {
				t.Fatalf("liveness: %s: %v", sc.key, err)
			}
			if p != nil {
				held = append(held, p)
				recs = append(recs, stressPermit{keys: []string{sc.key}, costs: []int64{1}, start: p.Acquired(), observed: time.Now(), gotKeys: p.Scopes()})
				continue
			}
			why = adm.Reason
			if why == ReasonConcurrency || why == ReasonGlobal {
				break
			}
			if adm.At.IsZero() || time.Now().After(giveUp) {
				t.Errorf("liveness: scope %s refuses (%v, at %v) holding %d of %d", sc.key, why, adm.At, len(held), want)
				break
			}
			time.Sleep(time.Until(adm.At))
		}
		if len(held) != want {
			t.Errorf("liveness: scope %s admitted %d at once (stopped by %v), want min(concurrency %d, global %d)", sc.key, len(held), why, conc, st.gc)
		}
		if c := effConcurrency(st.m, sc.key); c != conc {
			t.Errorf("liveness: scope %s: concurrency %d, then %d", sc.key, conc, c)
		}
		time.Sleep(time.Millisecond)
		for i, p := range held {
			recs[i].end = time.Now()
			p.ReleaseFeedback(Feedback{Status: 200, NoAdjust: true})
		}
		st.mu.Lock()
		st.permits = append(st.permits, recs...)
		st.mu.Unlock()
	}
}

// effConcurrency is the concurrency a scope's default policy allows now
// (configured, or lowered by backoff). The liveness check's one look
// inside: it is no part of the checker.
func effConcurrency(m *ThrottlingManager, key string) int {
	sh := m.shardOf(key)
	sh.mu.RLock()
	s := sh.m[key]
	sh.mu.RUnlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	mgr := s.mgr
	if r, ok := mgr.(*recScope); ok {
		mgr = r.ScopeManager
	}
	return mgr.(*defaultScope).concurrency()
}

func (st *stressRun) check() *stressViolations {
	cfgs := make(map[string]ScopeConfig)
	for _, s := range st.scopes {
		cfgs[s.key] = s.cfg
	}
	recs := make(map[string][]scopeEv)
	for k, rs := range st.recs {
		for _, r := range rs {
			if len(r.evs) > 0 {
				if recs[k] != nil {
					panic("two policies of scope " + k + " were used")
				}
				recs[k] = r.evs
			}
		}
		if recs[k] == nil {
			recs[k] = []scopeEv{}
		}
	}
	return checkStress(cfgs, st.gc, st.permits, recs)
}

// ---- the checker ----

// stressViolations counts violations per rule (index 1-6, as listed at TestStressInvariants) and keeps
// the first few described.
type stressViolations struct {
	rule     [7]int
	examples []string
	// pressure counts the starts at a rule's limit, to show the rules
	// were put to the test: the scope full (1), a start within 10 % of
	// Delay*(1+Jitter.Max) after the previous one (2), Concurrency starts
	// within 1.1 SlotDelay (3), the costs admitted in a quota window
	// reaching the quota (4), the global cap full (6).
	pressure [7]int
}

func (v *stressViolations) add(rule int, format string, args ...any) {
	v.rule[rule]++
	if len(v.examples) < 20 {
		v.examples = append(v.examples, fmt.Sprintf("rule %d: ", rule)+fmt.Sprintf(format, args...))
	}
}

func (v *stressViolations) total() int {
	n := 0
	for _, c := range v.rule {
		n += c
	}
	return n
}

func (v *stressViolations) pressureSummary() string {
	return fmt.Sprintf("scope full %d, delay-bound %d, slot-bound %d, quota full %d, global cap full %d",
		v.pressure[1], v.pressure[2], v.pressure[3], v.pressure[4], v.pressure[6])
}

func (v *stressViolations) summary() string {
	names := [...]string{1: "concurrency", 2: "delay", 3: "slot delay", 4: "quota", 5: "same instant", 6: "global"}
	var b strings.Builder
	for i := 1; i <= 6; i++ {
		if i > 1 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d %s: %d", i, names[i], v.rule[i])
	}
	return b.String()
}

// stressStart and stressEnd are one scope's view of a permit.
type stressStart struct {
	at   time.Time
	cost int64
}

type stressEnd struct {
	at     time.Time
	tStart time.Time
	cost   int64
	quota  []QuotaUse
}

// checkStress checks the records of a run against rules 1-6. It
// does not use the library's logic: it models the rules from their statement
// and the documented quota windows. Events at the same fake instant may
// have happened in either order, so from the permits' records alone it
// gives the library the benefit of the doubt (a release at the instant of
// a start came first when that helps); the recorded scopes' event
// sequences are exact and are checked exactly.
func checkStress(cfgs map[string]ScopeConfig, gc int, permits []stressPermit, recs map[string][]scopeEv) *stressViolations {
	v := &stressViolations{}
	starts := make(map[string][]stressStart)
	ends := make(map[string][]stressEnd)
	type gev struct {
		at time.Time
		d  int
	}
	var global []gev
	for i, p := range permits {
		if !p.observed.Equal(p.start) {
			v.add(5, "permit %d: Acquired() %v but Acquire returned at %v", i, p.start, p.observed)
		}
		if !slices.Equal(p.keys, p.gotKeys) {
			v.add(5, "permit %d: Scopes() %q, want %q", i, p.gotKeys, p.keys)
		}
		if !p.end.After(p.start) {
			panic(fmt.Sprintf("permit %d released at its start: the checker assumes it never is", i))
		}
		for j, k := range p.keys {
			starts[k] = append(starts[k], stressStart{p.start, p.costs[j]})
			ends[k] = append(ends[k], stressEnd{p.end, p.start, p.costs[j], p.quota})
		}
		global = append(global, gev{p.start, 1}, gev{p.end, -1})
	}

	// Rule 6: releases first at the same instant.
	slices.SortFunc(global, func(a, b gev) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.d, b.d)) })
	n := 0
	for _, e := range global {
		if n += e.d; n > gc {
			v.add(6, "%d permits at %v, GlobalConcurrency %d", n, e.at, gc)
		} else if n == gc && e.d > 0 {
			v.pressure[6]++
		}
	}

	keys := make([]string, 0, len(cfgs))
	for k := range cfgs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cfg := cfgs[k]
		ss, es := starts[k], ends[k]
		slices.SortStableFunc(ss, func(a, b stressStart) int { return a.at.Compare(b.at) })
		slices.SortStableFunc(es, func(a, b stressEnd) int { return a.at.Compare(b.at) })

		// Rule 1: releases first at the same instant.
		n, j := 0, 0
		for _, s := range ss {
			for j < len(es) && !es[j].at.After(s.at) {
				n--
				j++
			}
			if n++; n > cfg.Concurrency {
				v.add(1, "scope %s: %d permits at %v, Concurrency %d", k, n, s.at, cfg.Concurrency)
			} else if n == cfg.Concurrency {
				v.pressure[1]++
			}
		}

		// Rule 2: consecutive starts at least Delay*(1+Jitter.Min) apart;
		// AutoThrottle and backoff only ever raise the delay.
		tight := time.Duration(1.1 * float64(cfg.Delay) * (1 + cfg.Jitter.Max))
		if minGap := time.Duration(float64(cfg.Delay) * (1 + cfg.Jitter.Min)); minGap > 1 {
			for i := 1; i < len(ss); i++ {
				if ss[i].at.Sub(ss[i-1].at) <= tight {
					v.pressure[2]++
				}
				if gap := ss[i].at.Sub(ss[i-1].at); gap < minGap-1 {
					v.add(2, "scope %s: starts at %v and %v, %v apart; Delay %v, Jitter %+v: at least %v",
						k, ss[i-1].at, ss[i].at, gap, cfg.Delay, cfg.Jitter, minGap)
				}
			}
		}

		// Rule 3, the consequence visible from outside: at most
		// Concurrency starts within any SlotDelay.
		if c := cfg.Concurrency; cfg.SlotDelay > 0 {
			for i := c; i < len(ss); i++ {
				if gap := ss[i].at.Sub(ss[i-c].at); gap < cfg.SlotDelay*11/10 {
					v.pressure[3]++
				}
				if gap := ss[i].at.Sub(ss[i-c].at); gap < cfg.SlotDelay {
					v.add(3, "scope %s: %d starts from %v to %v (%v); SlotDelay %v, Concurrency %d",
						k, c+1, ss[i-c].at, ss[i].at, gap, cfg.SlotDelay, c)
				}
			}
		}

		if cfg.Quota > 0 && len(ss) > 0 {
			checkQuota(v, k, &cfg, ss, es)
		}

		if evs, ok := recs[k]; ok {
			checkRecorded(v, k, &cfg, evs, ss, es)
		}
	}
	return v
}

// quotaModel is the quota window as documented on ScopeConfig: the first window starts at the
// scope's first start, later ones follow back to back, Window long each.
type quotaModel struct {
	q      int64
	w      time.Duration
	origin time.Time
	win    int64
	used   int64
}

func (m *quotaModel) window(t time.Time) int64 { return int64(t.Sub(m.origin) / m.w) }

func (m *quotaModel) roll(t time.Time) {
	if w := m.window(t); w != m.win {
		m.win, m.used = w, 0
	}
}

// correction applies one release's corrections naming key exactly:
// an actual cost replaces the admitted one when the release comes in the
// window of the start; the server's remaining count raises the count.
func (m *quotaModel) correction(key string, e *stressEnd) {
	for _, u := range e.quota {
		if u.Scope != "" && u.Scope != key {
			continue
		}
		if u.HasCost && u.Cost >= 0 && m.window(e.tStart) == m.win {
			m.used = max(0, m.used+u.Cost-e.cost)
		}
		if u.HasRemaining && u.Remaining >= 0 && u.Remaining <= m.q {
			m.used = max(m.used, m.q-u.Remaining)
		}
	}
}

// checkQuota checks rule 4 from the permits' records. Releases at the
// instant of starts may have come before or after them: the check uses
// the lowest count any order gives (the lowering cost corrections first,
// the raising ones and the remaining counts after).
func checkQuota(v *stressViolations, key string, cfg *ScopeConfig, ss []stressStart, es []stressEnd) {
	m := quotaModel{q: cfg.Quota, w: cfg.Window, origin: ss[0].at}
	i, j := 0, 0
	admWin, admitted := int64(0), int64(0) // the costs admitted in the window
	for i < len(ss) || j < len(es) {
		var t time.Time
		switch {
		case i == len(ss):
			t = es[j].at
		case j == len(es) || ss[i].at.Before(es[j].at):
			t = ss[i].at
		default:
			t = es[j].at
		}
		m.roll(t)
		var lower, raise, floor int64 = 0, 0, -1
		for ; j < len(es) && es[j].at.Equal(t); j++ {
			e := &es[j]
			for _, u := range e.quota {
				if u.Scope != "" && u.Scope != key {
					continue
				}
				if u.HasCost && u.Cost >= 0 && m.window(e.tStart) == m.win {
					if d := u.Cost - e.cost; d < 0 {
						lower += d
					} else {
						raise += d
					}
				}
				if u.HasRemaining && u.Remaining >= 0 && u.Remaining <= m.q {
					floor = max(floor, m.q-u.Remaining)
				}
			}
		}
		var sum int64
		first := i
		for ; i < len(ss) && ss[i].at.Equal(t); i++ {
			sum += ss[i].cost
		}
		if k := i - first; k > 0 {
			u := max(0, m.used+lower)
			if u > 0 && u+sum > m.q || u == 0 && k > 1 && sum > m.q {
				v.add(4, "scope %s: %d in the window at %v, then %d starts costing %d; Quota %d per %v from %v",
					key, u, t, k, sum, m.q, m.w, m.origin)
			}
		}
		m.used = max(0, max(m.used, floor)+lower+raise+sum)
		if m.win != admWin {
			admWin, admitted = m.win, 0
		}
		if admitted += sum; admitted >= m.q && sum > 0 {
			v.pressure[4]++
		}
	}
}

// checkRecorded checks a recorded scope's exact sequence of Start and
// Finish calls: rules 1 and 4 exactly, and rule 5: the starts the policy
// saw are the permits' starts, at the permits' instants, with their
// costs, and each permit finished once.
func checkRecorded(v *stressViolations, key string, cfg *ScopeConfig, evs []scopeEv, ss []stressStart, es []stressEnd) {
	var rs []stressStart
	var rEnds, pEnds []time.Time
	inFlight := 0
	var m *quotaModel
	for _, e := range evs {
		if e.start {
			rs = append(rs, stressStart{e.at, e.cost})
			if inFlight++; inFlight > cfg.Concurrency {
				v.add(1, "recorded scope %s: %d in flight at %v, Concurrency %d", key, inFlight, e.at, cfg.Concurrency)
			}
			if cfg.Quota > 0 {
				if m == nil {
					m = &quotaModel{q: cfg.Quota, w: cfg.Window, origin: e.at}
				}
				m.roll(e.at)
				if m.used > 0 && m.used+e.cost > m.q {
					v.add(4, "recorded scope %s: %d in the window at %v, a start costing %d; Quota %d per %v from %v",
						key, m.used, e.at, e.cost, m.q, m.w, m.origin)
				}
				m.used += e.cost
			}
			continue
		}
		rEnds = append(rEnds, e.at)
		inFlight--
		if m != nil {
			m.roll(e.at)
			m.correction(key, &stressEnd{at: e.at, tStart: e.tStart, cost: e.cost, quota: e.quota})
		}
	}
	slices.SortStableFunc(rs, func(a, b stressStart) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.cost, b.cost)) })
	ps := slices.Clone(ss)
	slices.SortStableFunc(ps, func(a, b stressStart) int { return cmp.Or(a.at.Compare(b.at), cmp.Compare(a.cost, b.cost)) })
	same := func(a, b stressStart) bool { return a.at.Equal(b.at) && a.cost == b.cost }
	if !slices.EqualFunc(rs, ps, same) {
		v.add(5, "recorded scope %s: its policy saw %d starts, the permits %d, not at the same instants with the same costs", key, len(rs), len(ps))
	}
	for _, e := range es {
		pEnds = append(pEnds, e.at)
	}
	slices.SortFunc(rEnds, time.Time.Compare)
	if !slices.EqualFunc(rEnds, pEnds, time.Time.Equal) {
		v.add(5, "recorded scope %s: its policy saw %d finishes, the permits %d releases", key, len(rEnds), len(pEnds))
	}
}

// TestStressChecker: the checker finds a violation of each rule in
// made-up records, and none in records that keep the rules.
func TestStressChecker(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	perm := func(start, end int, keys []string, costs []int64, q ...QuotaUse) stressPermit {
		return stressPermit{keys: keys, costs: costs, start: at(start), observed: at(start), end: at(end), gotKeys: keys, quota: q}
	}
	one := func(start, end int) stressPermit { return perm(start, end, []string{"a"}, []int64{1}) }
	base := ScopeConfig{Concurrency: 2, Delay: 100 * time.Millisecond, SlotDelay: time.Second, Jitter: Jitter{Min: -0.5, Max: 0.5}, Window: 10 * time.Second}
	quota := base
	quota.Quota = 5
	cases := []struct {
		name    string
		cfg     ScopeConfig
		gc      int
		permits []stressPermit
		recs    []scopeEv
		rule    int // 0: no violation
	}{
		{"fine", base, 2, []stressPermit{one(0, 500), one(50, 60), one(1000, 1100), one(1050, 1100)}, nil, 0},
		{"release and start at one instant", base, 2, []stressPermit{one(0, 2000), one(1000, 1500), one(1500, 1600)}, nil, 0},
		{"concurrency", base, 9, []stressPermit{one(0, 5000), one(1000, 5000), one(2000, 5000)}, nil, 1},
		{"delay", base, 9, []stressPermit{one(0, 1), one(49, 50)}, nil, 2},
		{"delay, same instant", base, 9, []stressPermit{one(0, 1), one(0, 1)}, nil, 2},
		{"slot delay", base, 9, []stressPermit{one(0, 1), one(100, 101), one(999, 1000)}, nil, 3},
		{"quota", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{3}), perm(1000, 1001, []string{"a"}, []int64{3})}, nil, 4},
		{"quota, next window", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{3}), perm(10_000, 10_001, []string{"a"}, []int64{3})}, nil, 0},
		{"quota, window from the first start", quota, 9, []stressPermit{perm(5000, 5001, []string{"a"}, []int64{3}), perm(14_999, 15_001, []string{"a"}, []int64{3})}, nil, 4},
		{"quota, oversize alone", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{9}), perm(10_000, 10_001, []string{"a"}, []int64{9})}, nil, 0},
		{"quota, oversize then one more", quota, 9, []stressPermit{perm(0, 1, []string{"a"}, []int64{9}), perm(1000, 1001, []string{"a"}, []int64{1})}, nil, 4},
		{"quota, actual cost lowers", quota, 9, []stressPermit{perm(0, 1000, []string{"a"}, []int64{5}, QuotaUse{Cost: 1, HasCost: true}), perm(1000, 1001, []string{"a"}, []int64{4})}, nil, 0},
		{"quota, actual cost in a later window is dropped", quota, 9, []stressPermit{perm(0, 10_000, []string{"a"}, []int64{5}, QuotaUse{Cost: 0, HasCost: true}), perm(10_000, 10_001, []string{"a"}, []int64{5}), perm(11_000, 11_001, []string{"a"}, []int64{1})}, nil, 4},
		{"quota, remaining raises", quota, 9, []stressPermit{perm(0, 500, []string{"a"}, []int64{1}, QuotaUse{Scope: "a", Remaining: 0, HasRemaining: true}), perm(1000, 1001, []string{"a"}, []int64{1})}, nil, 4},
		{"quota, remaining of another scope", quota, 9, []stressPermit{perm(0, 500, []string{"a"}, []int64{1}, QuotaUse{Scope: "b", Remaining: 0, HasRemaining: true}), perm(1000, 1001, []string{"a"}, []int64{1})}, nil, 0},
		{"same instant", base, 9, []stressPermit{{keys: []string{"a"}, costs: []int64{1}, start: at(0), observed: at(1), end: at(5), gotKeys: []string{"a"}}}, nil, 5},
		{"scopes", base, 9, []stressPermit{{keys: []string{"a"}, costs: []int64{1}, start: at(0), observed: at(0), end: at(5), gotKeys: []string{"a", "b"}}}, nil, 5},
		{"recorded: fine", quota, 9, []stressPermit{one(0, 5), one(100, 105)},
			[]scopeEv{{start: true, at: at(0), cost: 1}, {at: at(5), cost: 1, tStart: at(0)}, {start: true, at: at(100), cost: 1}, {at: at(105), cost: 1, tStart: at(100)}}, 0},
		{"recorded: a start at another instant", base, 9, []stressPermit{one(0, 5)},
			[]scopeEv{{start: true, at: at(1), cost: 1}, {at: at(5), cost: 1, tStart: at(1)}}, 5},
		{"recorded: a start with another cost", base, 9, []stressPermit{one(0, 5)},
			[]scopeEv{{start: true, at: at(0), cost: 2}, {at: at(5), cost: 2, tStart: at(0)}}, 5},
		{"recorded: finished twice", base, 9, []stressPermit{one(0, 5)},
			[]scopeEv{{start: true, at: at(0), cost: 1}, {at: at(5), cost: 1, tStart: at(0)}, {at: at(5), cost: 1, tStart: at(0)}}, 5},
		{"recorded: start before the release at one instant", base, 9, []stressPermit{one(0, 1500), one(100, 1500), one(1500, 1600)},
			[]scopeEv{{start: true, at: at(0), cost: 1}, {start: true, at: at(100), cost: 1}, {start: true, at: at(1500), cost: 1},
				{at: at(1500), cost: 1, tStart: at(0)}, {at: at(1500), cost: 1, tStart: at(100)}, {at: at(1600), cost: 1, tStart: at(1500)}}, 1},
		{"global", base, 1, []stressPermit{one(0, 500), perm(200, 300, []string{"b"}, []int64{1})}, nil, 6},
		{"global, release first at one instant", base, 1, []stressPermit{one(0, 500), perm(500, 600, []string{"b"}, []int64{1})}, nil, 0},
	}
	for _, c := range cases {
		cfgs := map[string]ScopeConfig{"a": c.cfg, "b": c.cfg}
		var recs map[string][]scopeEv
		if c.recs != nil {
			recs = map[string][]scopeEv{"a": c.recs}
		}
		v := checkStress(cfgs, c.gc, c.permits, recs)
		if c.rule == 0 {
			if v.total() != 0 {
				t.Errorf("%s: %v", c.name, v.examples)
			}
			continue
		}
		if v.rule[c.rule] == 0 || v.total() != v.rule[c.rule] {
			t.Errorf("%s: want a violation of rule %d, got %s %v", c.name, c.rule, v.summary(), v.examples)
		}
	}
}
