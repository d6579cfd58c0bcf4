package redisstore_test

// Tests on a real Redis Cluster: six redis-server processes on loopback
// (redistest.StartCluster: three masters with one replica each,
// cluster-node-timeout 1s). The conformance suite, the multi-process
// limits with scopes on all three masters, and a master killed mid-crawl
// while its replica takes over: what that costs is what the package
// documentation states (Redis Cluster, Failover).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// newClusterClient returns a cluster client set up as the package
// documentation asks: context deadlines enforced, and the slot map
// reloaded every second, so a replica promoted in place of a dead master
// (which sends no MOVED) is found within a second.
func newClusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                      addrs,
		ContextTimeoutEnabled:      true,
		DialTimeout:                time.Second,
		ClusterStateReloadInterval: time.Second,
		DisableIdentity:            true,
	})
}

// dialClusterStore returns a store with Options.Cluster on the cluster
// whose nodes are at addrs, closed with the test, and its client.
func dialClusterStore(t testing.TB, addrs []string, opts redisstore.Options) (*redisstore.Store, *redis.ClusterClient) {
	t.Helper()
	client := newClusterClient(addrs)
	opts.Cluster = true
	s, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		client.Close()
	})
	return s, client
}

// scopesOn returns, for each of masters, a scope named name-<n> whose
// state's hash slot that master owns (per the cluster's own CLUSTER
// KEYSLOT and CLUSTER SLOTS).
func scopesOn(t *testing.T, c *redistest.Cluster, store *redisstore.Store, name string, masters ...string) []string {
	t.Helper()
	out := make([]string, len(masters))
	found := 0
	for n := 0; found < len(masters); n++ {
		require.Less(t, n, 1000, "no scope of 1000 on each of %v", masters)
		sc := name + "-" + strconv.Itoa(n)
		m, err := c.MasterOf(store.Key(sc))
		require.NoError(t, err)
		if i := slices.Index(masters, m); i >= 0 && out[i] == "" {
			out[i] = sc
			found++
		}
	}
	return out
}

// scoped returns a request whose one scope is scope.
func scoped(t testing.TB, ctx context.Context, scope string) *http.Request {
	t.Helper()
	r, err := http.NewRequestWithContext(throttle.WithScopeKeys(ctx, scope), http.MethodGet, "http://cluster.test/", nil)
	require.NoError(t, err)
	return r
}

// acquireScope is Acquire on scope with timeout as a hang detector.
func acquireScope(t *testing.T, m *throttle.ThrottlingManager, scope string, timeout time.Duration) *throttle.Permit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := m.Acquire(ctx, scoped(t, ctx, scope))
	require.NoError(t, err, "Acquire %s", scope)
	return p
}

// tryScope is TryAcquire on scope.
func tryScope(t *testing.T, m *throttle.ThrottlingManager, scope string) (*throttle.Permit, throttle.Admission) {
	t.Helper()
	p, adm, err := m.TryAcquire(scoped(t, context.Background(), scope))
	require.NoError(t, err, "TryAcquire %s", scope)
	return p, adm
}

// refusedScope checks that TryAcquire refuses scope for why.
func refusedScope(t *testing.T, m *throttle.ThrottlingManager, scope string, why throttle.Reason) {
	t.Helper()
	p, adm := tryScope(t, m, scope)
	if p != nil {
		p.Release(nil, nil)
		t.Fatalf("TryAcquire %s admitted; want refused for %v", scope, why)
	}
	require.Equal(t, why, adm.Reason, "TryAcquire %s", scope)
}

// reachable waits until rdb reaches scope's state (after a failover: until
// the client has loaded the new slot map).
func reachable(t *testing.T, rdb redis.Cmdable, store *redisstore.Store, scope string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := rdb.Exists(ctx, store.Key(scope)).Err()
		cancel()
		if err == nil {
			return
		}
		require.True(t, time.Now().Before(deadline), "%s unreachable for 15s: %v", scope, err)
		pause := time.NewTimer(20 * time.Millisecond) // polling a real cluster's recovery
		<-pause.C
	}
}

// waitReplicated waits until every write the master at addr took so far
// has reached its replica (WAIT 1).
func waitReplicated(t *testing.T, addr string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := c.Do(ctx, "WAIT", 1, 5000).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the replica of %s acknowledged its writes", addr)
}

func TestClusterConformance(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	var checked sync.Once
	var s *redisstore.Store
	var rdb *redis.ClusterClient
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		s, rdb = dialClusterStore(t, c.Addrs(), redisstore.Options{Clock: clock, Prefix: uniquePrefix()})
		checked.Do(func() {
			// The suite's two-scope request ("a" and "b") crosses slots:
			// a script for both would be refused (CROSSSLOT).
			a, err := c.Slot(s.Key("a"))
			require.NoError(t, err)
			b, err := c.Slot(s.Key("b"))
			require.NoError(t, err)
			require.NotEqual(t, a, b)
			ma, _ := c.MasterOf(s.Key("a"))
			mb, _ := c.MasterOf(s.Key("b"))
			t.Logf("scope a: slot %d on %s; scope b: slot %d on %s", a, ma, b, mb)
		})
		return s
	}, storetest.PartialAdmission(),
		storetest.WithForeign(func(t *testing.T, key string, f storetest.Foreign) { plant(t, rdb, s.Key(key), f) }, 30*time.Second))
}

// limitChecker is a test server that checks the limits per scope (the
// X-Throttle-Scope header): requests in flight, and the starts the store
// recorded (X-Throttle-Acquired).
type limitChecker struct {
	conc   int64
	scopes map[string]*scopeLimits // fixed before the first request
	bad    atomic.Int64            // requests without a known scope or a start
}

