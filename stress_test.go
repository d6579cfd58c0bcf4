package throttle

import (
	"context"
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
			req, _ := http.NewRequestWithContext(WithScopeKeys(context.Background(), sc.key), http.MethodGet, "http://stress.test/", nil)
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
	if ds, ok := s.pol.(*defaultScope); ok {
		return ds.concurrency()
	}
	mgr := s.pol.(*custom).mgr
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