type scopeLimits struct {
	inFlight, peak, over atomic.Int64
	mu                   sync.Mutex
	starts               []int64 // µs, the store's time
	workers              map[string]int
}

func newLimitChecker(conc int, scopes []string) *limitChecker {
	lc := &limitChecker{conc: int64(conc), scopes: map[string]*scopeLimits{}}
	for _, s := range scopes {
		lc.scopes[s] = &scopeLimits{workers: map[string]int{}}
	}
	return lc
}

func (lc *limitChecker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sl := lc.scopes[r.Header.Get(hdrScope)]
	acq, err := strconv.ParseInt(r.Header.Get(hdrAcquired), 10, 64)
	if sl == nil || err != nil {
		lc.bad.Add(1)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	n := sl.inFlight.Add(1)
	if n > lc.conc {
		sl.over.Add(1)
	}
	for p := sl.peak.Load(); n > p && !sl.peak.CompareAndSwap(p, n); p = sl.peak.Load() {
	}
	sl.mu.Lock()
	sl.starts = append(sl.starts, acq)
	sl.workers[r.Header.Get("X-Worker")]++
	sl.mu.Unlock()
	service := time.NewTimer(rand.N(40*time.Millisecond + 1)) // the server's work
	select {
	case <-service.C:
	case <-r.Context().Done():
		service.Stop()
	}
	sl.inFlight.Add(-1) // before the response can reach the client
	w.WriteHeader(http.StatusOK)
}

// tooClose returns the number of gaps between consecutive starts shorter
// than d, and the shortest gap.
func tooClose(starts []int64, d time.Duration) (int, time.Duration) {
	s := slices.Sorted(slices.Values(starts))
	n, least := 0, time.Duration(1<<62)
	for i := 1; i < len(s); i++ {
		g := time.Duration(s[i]-s[i-1]) * time.Microsecond
		least = min(least, g)
		if g < d {
			n++
		}
	}
	return n, least
}

// TestClusterMultiProcessLimits: 4 worker processes with 4 goroutines each
// send 540 requests, round robin over three scopes whose hash slots are on
// the three masters, through managers sharing a store on the cluster
// (Options.Cluster; Concurrency 2, Delay 20ms). Per scope the test server
// never sees more than 2 in flight, and the starts the store recorded are
// never closer than 20ms; each scope's state is on its master.
func TestClusterMultiProcessLimits(t *testing.T) {
	const (
		workers    = 4
		goroutines = 4
		requests   = 540
		conc       = 2
		delay      = 20 * time.Millisecond
	)
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	prefix := uniquePrefix()
	probe, _ := dialClusterStore(t, c.Addrs(), redisstore.Options{Prefix: prefix})
	masters, err := c.Masters()
	require.NoError(t, err)
	require.Len(t, masters, 3)
	scopes := scopesOn(t, c, probe, "site", masters...)

	lc := newLimitChecker(conc, scopes)
	ts := httptest.NewServer(lc)
	t.Cleanup(ts.Close)
	start := time.Now()
	var ws []*worker
	for i := range workers {
		ws = append(ws, startWorker(t, workerSpec{Mode: "limits", ID: i, Cluster: c.Addrs(), Prefix: prefix, URL: ts.URL + "/page",
			Scopes: scopes, Requests: requests / workers, Goroutines: goroutines, Concurrency: conc, Delay: delay}))
	}
	for i, w := range ws {
		if err := w.wait(t, 60*time.Second); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	wall := time.Since(start)

	require.Zero(t, lc.bad.Load(), "requests without a known scope or an Acquired header")
	total := 0
	for i, sc := range scopes {
		sl := lc.scopes[sc]
		sl.mu.Lock()
		n, least := tooClose(sl.starts, delay)
		got, workersSeen := len(sl.starts), len(sl.workers)
		sl.mu.Unlock()
		total += got
		t.Logf("scope %s on master %s: %d requests from %d workers, peak in flight %d (limit %d), %d over; min gap between starts %v (Delay %v), %d closer",
			sc, masters[i], got, workersSeen, sl.peak.Load(), conc, sl.over.Load(), least, delay, n)
		require.Equal(t, requests/len(scopes), got, "requests of scope %s", sc)
		require.Equal(t, workers, workersSeen, "every worker sent requests to %s", sc)
		require.Zero(t, sl.over.Load(), "requests in flight beyond Concurrency on %s", sc)
		require.Zero(t, n, "starts closer than Delay on %s", sc)
		require.Equal(t, int64(conc), sl.peak.Load(), "the slots of %s were never all used: the test did not exercise Concurrency", sc)

		// The scope's state is on its master: that node has the key and
		// another master redirects.
		key := probe.Key(sc)
		owner, err := c.MasterOf(key)
		require.NoError(t, err)
		require.Equal(t, masters[i], owner)
		direct := redis.NewClient(&redis.Options{Addr: owner, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		exists, err := direct.Exists(ctx, key).Result()
		cancel()
		direct.Close()
		require.NoError(t, err)
		require.Equal(t, int64(1), exists, "the state of %s on its master %s", sc, owner)
	}
	t.Logf("%d requests from %d processes x %d goroutines over 3 scopes on 3 masters in %v; 0 violations",
		total, workers, goroutines, wall.Round(time.Millisecond))
	require.Equal(t, requests, total)
}

// storeCall is one call a recStore passed on.
type storeCall struct {
	op         string // "admit" or "release"
	scope      string // the first scope's key
	start, end time.Time
	admitted   bool
	err        error
}

// recorder keeps the calls of recStores.
type recorder struct {
	mu      sync.Mutex
	calls   []storeCall
	changed chan struct{} // a token after each call
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) add(c storeCall) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// find returns the first call, in the order of their ends, that ok
// accepts.
func (r *recorder) find(ok func(storeCall) bool) (storeCall, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if ok(c) {
			return c, true
		}
	}
	return storeCall{}, false
}

// await waits for a call that ok accepts.
func (r *recorder) await(t *testing.T, within time.Duration, what string, ok func(storeCall) bool) storeCall {
	t.Helper()
	hang := time.NewTimer(within)
	defer hang.Stop()
	for {
		if c, found := r.find(ok); found {
			return c
		}
		select {
		case <-r.changed:
		case <-hang.C:
			t.Fatalf("no %s within %v", what, within)
		}
	}
}

// window returns how many calls ok accepts that failed, the span from the
// start of the first to the end of the last, and their errors (each once,
// trimmed).
func (r *recorder) window(ok func(storeCall) bool) (n int, first, last time.Time, errs []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.calls {
		if c.err == nil || !ok(c) {
			continue
		}
		n++
		e := c.op + ": " + c.err.Error()
		if i := strings.LastIndex(e, ": "); i > 0 && len(e) > 80 {
			e = c.op + ": ..." + e[i:]
		}
		if !slices.Contains(errs, e) {
			errs = append(errs, e)
		}
		if first.IsZero() || c.start.Before(first) {
			first = c.start
		}
		if c.end.After(last) {
			last = c.end
		}
	}
	return n, first, last, errs
}

// lastStart returns the latest start of the failed calls ok accepts.
func (r *recorder) lastStart(ok func(storeCall) bool) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last time.Time
	for _, c := range r.calls {
		if c.err != nil && ok(c) && c.start.After(last) {
			last = c.start
		}
	}
	return last
}

// longest returns the longest of the calls ok accepts.
func (r *recorder) longest(ok func(storeCall) bool) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	var d time.Duration
	for _, c := range r.calls {
		if ok(c) {
			d = max(d, c.end.Sub(c.start))
		}
	}
	return d
}

// recStore records every Admit and Release of its store.
type recStore struct {
	*redisstore.Store
	rec *recorder
}

func (s recStore) Admit(ctx context.Context, req *store.Request) (store.Answer, error) {
	start := time.Now()
	ans, err := s.Store.Admit(ctx, req)
	s.rec.add(storeCall{op: "admit", scope: req.Scopes[0].Key, start: start, end: time.Now(), admitted: err == nil && ans.Admitted, err: err})
	return ans, err
}

func (s recStore) Release(ctx context.Context, rel *store.Release) (store.ReleaseAnswer, error) {
	start := time.Now()
	ans, err := s.Store.Release(ctx, rel)
	var scope string
	if len(rel.Scopes) > 0 {
		scope = rel.Scopes[0].Key
	}
	s.rec.add(storeCall{op: "release", scope: scope, start: start, end: time.Now(), err: err})
	return ans, err
}

// crawlScope is what the crawl saw on one scope.
type crawlScope struct {
	inFlight, peak, over atomic.Int64
	ok, storeErrs        atomic.Int64 // admissions; Acquires that failed with a *store.Error
	waitErrs, otherErrs  atomic.Int64 // ... with a *throttle.WaitError (the deadline); with anything else
	late                 atomic.Int64 // Acquires that returned after their deadline (with slack)
	spanning             atomic.Int64 // Acquires under way at the kill
	spanningOK           atomic.Int64 // ... that were admitted
	mu                   sync.Mutex
	starts               []int64 // µs: p.Acquired
	lastOther            error
	progress             chan struct{}
}

// TestClusterMasterKilled: three managers (each with its own store and
// cluster client, as three worker processes) crawl three scopes, one on
// each master (Concurrency 2, Delay 20ms, LeaseTTL 2s, Options.Timeout
// 300ms, every Acquire bounded by 2s), while the master of one of them,
// which also carries the release channel's slot, is killed with SIGKILL
// and its replica promoted. For failing closed and StoreFallbackLocal it checks
// what the package documentation says a failover costs: how long the dead
// master's scopes and the others fail, and how (store.Error within
// Options.Timeout, CLUSTERDOWN, local admissions), the limits exceeded
// (none when failing closed; each manager alone with StoreFallbackLocal); that no
// Acquire returns after its deadline; that a lease renewed more often
// than the outage lasts survives it and a shorter one does not; that
// learned state, a gate and a start the replica had are kept; that a
// waiter is not woken by a release during the outage but is after it;
// that no slot stays taken past its lease; and that the crawl goes on.
// The figures are logged.
func TestClusterMasterKilled(t *testing.T) {
	t.Parallel() // waits, mostly, for the failover
	for _, mode := range []bool{false, true} {
		t.Run(modeName(mode), func(t *testing.T) {
			t.Parallel() // two clusters
			testMasterKilled(t, mode)
		})
	}
}

func modeName(fallback bool) string {
	if fallback {
		return "FallbackLocal"
	}
	return "FailClosed"
}

func testMasterKilled(t *testing.T, fallback bool) {
	const (
		managers       = 3
		perScope       = 2 // goroutines per manager and scope
		conc           = 2
		delay          = 20 * time.Millisecond
		maxService     = 20 * time.Millisecond
		leaseTTL       = 2 * time.Second
		timeout        = 300 * time.Millisecond // Options.Timeout
		acquireTimeout = 2 * time.Second
		slack          = 500 * time.Millisecond // between one clock's readings of an event
		// lateSlack: how late a call bounded by a deadline may return
		// on a loaded machine (a hang detector, not a speed).
		lateSlack = 2 * time.Second
		// checkTimeout is Options.Timeout of the checking stores, which
		// measure nothing: a loaded machine does not fail their calls.
		checkTimeout = 2 * time.Second
		backoff      = 300 * time.Millisecond // the delay a 429 teaches
		longLease    = 18 * time.Second       // renewed every 6s: longer than the outage
		shortLease   = time.Second            // shorter than any failover (node timeout 1s)
	)
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	prefix := uniquePrefix()
	victim, err := c.MasterOf(prefix + "released") // the subscriptions are on it too
	require.NoError(t, err)
	masters, err := c.Masters()
	require.NoError(t, err)
	others := slices.DeleteFunc(slices.Clone(masters), func(m string) bool { return m == victim })
	require.Len(t, others, 2)
	replicas, err := c.ReplicasOf(victim)
	require.NoError(t, err)

	rec := newRecorder()
	var logs lockedBuffer
	quiet := slog.New(slog.DiscardHandler)
	var ms []*throttle.ThrottlingManager
	for range managers {
		s, _ := dialClusterStore(t, c.Addrs(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL, Timeout: timeout, Logger: quiet})
		ms = append(ms, fleetManager(t, recStore{s, rec}, conc, delay, func(cfg *throttle.Config) {
			cfg.StoreFallbackLocal = fallback
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		}))
	}
	// The checker, failing closed: its store subscribes before the kill.
	checkStore, rdb := dialClusterStore(t, c.Addrs(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL, Timeout: checkTimeout, Logger: quiet})
	checker := fleetManager(t, checkStore, conc, delay, func(cfg *throttle.Config) {
		cfg.Default.Backoff.MinDelay = backoff
		cfg.Logger = quiet
	})
	stopWatch := checkStore.Watch(func(string) {})
	defer stopWatch()
	longStore, longRdb := dialClusterStore(t, c.Addrs(), redisstore.Options{Prefix: prefix, LeaseTTL: longLease, Timeout: checkTimeout, Logger: quiet})
	longM := fleetManager(t, longStore, conc, 0, func(cfg *throttle.Config) { cfg.Logger = quiet })
	shortStore, shortRdb := dialClusterStore(t, c.Addrs(), redisstore.Options{Prefix: prefix, LeaseTTL: shortLease, Timeout: checkTimeout, Logger: quiet})
	shortM := fleetManager(t, shortStore, conc, 0, func(cfg *throttle.Config) {
		cfg.Default.Backoff.MinDelay = backoff
		cfg.Logger = quiet
	})

	crawl := scopesOn(t, c, checkStore, "crawl", victim, others[0], others[1])
	learned := scopesOn(t, c, checkStore, "learned", victim)[0]
	heldLong := scopesOn(t, c, checkStore, "held-long", victim)[0]
	heldShort := scopesOn(t, c, checkStore, "held-short", victim)[0]
	wake := scopesOn(t, c, checkStore, "wake", others[0])[0]
	gated := scopesOn(t, c, checkStore, "gated", victim)[0]
	turn := scopesOn(t, c, checkStore, "turn", victim)[0]
	slowM := fleetManager(t, checkStore, conc, time.Minute, func(cfg *throttle.Config) { cfg.Logger = quiet })
	v := crawl[0]

	stats := map[string]*crawlScope{}
	for _, sc := range crawl {
		stats[sc] = &crawlScope{progress: make(chan struct{}, 4096)}
	}
	var killedAt atomic.Int64 // UnixNano, once killed
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, m := range ms {
		for _, sc := range crawl {
			st := stats[sc]
			for range perScope {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
						}
						ctx, cancel := context.WithTimeout(context.Background(), acquireTimeout)
						began := time.Now()
						p, err := m.Acquire(ctx, scoped(t, ctx, sc))
						cancel()
						ended := time.Now()
						if ended.Sub(began) > acquireTimeout+lateSlack {
							st.late.Add(1)
						}
						k := killedAt.Load()
						spanning := k != 0 && began.UnixNano() < k && ended.UnixNano() > k
						if spanning {
							st.spanning.Add(1)
						}
						if err != nil {
							var se *store.Error
							var we *throttle.WaitError
							switch {
							case errors.As(err, &se):
								st.storeErrs.Add(1)
							case errors.As(err, &we):
								st.waitErrs.Add(1)
							default:
								st.otherErrs.Add(1)
								st.mu.Lock()
								st.lastOther = err
								st.mu.Unlock()
							}
							// A crawler's pause before it tries again.
							pause := time.NewTimer(10 * time.Millisecond)
							select {
							case <-pause.C:
							case <-stop:
								pause.Stop()
								return
							}
							continue
						}
						if spanning {
							st.spanningOK.Add(1)
						}
						n := st.inFlight.Add(1)
						if n > conc {
							st.over.Add(1)
						}
						for pk := st.peak.Load(); n > pk && !st.peak.CompareAndSwap(pk, n); pk = st.peak.Load() {
						}
						st.mu.Lock()
						st.starts = append(st.starts, p.Acquired().UnixMicro())
						st.mu.Unlock()
						st.ok.Add(1)
						hold := time.NewTimer(rand.N(maxService + 1)) // the download
						<-hold.C
						st.inFlight.Add(-1)
						p.Release(&http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, nil)
						select {
						case st.progress <- struct{}{}:
						default:
						}
					}
				})
			}
		}
	}
	stopped := false
	stopCrawl := func() {
		if stopped {
			return
		}
		stopped = true
		close(stop)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		hang := time.NewTimer(15 * time.Second)
		defer hang.Stop()
		select {
		case <-done:
		case <-hang.C:
			t.Fatal("the crawl did not stop within 15s: an Acquire or a Release hangs")
		}
	}
	defer stopCrawl()
	progress := func(n int, msg string) {
		t.Helper()
		for _, sc := range crawl {
			st := stats[sc]
			for len(st.progress) > 0 {
				<-st.progress
			}
			awaitProgress(t, st.progress, n, 15*time.Second, fmt.Sprintf("%s: no progress on %s for 15s", msg, sc))
		}
	}
	progress(20, "before the kill")

	// Learned state on the victim (a 429 teaches a backoff delay), and
	// permits held through the failover, all replicated before the kill.
	pl := acquireScope(t, shortM, learned, 5*time.Second)
	pl.Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}, nil)
	ctx := context.Background()
	wantDelay := strconv.FormatInt(backoff.Microseconds(), 10)
	require.Equal(t, wantDelay, rdb.HGet(ctx, checkStore.Key(learned), "d").Val(), "the learned delay in Redis")
	var long, short []*throttle.Permit
	for range conc {
		long = append(long, acquireScope(t, longM, heldLong, 5*time.Second))
		short = append(short, acquireScope(t, shortM, heldShort, 5*time.Second))
	}
	// (The long leases are checked through a store of their own
	// LeaseTTL: every store cuts the leases it reads to its own, so the
	// checker's, of 2 s, would cut them to 2 s.)
	refusedScope(t, longM, heldLong, throttle.ReasonConcurrency)
	refusedScope(t, checker, heldShort, throttle.ReasonConcurrency)
	// A gate (Retry-After: 60) and a start (Delay 1 minute).
	pg := acquireScope(t, shortM, gated, 5*time.Second)
	pg.Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"60"}}}, nil)
	refusedScope(t, checker, gated, throttle.ReasonGate)
	acquireScope(t, slowM, turn, 5*time.Second).Release(nil, nil)
	refusedScope(t, slowM, turn, throttle.ReasonDelay)
	waitReplicated(t, victim)

	// A waiter on a healthy master's scope, whose slots are held; its
	// deadline comes before the replica can be promoted.
	var wakeHeld []*throttle.Permit
	for range conc {
		wakeHeld = append(wakeHeld, acquireScope(t, longM, wake, 5*time.Second))
	}
	missed := make(chan error, 1)
	waitCtx, cancelWait := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancelWait()
	go func() {
		p, err := checker.Acquire(waitCtx, scoped(t, waitCtx, wake))
		if err == nil {
			p.Release(nil, nil)
		}
		missed <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); checker.Waiting() == 0; {
		require.True(t, time.Now().Before(deadline), "the checker never waited")
		pause := time.NewTimer(time.Millisecond)
		<-pause.C
	}

	require.NoError(t, c.Node(victim).Kill()) // returns once the process is gone
	killed := time.Now()
	killedAt.Store(killed.UnixNano())
	// A slot of the waiter's scope freed at once: no wake-up comes, the
	// subscription was on the dead master.
	wakeHeld[0].Release(nil, nil)
	missedErr := <-missed
	missedAfter := time.Since(killed)
	promoted, err := c.WaitFailover(victim)
	require.NoError(t, err)
	healthy := time.Now()
	require.Contains(t, replicas, promoted)

	// The crawl goes on: a store admission on the dead master's scope.
	back := rec.await(t, 30*time.Second, "store admission on "+v+" after the failover", func(c storeCall) bool {
		return c.op == "admit" && c.scope == v && c.admitted && c.start.After(killed)
	})
	progress(20, "after the failover")
	stopCrawl()
	crawlStopped := time.Now()

	// Each client finds the new master at its own next reload of the
	// slot map.
	for _, cl := range []redis.Cmdable{rdb, longRdb, shortRdb} {
		reachable(t, cl, checkStore, learned)
	}

	// The waiter during the outage: its slot was freed (the release
	// reached the healthy master) but it was not woken, and its deadline
	// ended its wait.
	var we *throttle.WaitError
	require.ErrorAs(t, missedErr, &we, "a waiter during the outage")
	require.Len(t, leaseExpiries(t, rdb, checkStore, wake), 1, "the release during the outage took effect")
	wakeHeld[1].Release(nil, nil)
	// Gates and starts the replica had are kept.
	refusedScope(t, checker, gated, throttle.ReasonGate)
	refusedScope(t, slowM, turn, throttle.ReasonDelay)

	// Learned state replicated before the kill: on the new master, and
	// applied (two starts from two workers at least the delay apart).
	require.Equal(t, wantDelay, rdb.HGet(ctx, checkStore.Key(learned), "d").Val(), "the learned delay on the new master")
	p1 := acquireScope(t, checker, learned, 5*time.Second)
	p1.Release(nil, nil)
	p2 := acquireScope(t, shortM, learned, 5*time.Second)
	p2.Release(nil, nil)
	learnedGap := p2.Acquired().Sub(p1.Acquired())
	require.GreaterOrEqual(t, learnedGap, backoff, "the learned delay applies after the failover")

	// Permits held through the failover: a lease renewed every 6s
	// outlived the outage (refused, renewed on the new master); a lease
	// of 1s did not, and its slots were someone else's while the permits
	// were still held: Concurrency extra in flight.
	refusedScope(t, longM, heldLong, throttle.ReasonConcurrency)
	require.Equal(t, conc, longStore.Renew(ctx), "the long leases renewed on the new master")
	require.Equal(t, 0, shortStore.Renew(ctx), "the short leases expired during the outage")
	var extra []*throttle.Permit
	for range conc {
		p, adm := tryScope(t, longM, heldShort)
		require.NotNil(t, p, "a slot whose lease expired during the outage (%v)", adm.Reason)
		extra = append(extra, p)
	}
	refusedScope(t, longM, heldShort, throttle.ReasonConcurrency)
	for _, p := range slices.Concat(long, short, extra) {
		p.Release(nil, nil)
	}

	// No slot held past its lease: once the crawl stopped, no lease of a
	// crawl scope expires later than LeaseTTL from then, and after that
	// every scope admits its full concurrency at once.
	var latest time.Time
	for _, sc := range crawl {
		reachable(t, rdb, checkStore, sc)
		for _, exp := range leaseExpiries(t, rdb, checkStore, sc) {
			latest = maxTime(latest, exp)
			require.False(t, exp.After(crawlStopped.Add(leaseTTL+slack)), "%s: a lease expires at %v, later than LeaseTTL after the crawl stopped (%v)", sc, exp, crawlStopped)
		}
	}
	if wait := time.Until(latest); wait > 0 {
		expire := time.NewTimer(wait + 10*time.Millisecond) // the leases' expiry: Redis time is this clock
		<-expire.C
	}
	for _, sc := range crawl {
		// A lease whose release failed (a call that timed out on a
		// loaded machine) stays in the hash, expired, until the scope's
		// next admission clears it: it holds no slot. Only a lease that
		// has not expired would.
		now := time.Now()
		for _, exp := range leaseExpiries(t, rdb, checkStore, sc) {
			require.False(t, exp.After(now), "%s: a lease held after the latest expiry (it expires at %v)", sc, exp)
		}
		var ps []*throttle.Permit
		for range conc {
			ps = append(ps, acquireScope(t, checker, sc, 10*time.Second))
		}
		refusedScope(t, checker, sc, throttle.ReasonConcurrency)
		for _, p := range ps {
			p.Release(nil, nil)
		}
	}

	// Waiters are woken by releases again: the checker's subscription
	// moved to the new master. The slots are held with long leases, so
	// without the release the waiter would wait for its deadline.
	var held []*throttle.Permit
	for range conc {
		held = append(held, acquireScope(t, longM, wake, 5*time.Second))
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p, err := checker.Acquire(ctx, scoped(t, ctx, wake))
		if err == nil {
			p.Release(nil, nil)
		}
		got <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); checker.Waiting() == 0; {
		require.True(t, time.Now().Before(deadline), "the checker never waited")
		pause := time.NewTimer(time.Millisecond)
		<-pause.C
	}
	released := time.Now()
	held[0].Release(nil, nil)
	// Admitted before its deadline (10 s), with both slots held for 18 s
	// but for this release: the release woke it.
	require.NoError(t, <-got)
	woken := time.Since(released)
	held[1].Release(nil, nil)

	// The figures.
	outage := back.start.Sub(killed)
	vFails, vFirst, vLast, vErrs := rec.window(func(c storeCall) bool { return c.scope == v && !c.start.Before(killed) })
	oFails, oFirst, oLast, oErrs := rec.window(func(c storeCall) bool { return c.scope != v && !c.start.Before(killed) })
	clusterDown := func(c storeCall) bool { return strings.Contains(c.err.Error(), "CLUSTERDOWN") }
	isDown := func(c storeCall) bool { return c.scope != v && !c.start.Before(killed) && clusterDown(c) }
	isShared := func(c storeCall) bool { return c.scope != v && !c.start.Before(killed) && !clusterDown(c) }
	// A healthy master's call that timed out, begun once every node was
	// ok again, is the machine's load (two CPU-bound processes beside the
	// suite kept one from answering within Options.Timeout 3.6 s after
	// the dead master's last failure), not the outage: it is counted
	// and logged, not held to the outage's window.
	slow := func(c storeCall) bool {
		return isShared(c) && !c.start.Before(healthy) &&
			(errors.Is(c.err, context.DeadlineExceeded) || strings.Contains(c.err.Error(), "deadline exceeded") || strings.Contains(c.err.Error(), "i/o timeout"))
	}
	coupled := func(c storeCall) bool { return isShared(c) && !slow(c) }
	_, downFirst, downLast, _ := rec.window(isDown)
	shared, _, sharedLast, _ := rec.window(isShared)
	slowCalls, _, _, _ := rec.window(slow)
	downStart, sharedStart := rec.lastStart(isDown), rec.lastStart(coupled)
	longestFail := rec.longest(func(c storeCall) bool { return c.err != nil && !c.start.Before(killed) })
	rel := func(tm time.Time) string {
		if tm.IsZero() {
			return "-"
		}
		return tm.Sub(killed).Round(time.Millisecond).String()
	}
	t.Logf("%s: killed %s (the release channel's master); %s promoted, every node ok %v after the kill; first store admission on its scope %v after the kill",
		modeName(fallback),
		victim, promoted, healthy.Sub(killed).Round(time.Millisecond), outage.Round(time.Millisecond))
	t.Logf("failed store calls after the kill: %d on the dead master's scope (from %s to %s: %q), %d on the other masters' (from %s to %s: %q)",
		vFails, rel(vFirst), rel(vLast), vErrs, oFails, rel(oFirst), rel(oLast), oErrs)
	t.Logf("the whole cluster down (CLUSTERDOWN) from %s to %s; %d other masters' calls timed out in a pipeline with the dead master's, the last at %s; the longest failed call %v (Options.Timeout %v)",
		rel(downFirst), rel(downLast), shared, rel(sharedLast), longestFail.Round(time.Millisecond), timeout)
	for i, sc := range crawl {
		st := stats[sc]
		st.mu.Lock()
		closer, least := tooClose(st.starts, delay)
		other := st.lastOther
		during := 0 // starts between the kill and the first store admission on the dead master's scope
		for _, us := range st.starts {
			if at := time.UnixMicro(us); at.After(killed) && at.Before(back.start) {
				during++
			}
		}
		st.mu.Unlock()
		rate := float64(during) * float64(delay) / float64(back.start.Sub(killed))
		where := "other master"
		if i == 0 {
			where = "dead master"
		}
		t.Logf("  %s (%s): %d admitted; Acquire errors: %d store.Error, %d WaitError, %d other (%v); %d Acquires under way at the kill (%d admitted); peak in flight %d (limit %d), %d admissions over it; %d starts closer than Delay (min gap %v); %.1f starts per Delay during the outage; %d returned late",
			sc, where, st.ok.Load(), st.storeErrs.Load(), st.waitErrs.Load(), st.otherErrs.Load(), other, st.spanning.Load(), st.spanningOK.Load(),
			st.peak.Load(), conc, st.over.Load(), closer, least, rate, st.late.Load())
	}
	t.Logf("learned delay, gate and start kept (next starts %v apart, delay %v); a lease of %v kept through the outage, one of %v lost (%d extra in flight); a waiter during the outage not woken by a release (%v at %v after the kill); after it, one woken %v after a release",
		learnedGap.Round(time.Millisecond), backoff, longLease, shortLease, len(extra), missedErr, missedAfter.Round(time.Millisecond), woken.Round(time.Millisecond))

	// What the documentation promises.
	// (How soon the dead master's scopes admit again is the failover's
	// time plus the client's reload: logged, not asserted; the await
	// above bounds it.)
	require.Greater(t, vFails, 0, "the outage was seen")
	require.Less(t, longestFail, timeout+lateSlack, "a store call fails by Options.Timeout, not when the master is back")
	// Both with lateSlack, not slack: a healthy master that a loaded
	// machine keeps from answering within Options.Timeout fails a call
	// begun after the outage (a quiet run of the whole suite: one began
	// more than slack after the dead master's last failure and timed
	// out). What these bound is that failures end with the outage, not
	// how fast the machine answers.
	if !downLast.IsZero() {
		require.False(t, downStart.After(healthy.Add(lateSlack)), "CLUSTERDOWN only for calls begun before the cluster was ok again")
	}
	if shared > slowCalls {
		require.False(t, sharedStart.After(vLast.Add(lateSlack)), "calls on healthy masters fail only while the dead master's do")
	}
	if slowCalls > 0 {
		t.Logf("%d calls on healthy masters timed out after the cluster was ok again: the machine's load", slowCalls)
	}
	for i, sc := range crawl {
		st := stats[sc]
		st.mu.Lock()
		closer, _ := tooClose(st.starts, delay)
		other := st.lastOther
		st.mu.Unlock()
		require.Zero(t, st.late.Load(), "%s: Acquires returned after their deadline", sc)
		require.Zero(t, st.otherErrs.Load(), "%s: Acquire errors neither store.Error nor WaitError: %v", sc, other)
		require.Greater(t, st.ok.Load(), int64(0))
		switch fallback {
		case false:
			if i == 0 {
				// Only writes the replica had not received can be lost:
				// at most Concurrency extra in flight, one early start.
				require.LessOrEqual(t, st.peak.Load(), int64(2*conc), sc)
				require.LessOrEqual(t, closer, 1, sc)
				require.Greater(t, st.storeErrs.Load(), int64(0), sc)
			} else {
				require.Zero(t, st.over.Load(), "%s: in flight beyond Concurrency", sc)
				require.Zero(t, closer, "%s: starts closer than Delay", sc)
			}
		case true:
			require.Zero(t, st.storeErrs.Load(), "%s: StoreFallbackLocal returned a store.Error", sc)
			// Each manager admits alone, next to the store's permits.
			require.LessOrEqual(t, st.peak.Load(), int64((managers+1)*conc), sc)
			require.Greater(t, closer, 0, "%s: local admissions on every scope", sc)
		}
	}
	if fallback {
		require.Contains(t, logs.String(), "store unavailable, using local state")
		require.Contains(t, logs.String(), "store answers again")
	}
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// TestClusterFailoverLosesLastWrites: replication is asynchronous, so a
// master's last writes may not have reached its replica when it dies. The
// test makes that certain (the replica is frozen and its link cut before
// the writes) and checks what the package documentation says such a loss
// costs: the leases taken just before are gone (Concurrency extra in
// flight while their permits are still held; their renewal finds
// nothing), the delay turn too (one early start, and only one), the gate
// a 429's Retry-After set (a start before it), the learned state stored
// with it (back to the replica's version, and the workers' next learned
// state is stored onto it), and a release (its lease is back until it
// expires).
func TestClusterFailoverLosesLastWrites(t *testing.T) {
	t.Parallel() // waits, mostly, for the failover
	const (
		conc  = 2
		delay = 10 * time.Second
	)
	c := redistest.StartCluster(t, redistest.ClusterOptions{})
	prefix := uniquePrefix()
	masters, err := c.Masters()
	require.NoError(t, err)
	victim := masters[0]
	replicas, err := c.ReplicasOf(victim)
	require.NoError(t, err)
	replica := replicas[0]
	quiet := slog.New(slog.DiscardHandler)
	opts := redisstore.Options{Prefix: prefix, Logger: quiet}
	storeA, _ := dialClusterStore(t, c.Addrs(), opts)
	storeB, rdb := dialClusterStore(t, c.Addrs(), opts)
	mod := func(cfg *throttle.Config) { cfg.Logger = quiet }
	a0, a1 := fleetManager(t, storeA, conc, 0, mod), fleetManager(t, storeA, conc, delay, mod)
	b0, b1 := fleetManager(t, storeB, conc, 0, mod), fleetManager(t, storeB, conc, delay, mod)
	slots := scopesOn(t, c, storeA, "slots", victim)[0]
	turn := scopesOn(t, c, storeA, "turn", victim)[0]
	gated := scopesOn(t, c, storeA, "gated", victim)[0]
	undone := scopesOn(t, c, storeA, "undone", victim)[0]

	// Learned state the replica has: one 429 (backoff) on gated.
	acquireScope(t, a0, gated, 5*time.Second).Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}, nil)
	ctx := context.Background()
	replicated := rdb.HGetAll(ctx, storeA.Key(gated)).Val()
	require.NotEmpty(t, replicated["v"], "learned state stored")
	// A permit the replica knows, released after the cut.
	kept := acquireScope(t, a0, undone, 5*time.Second)
	waitReplicated(t, victim)

	// Cut the replication: the replica frozen, its link closed by the
	// master. What follows reaches the master only.
	require.NoError(t, c.Node(replica).Pause())
	t.Cleanup(func() { _ = c.Node(replica).Resume() })
	direct := redis.NewClient(&redis.Options{Addr: victim, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
	defer direct.Close()
	require.NoError(t, direct.Do(ctx, "CLIENT", "KILL", "TYPE", "replica").Err())

	var held []*throttle.Permit
	for range conc {
		held = append(held, acquireScope(t, a0, slots, 5*time.Second))
	}
	turnStart := acquireScope(t, a1, turn, 5*time.Second)
	turnStart.Release(nil, nil)
	kept.Release(nil, nil)
	require.Empty(t, leaseExpiries(t, rdb, storeA, undone), "released on the master")
	g := acquireScope(t, a0, gated, 5*time.Second)
	g.Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"60"}}}, nil)
	lost := rdb.HGetAll(ctx, storeA.Key(gated)).Val()
	require.NotEqual(t, replicated["v"], lost["v"], "a newer learned state on the master")
	require.NotEmpty(t, lost["gate"], "the gate on the master")
	refusedScope(t, b0, slots, throttle.ReasonConcurrency)
	refusedScope(t, b1, turn, throttle.ReasonDelay)
	refusedScope(t, b0, gated, throttle.ReasonGate)

	killed := time.Now()
	require.NoError(t, c.Node(victim).Kill())
	require.NoError(t, c.Node(replica).Resume())
	promoted, err := c.WaitFailover(victim)
	require.NoError(t, err)
	require.Equal(t, replica, promoted)
	failover := time.Since(killed)
	reachable(t, rdb, storeB, slots)

	// The leases are gone: Concurrency more admitted while a0's permits
	// are still held, then no more; a0's store finds nothing to renew.
	var extra []*throttle.Permit
	for range conc {
		p, adm := tryScope(t, b0, slots)
		require.NotNil(t, p, "the lost leases' slots (%v)", adm.Reason)
		extra = append(extra, p)
	}
	refusedScope(t, b0, slots, throttle.ReasonConcurrency)
	require.Equal(t, 0, storeA.Renew(ctx))
	// The delay turn is gone: one early start, then the delay holds.
	early, adm := tryScope(t, b1, turn)
	require.NotNil(t, early, "the lost delay turn (%v)", adm.Reason)
	gap := early.Acquired().Sub(turnStart.Acquired())
	early.Release(nil, nil)
	refusedScope(t, b1, turn, throttle.ReasonDelay)
	// The gate is gone, and the learned state is the replica's.
	after := rdb.HGetAll(ctx, storeA.Key(gated)).Val()
	require.Empty(t, after["gate"])
	require.Equal(t, replicated["v"], after["v"], "the learned state's version is the replica's")
	require.Equal(t, replicated["ld"], after["ld"], "the learned state is the replica's")
	p, adm := tryScope(t, b0, gated)
	require.NotNil(t, p, "a start before the lost gate (%v)", adm.Reason)
	p.Release(nil, nil)
	// The workers hold the lost version (a0 stored it, b0 read it with
	// its refusal), newer than the store's: their next learned state is
	// merged onto the replica's (a conflict) and stored after it.
	acquireScope(t, a0, gated, 5*time.Second).Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}, nil)
	was, err := strconv.Atoi(replicated["v"])
	require.NoError(t, err)
	now, err := rdb.HGet(ctx, storeA.Key(gated), "v").Int()
	require.NoError(t, err)
	require.Greater(t, now, was, "learned state stored again after the failover")
	// The release is undone: its lease is back, and holds its slot until
	// it expires, LeaseTTL after its last renewal.
	back := leaseExpiries(t, rdb, storeA, undone)
	require.Len(t, back, 1, "the released lease is back")
	require.False(t, back[0].After(kept.Acquired().Add(30*time.Second)), "it expires within LeaseTTL (default 30s) of its admission")
	p, adm = tryScope(t, b0, undone)
	require.NotNil(t, p, "%v", adm.Reason)
	refusedScope(t, b0, undone, throttle.ReasonConcurrency)
	p.Release(nil, nil)

	for _, p := range slices.Concat(held, extra) {
		p.Release(nil, nil)
	}
	t.Logf("writes the replica missed, lost in the failover (%v): %d leases (%d in flight with Concurrency %d), a delay turn (a start %v after the previous one, Delay %v; the next refused), a 60s gate (a start at once), the learned state (back to version %s), a release (its slot held until %v)",
		failover.Round(time.Millisecond), conc, 2*conc, conc, gap.Round(time.Millisecond), delay, replicated["v"], back[0].Sub(kept.Acquired()).Round(time.Second))
}
