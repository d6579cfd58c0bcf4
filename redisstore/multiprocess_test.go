package redisstore_test

// Tests of the store across worker processes and against a Redis that
// misbehaves (paused, restarted without its data, fed malformed script
// arguments). They run on a real redis-server (redistest.Start) and in
// real time, since they cross processes; they never sleep to wait for
// something: they wait on events (a process exit, a line on a pipe, a
// request arriving, a channel), and every timeout in them is a hang
// detector, not a schedule.
//
// The multi-process tests re-execute the test binary as worker processes
// running TestWorkerProcess, with the worker's job in the environment
// variable workerEnv.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// workerEnv carries a worker process's job (a JSON workerSpec).
const workerEnv = "REDISSTORE_TEST_WORKER"

// hdrAcquired carries a permit's Acquired time (the store's time, Unix
// microseconds) from a worker to the test server.
const hdrAcquired = "X-Throttle-Acquired"

// hdrScope names a request's scope, when the worker set one
// (workerSpec.Scopes).
const hdrScope = "X-Throttle-Scope"

// workerSpec is a worker process's job.
type workerSpec struct {
	Mode        string // "limits" or "hold"
	ID          int
	Addr        string   // Redis
	Cluster     []string // Redis Cluster, instead of Addr: its nodes' addresses
	Scopes      []string // limits: when set, request i has the one scope Scopes[i%len(Scopes)]
	Prefix      string
	URL         string // what to request (limits) or whose scope to hold (hold)
	Requests    int    // limits: requests of this worker
	Goroutines  int    // limits: goroutines per worker
	Concurrency int
	Delay       time.Duration
	LeaseTTL    time.Duration
}

// TestWorkerProcess is a worker process of the multi-process tests; it is
// skipped unless one of them started it.
func TestWorkerProcess(t *testing.T) {
	raw := os.Getenv(workerEnv)
	if raw == "" {
		t.Skip("a worker process of the multi-process tests, run by them")
	}
	var spec workerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		t.Fatal(err)
	}
	var store *redisstore.Store
	if len(spec.Cluster) > 0 {
		store, _ = dialClusterStore(t, spec.Cluster, redisstore.Options{Prefix: spec.Prefix, LeaseTTL: spec.LeaseTTL})
	} else {
		store, _ = dialStore(t, spec.Addr, redisstore.Options{Prefix: spec.Prefix, LeaseTTL: spec.LeaseTTL})
	}
	m := fleetManager(t, store, spec.Concurrency, spec.Delay, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second) // hang detector
	defer cancel()
	switch spec.Mode {
	case "limits":
		limitsWorker(ctx, t, m, spec)
	case "hold":
		holdWorker(ctx, t, m, spec)
	default:
		t.Fatalf("unknown mode %q", spec.Mode)
	}
}

// limitsWorker makes spec.Requests requests to spec.URL from
// spec.Goroutines goroutines, each with its permit's Acquired time in a
// header (and its scope, round robin over spec.Scopes when set).
func limitsWorker(ctx context.Context, t *testing.T, m *throttle.ThrottlingManager, spec workerSpec) {
	tr := &http.Transport{MaxIdleConnsPerHost: spec.Concurrency}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range spec.Goroutines {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(spec.Requests); i = next.Add(1) {
				if err := limitsRequest(ctx, m, client, spec, int(i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// limitsRequest makes the worker's request i (from 1).
func limitsRequest(ctx context.Context, m *throttle.ThrottlingManager, client *http.Client, spec workerSpec, i int) error {
	var scope string
	if len(spec.Scopes) > 0 {
		scope = spec.Scopes[i%len(spec.Scopes)]
		ctx = throttle.WithScopeKeys(ctx, scope)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.URL, nil)
	if err != nil {
		return err
	}
	p, err := m.Acquire(ctx, req)
	if err != nil {
		return err
	}
	req.Header.Set(hdrAcquired, strconv.FormatInt(p.Acquired().UnixMicro(), 10))
	req.Header.Set("X-Worker", strconv.Itoa(spec.ID))
	if scope != "" {
		req.Header.Set(hdrScope, scope)
	}
	resp, err := client.Do(req)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
	}
	p.Release(resp, err)
	return err
}

// holdWorker takes every slot of spec.URL's scope, says "held" on stdout
// and keeps the slots (their leases renewed by the store) until its stdin
// ends or it is killed.
func holdWorker(ctx context.Context, t *testing.T, m *throttle.ThrottlingManager, spec workerSpec) {
	for range spec.Concurrency {
		if _, err := m.Acquire(ctx, getReq(t, spec.URL)); err != nil {
			t.Fatal(err)
		}
	}
	fmt.Println("held")
	_, _ = io.Copy(io.Discard, os.Stdin) // never released
}

// worker is a worker process started by startWorker.
type worker struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, line by line; closed at EOF
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, once done is closed
}

// startWorker re-executes the test binary as a worker doing spec. The
// worker is killed, if still running, when the test ends, and its output
// logged if the test failed.
func startWorker(t *testing.T, spec workerSpec) *worker {
	t.Helper()
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	w := &worker{lines: make(chan string, 16), done: make(chan struct{})}
	w.cmd = exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1", "-test.timeout=60s")
	w.cmd.Env = append(os.Environ(), workerEnv+"="+string(raw))
	w.cmd.Stderr = &w.stderr
	w.stdin, err = w.cmd.StdinPipe()
	require.NoError(t, err)
	r, wr, err := os.Pipe()
	require.NoError(t, err)
	w.cmd.Stdout = wr
	err = w.cmd.Start()
	wr.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(w.lines)
		defer r.Close()
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			w.stdout.Write(append(sc.Bytes(), '\n'))
			select {
			case w.lines <- sc.Text():
			default: // nobody waits for lines now
			}
		}
	}()
	go func() {
		<-readDone
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.stdin.Close()
		select {
		case <-w.done:
		default:
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("worker %d: %v\nstdout:\n%s\nstderr:\n%s", spec.ID, w.err, w.stdout.String(), w.stderr.String())
		}
	})
	return w
}

// waitLine waits for the line want on w's stdout.
func (w *worker) waitLine(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-w.lines:
			if !ok {
				<-w.done
				t.Fatalf("worker exited (%v) before saying %q:\n%s\n%s", w.err, want, w.stdout.String(), w.stderr.String())
			}
			if line == want {
				return
			}
		case <-timer.C:
			t.Fatalf("worker did not say %q within %v (hang detector)", want, timeout)
		}
	}
}

// wait waits for w to exit and returns its error.
func (w *worker) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-w.done:
		return w.err
	case <-timer.C:
		t.Fatalf("worker did not exit within %v (hang detector)", timeout)
		return nil
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// dialStore returns a store on the Redis at addr, closed with the test.
func dialStore(t testing.TB, addr string, opts redisstore.Options) (*redisstore.Store, *redis.Client) {
	t.Helper()
	client := redisstore.NewClient(&redis.Options{Addr: addr})
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

// uniquePrefix is a key prefix no other test uses.
func uniquePrefix() string { return "mp" + strconv.FormatInt(prefixes.Add(1), 10) + ":" }

// fleetManager returns a manager on st whose scopes have concurrency
// conc, delay delay, no slot delay and no jitter (in backoff neither);
// robots.txt off. mod, if not nil, changes the config further.
func fleetManager(t testing.TB, st store.Store, conc int, delay time.Duration, mod func(*throttle.Config)) *throttle.ThrottlingManager {
	t.Helper()
	cfg := throttle.DefaultConfig()
	cfg.Default.Concurrency, cfg.Default.Delay, cfg.Default.SlotDelay = conc, delay, 0
	cfg.Default.Jitter, cfg.Default.Backoff.Jitter = throttle.Jitter{}, throttle.Jitter{}
	cfg.Robots.Enabled = false
	cfg.Store = st
	if mod != nil {
		mod(&cfg)
	}
	m, err := throttle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func getReq(t testing.TB, url string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// acquireWithin is Acquire with timeout as a hang detector.
func acquireWithin(t *testing.T, m *throttle.ThrottlingManager, url string, timeout time.Duration) *throttle.Permit {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	p, err := m.Acquire(ctx, getReq(t, url))
	if err != nil {
		t.Fatalf("Acquire %s: %v", url, err)
	}
	return p
}

// refused checks that TryAcquire refuses url for why.
func refused(t *testing.T, m *throttle.ThrottlingManager, url string, why throttle.Reason) {
	t.Helper()
	p, adm, err := m.TryAcquire(getReq(t, url))
	require.NoError(t, err)
	if p != nil {
		p.Release(nil, nil)
		t.Fatalf("TryAcquire %s admitted; want refused for %v", url, why)
	}
	require.Equal(t, why, adm.Reason, "TryAcquire %s", url)
}

// TestMultiProcessLimits: 4 worker processes with 4 goroutines each send
// 512 requests to one host through managers sharing a Redis store
// (Concurrency 2, Delay 20ms, no jitter). The test server counts the
// requests in flight: never more than 2. The starts the store recorded
// (each request's Acquired time, in a header) are never closer than 20ms.
func TestMultiProcessLimits(t *testing.T) {
	t.Parallel() // waits, mostly: overlaps the other long test
	const (
		workers    = 4
		goroutines = 4
		requests   = 512
		conc       = 2
		delay      = 20 * time.Millisecond
		maxService = 40 * time.Millisecond // the server takes 0..40ms: sometimes the slots bind, sometimes the delay
	)
	srv := redistest.Start(t)
	prefix := uniquePrefix()

	type arrival struct {
		at       time.Time
		acquired int64 // µs, the store's time
		worker   string
	}
	var (
		mu                 sync.Mutex
		arrivals           []arrival
		inFlight, peak     atomic.Int64
		overC, badAcquired atomic.Int64
	)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		n := inFlight.Add(1)
		if n > conc {
			overC.Add(1)
		}
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		acq, err := strconv.ParseInt(r.Header.Get(hdrAcquired), 10, 64)
		if err != nil {
			badAcquired.Add(1)
		}
		mu.Lock()
		arrivals = append(arrivals, arrival{now, acq, r.Header.Get("X-Worker")})
		mu.Unlock()
		service := time.NewTimer(rand.N(maxService + 1)) // a measured hold: the server's work
		select {
		case <-service.C:
		case <-r.Context().Done():
			service.Stop()
		}
		// Out of flight before the response can reach the client (it is
		// sent when the handler returns), so the count never includes a
		// request whose permit was released.
		inFlight.Add(-1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(ts.Close)

	start := time.Now()
	var ws []*worker
	for i := range workers {
		ws = append(ws, startWorker(t, workerSpec{Mode: "limits", ID: i, Addr: srv.Addr(), Prefix: prefix, URL: ts.URL + "/page",
			Requests: requests / workers, Goroutines: goroutines, Concurrency: conc, Delay: delay}))
	}
	for i, w := range ws {
		if err := w.wait(t, 60*time.Second); err != nil {
			t.Fatalf("worker %d: %v", i, err)
		}
	}
	wall := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, arrivals, requests)
	require.Zero(t, badAcquired.Load(), "requests without an Acquired header")
	perWorker := map[string]int{}
	starts := make([]int64, 0, len(arrivals))
	for _, a := range arrivals {
		perWorker[a.worker]++
		starts = append(starts, a.acquired)
	}
	slices.Sort(starts)
	minGap, tooClose := time.Duration(1<<62), 0
	for i := 1; i < len(starts); i++ {
		g := time.Duration(starts[i]-starts[i-1]) * time.Microsecond
		minGap = min(minGap, g)
		if g < delay {
			tooClose++
		}
	}
	slices.SortFunc(arrivals, func(a, b arrival) int { return a.at.Compare(b.at) })
	minArrival := time.Duration(1 << 62)
	for i := 1; i < len(arrivals); i++ {
		minArrival = min(minArrival, arrivals[i].at.Sub(arrivals[i-1].at))
	}
	span := time.Duration(starts[len(starts)-1]-starts[0]) * time.Microsecond
	t.Logf("%d requests from %d processes x %d goroutines (per worker %v) in %v (%.1f req/s over the starts' span %v; limit %.0f req/s)",
		len(arrivals), workers, goroutines, perWorker, wall.Round(time.Millisecond),
		float64(len(starts)-1)/span.Seconds(), span.Round(time.Millisecond), float64(time.Second)/float64(delay))
	t.Logf("peak in flight at the server %d (limit %d), %d over; min gap between starts (Acquired) %v (Delay %v), %d closer; min gap between arrivals at the server %v (not asserted: network lag)",
		peak.Load(), conc, overC.Load(), minGap, delay, tooClose, minArrival)
	require.Zero(t, overC.Load(), "requests in flight beyond Concurrency")
	require.Zero(t, tooClose, "starts closer than Delay")
	require.Len(t, perWorker, workers, "every worker sent requests")
	require.Equal(t, int64(conc), peak.Load(), "the slots were never all used: the test did not exercise Concurrency")
}

// TestKilledWorkerFreesSlots: a worker process holds both slots of a scope
// (LeaseTTL 1s) and is killed with SIGKILL; a manager in this process
// waiting for the scope gets its permits once the dead worker's leases
// expire, within LeaseTTL of the kill.
func TestKilledWorkerFreesSlots(t *testing.T) {
	const (
		conc     = 2
		leaseTTL = time.Second
		url      = "http://held.test/"
	)
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	w := startWorker(t, workerSpec{Mode: "hold", Addr: srv.Addr(), Prefix: prefix, URL: url, Concurrency: conc, LeaseTTL: leaseTTL})
	w.waitLine(t, "held", 30*time.Second)

	store, rdb := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL})
	m := fleetManager(t, store, conc, 0, nil)
	refused(t, m, url, throttle.ReasonConcurrency)

	require.NoError(t, w.cmd.Process.Kill())
	_ = w.wait(t, 10*time.Second)
	killed := time.Now()
	// The leases outlive the worker until they expire, within LeaseTTL of
	// the kill (they were renewed at most LeaseTTL/3 before it).
	expiry := deadLeases(t, rdb, store, "held.test", conc, leaseTTL)

	var ps []*throttle.Permit
	for range conc {
		ps = append(ps, acquireWithin(t, m, url, leaseTTL+10*time.Second))
	}
	after := time.Since(killed)
	late := ps[0].Acquired().Sub(expiry)
	t.Logf("permits %v after the SIGKILL (LeaseTTL %v); the first %v after the dead worker's earliest lease expiry (Redis time)",
		after.Round(time.Millisecond), leaseTTL, late.Round(time.Microsecond))
	require.GreaterOrEqual(t, late, time.Duration(0))
	require.Len(t, leaseExpiries(t, rdb, store, "held.test"), conc, "only our leases remain")
	for _, p := range ps {
		p.Release(nil, nil)
	}
}

// TestLiveWorkerKeepsSlots: with LeaseTTL 3s, a permit held for 5 s by a
// live manager keeps its slot: the store's renewal goroutine extends the
// lease (every second: two seconds to spare on a loaded machine), and
// another manager is refused (ReasonConcurrency) the whole time.
func TestLiveWorkerKeepsSlots(t *testing.T) {
	t.Parallel() // waits, mostly: overlaps the other long test
	const (
		leaseTTL = 3 * time.Second
		hold     = 5 * time.Second
		url      = "http://renew.test/"
	)
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	storeA, rdb := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL})
	storeB, _ := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL})
	a := fleetManager(t, storeA, 1, 0, nil)
	b := fleetManager(t, storeB, 1, 0, nil)

	p := acquireWithin(t, a, url, 5*time.Second)
	holdTimer := time.NewTimer(hold)              // a measured hold
	tick := time.NewTicker(50 * time.Millisecond) // samples during the hold
	defer tick.Stop()
	checks := 0
	for done := false; !done; {
		select {
		case <-holdTimer.C:
			done = true
		case <-tick.C:
			refused(t, b, url, throttle.ReasonConcurrency)
			checks++
		}
	}
	zs := leaseExpiries(t, rdb, storeA, "renew.test")
	require.Len(t, zs, 1)
	extended := zs[0].Sub(p.Acquired())
	t.Logf("held %v with LeaseTTL %v: %d TryAcquires of another manager refused for concurrency; the lease now expires %v after the start",
		hold, leaseTTL, checks, extended.Round(time.Millisecond))
	require.Greater(t, extended, hold, "the lease was renewed")
	p.Release(nil, nil)
	p2, _, err := b.TryAcquire(getReq(t, url))
	require.NoError(t, err)
	require.NotNil(t, p2, "the slot is free once released")
	p2.Release(nil, nil)
}

// TestRedisPausedFailsFast: with Redis frozen (SIGSTOP) and failing closed,
// Acquire returns a *store.Error within Options.Timeout, not a
// hang.
func TestRedisPausedFailsFast(t *testing.T) {
	const timeout = 300 * time.Millisecond
	srv := redistest.Start(t)
	rs, _ := dialStore(t, srv.Addr(), redisstore.Options{Prefix: uniquePrefix(), Timeout: timeout})
	m := fleetManager(t, rs, 1, 0, nil)
	acquireWithin(t, m, "http://paused.test/", 5*time.Second).Release(nil, nil) // a pooled connection

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	for _, op := range []string{"Acquire", "TryAcquire"} {
		type result struct {
			p   *throttle.Permit
			err error
		}
		res := make(chan result, 1)
		start := time.Now()
		go func() {
			var r result
			if op == "Acquire" {
				r.p, r.err = m.Acquire(context.Background(), getReq(t, "http://paused.test/"))
			} else {
				r.p, _, r.err = m.TryAcquire(getReq(t, "http://paused.test/"))
			}
			res <- r
		}()
		hang := time.NewTimer(10 * time.Second) // Redis stays paused: only the call's own bound can end it
		var r result
		select {
		case r = <-res:
			hang.Stop()
		case <-hang.C:
			t.Fatalf("%s with Redis paused did not return within 10s", op)
		}
		took := time.Since(start)
		t.Logf("%s with Redis paused: %v after %v (Options.Timeout %v)", op, r.err, took.Round(time.Millisecond), timeout)
		require.Nil(t, r.p)
		var se *store.Error
		require.ErrorAs(t, r.err, &se)
		require.ErrorIs(t, r.err, store.ErrUnavailable)
		require.Equal(t, "admit", se.Op)
		require.True(t, timedOut(r.err), "ended by the call's bound (Options.Timeout): %v", r.err)
	}

	// Resumed, Redis runs the two admissions queued during the pause;
	// their callers got errors, so they must take no slot (admit.lua
	// refuses them past their deadline): the scope, Concurrency 1, admits
	// at once.
	require.NoError(t, srv.Resume())
	p, adm, err := m.TryAcquire(getReq(t, "http://paused.test/"))
	require.NoError(t, err)
	require.NotNil(t, p, "refused after Resume (%v): a timed-out admission holds the slot", adm.Reason)
	p.Release(nil, nil)
}

// TestRedisPausedFallbackLocal: with Redis frozen and StoreFallbackLocal,
// Acquire succeeds from local state after one Options.Timeout, logs the
// outage once, and after Resume and StoreRetry the requests use the store
// again; the admissions that timed out, which Redis runs when it resumes,
// leave nothing. The manager runs on a fake clock, so StoreRetry passes at
// once; the store and the Redis timeouts are real.
func TestRedisPausedFallbackLocal(t *testing.T) {
	const (
		timeout = 300 * time.Millisecond
		retry   = time.Second
	)
	srv := redistest.Start(t)
	store, rdb := dialStore(t, srv.Addr(), redisstore.Options{Prefix: uniquePrefix(), Timeout: timeout})
	clock := throttletest.NewClock(time.Now())
	var logs lockedBuffer
	var lastErr atomic.Value
	var storeAsks atomic.Int64 // store calls that failed while Redis was paused
	counting := errCountingStore{store, new(atomic.Bool), &storeAsks, &lastErr}
	m := fleetManager(t, counting, 4, 0, func(c *throttle.Config) {
		c.StoreFallbackLocal, c.StoreRetry, c.Clock = true, retry, clock
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	acquireWithin(t, m, "http://before.test/", 5*time.Second).Release(nil, nil)

	require.NoError(t, srv.Pause())
	t.Cleanup(func() { _ = srv.Resume() })
	counting.after.Store(true)
	for i := range 6 {
		if i == 3 {
			clock.Advance(retry) // the store is asked again, still paused
		}
		p := acquireWithin(t, m, "http://outage.test/", 10*time.Second)
		p.Release(nil, nil)
	}
	t.Logf("6 Acquires with Redis paused, all admitted from local state; %d store calls failed (the last: %v)", storeAsks.Load(), lastErr.Load())
	// One admission a StoreRetry asks the store; the releases of local
	// permits do not.
	require.Equal(t, int64(2), storeAsks.Load(), "the store is asked once per StoreRetry")
	require.True(t, timedOut(lastErr.Load().(error)), "ended by the call's bound (Options.Timeout): %v", lastErr.Load())
	require.Equal(t, 1, strings.Count(logs.String(), "store unavailable"), logs.String())

	counting.after.Store(false)
	require.NoError(t, srv.Resume())
	clock.Advance(retry)
	state := store.Key("outage.test")
	ctx := context.Background()
	n, err := rdb.Exists(ctx, state).Result()
	require.NoError(t, err)
	require.Zero(t, n, "outage.test's timed-out admissions left keys in Redis")
	p := acquireWithin(t, m, "http://outage.test/", 5*time.Second)
	require.Len(t, leaseExpiries(t, rdb, store, "outage.test"), 1, "outage.test's state and lease in Redis after the outage")
	p.Release(nil, nil)
	require.Contains(t, logs.String(), "store answers again")
	require.Equal(t, 1, strings.Count(logs.String(), "store unavailable"), logs.String())
}

// timedOut reports whether err is a deadline's: the context's, or the
// connection's (go-redis sets the context's deadline on the socket).
func timedOut(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)
}

// errCountingStore counts the errors of the store calls that began after
// the test said so (after a Redis restart).
type errCountingStore struct {
	*redisstore.Store
	after *atomic.Bool
	errs  *atomic.Int64
	last  *atomic.Value // the last error counted
}

func (s errCountingStore) count(after bool, err error) {
	if after && err != nil {
		s.errs.Add(1)
		s.last.Store(err)
	}
}

func (s errCountingStore) Admit(ctx context.Context, req *store.Request) (store.Answer, error) {
	after := s.after.Load()
	ans, err := s.Store.Admit(ctx, req)
	s.count(after, err)
	return ans, err
}

func (s errCountingStore) Release(ctx context.Context, rel *store.Release) (store.ReleaseAnswer, error) {
	after := s.after.Load()
	ans, err := s.Store.Release(ctx, rel)
	s.count(after, err)
	return ans, err
}

// TestRedisRestartDataLost: three managers (workers) acquire and release
// on two scopes while Redis restarts without its data (and without its
// script cache). Afterwards every call works again (EVALSHA falls back to
// EVAL), a scope's learned backoff delay returns to Redis with the next
// release, and no slot is lost.
func TestRedisRestartDataLost(t *testing.T) {
	const (
		conc     = 2
		delay    = 5 * time.Millisecond
		backoff  = 200 * time.Millisecond // the delay one 429 teaches (Factor 40 x delay)
		leaseTTL = 10 * time.Second       // a slot lost would outlive the test's waits
		slow     = "http://slow.test/"
	)
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	var after atomic.Bool
	var errsAfter atomic.Int64
	var lastErr atomic.Value
	var ms []*throttle.ThrottlingManager
	var rdb *redis.Client
	var store0 *redisstore.Store
	for i := range 3 {
		s, c := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL, Timeout: 500 * time.Millisecond})
		if i == 0 {
			rdb, store0 = c, s
		}
		ms = append(ms, fleetManager(t, errCountingStore{s, &after, &errsAfter, &lastErr}, conc, delay, func(c *throttle.Config) {
			c.Default.Backoff.Factor = float64(backoff / delay)
			c.Logger = slog.New(slog.DiscardHandler)
		}))
	}
	ctx := context.Background()

	// slow.test learns a backoff delay from a 429 (ms[0]); ms[1] gets it
	// from the store with its next admission.
	acquireWithin(t, ms[0], slow, 5*time.Second).Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}, nil)
	slowState := store0.Key("slow.test")
	require.Equal(t, strconv.FormatInt(backoff.Microseconds(), 10), rdb.HGet(ctx, slowState, "d").Val(), "the learned delay in Redis")
	acquireWithin(t, ms[1], slow, 5*time.Second).Release(nil, nil)

	// Workers: Acquire and Release on a.test and b.test until stop; an
	// error waits for the restart to end (restarted) and is counted if
	// the call began after it.
	progress := make(chan struct{}, 1024)
	restarted, stop := make(chan struct{}), make(chan struct{})
	var okBefore, okAfter, failed atomic.Int64
	var wg sync.WaitGroup
	for i, m := range ms {
		for g := range 2 {
			url := []string{"http://a.test/", "http://b.test/"}[(i+g)%2]
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					wasAfter := after.Load()
					actx, cancel := context.WithTimeout(ctx, 5*time.Second)
					p, err := m.Acquire(actx, getReq(t, url))
					cancel()
					if err != nil {
						failed.Add(1)
						if wasAfter {
							t.Errorf("Acquire after the restart: %v", err)
							return
						}
						select {
						case <-restarted:
						case <-stop:
							return
						}
						continue
					}
					p.Release(&http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, nil)
					if wasAfter {
						okAfter.Add(1)
					} else {
						okBefore.Add(1)
					}
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			})
		}
	}
	waitProgress := func(n int) {
		t.Helper()
		awaitProgress(t, progress, n, 10*time.Second, "workers made no progress for 10s (hang detector)")
	}
	waitProgress(50)
	start := time.Now()
	require.NoError(t, srv.Restart(false))
	down := time.Since(start)
	after.Store(true)
	close(restarted)
	for len(progress) > 0 {
		<-progress
	}
	waitProgress(100)
	close(stop)
	wg.Wait()
	t.Logf("restart took %v; %d admissions before, %d after (all of them begun after the restart returned succeeded: %d store errors after); %d Acquires failed during the restart",
		down.Round(time.Millisecond), okBefore.Load(), okAfter.Load(), errsAfter.Load(), failed.Load())
	if err := lastErr.Load(); err != nil {
		t.Errorf("store errors after the restart: %d, the last: %v", errsAfter.Load(), err)
	}

	// The learned delay: gone with the data, back with ms[1]'s next
	// release (the store has version 0 and takes the record), and
	// applied to ms[0]'s next start.
	require.Zero(t, rdb.Exists(ctx, slowState).Val(), "slow.test's state went with the data")
	p1 := acquireWithin(t, ms[1], slow, 5*time.Second)
	p1.Release(nil, nil)
	require.Equal(t, strconv.FormatInt(backoff.Microseconds(), 10), rdb.HGet(ctx, slowState, "d").Val(), "the learned delay is back in Redis")
	v, err := rdb.HGet(ctx, slowState, "v").Int64()
	require.NoError(t, err)
	p0 := acquireWithin(t, ms[0], slow, 5*time.Second)
	gap := p0.Acquired().Sub(p1.Acquired())
	p0.Release(nil, nil)
	t.Logf("slow.test after the restart: learned delay %v back in Redis at version %d; next start from another worker %v later",
		backoff, v, gap.Round(time.Millisecond))
	require.GreaterOrEqual(t, gap, backoff)

	// No slot lost: each scope admits its concurrency again, no more, and
	// at once (a lost lease would hold a slot for LeaseTTL).
	for _, url := range []string{"http://a.test/", "http://b.test/", slow} {
		var ps []*throttle.Permit
		for i := range conc {
			ps = append(ps, acquireWithin(t, ms[i%len(ms)], url, 2*time.Second))
		}
		refused(t, ms[2], url, throttle.ReasonConcurrency)
		for _, p := range ps {
			p.Release(nil, nil)
		}
	}
}

// TestKeysStayInsidePrefix: scope keys of any bytes and length map to one
// hash under the prefix, and every key expires.
func TestKeysStayInsidePrefix(t *testing.T) {
	srv := redistest.Start(t)
	const prefix = "pfx:"
	store, rdb := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix})
	m := fleetManager(t, store, 1, 0, func(c *throttle.Config) { c.GlobalConcurrency = 100 })
	scopes := []string{"new\nline", "{x}", "a{b}c", "}{", "nul\x00byte", "\x00", strings.Repeat("k", 10<<10),
		"*", "?", "[a-z]", "with space", " ", "|", ":l", "pfx:", "ünïcödé", "\xff\xfe"}
	var ps []*throttle.Permit
	for _, sc := range scopes {
		ctx, cancel := context.WithTimeout(throttle.WithScopeKeys(context.Background(), sc), 5*time.Second)
		p, err := m.Acquire(ctx, getReq(t, "http://ignored.test/"))
		cancel()
		require.NoError(t, err, "scope %q", sc)
		require.Equal(t, []string{sc}, p.Scopes())
		ps = append(ps, p)
	}
	ctx := context.Background()
	want := map[string]string{}
	for _, sc := range scopes {
		want[store.Key(sc)] = "hash"
	}
	check := func(phase string, n int, kinds ...string) {
		t.Helper()
		var keys []string
		iter := rdb.Scan(ctx, 0, "*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		require.NoError(t, iter.Err())
		require.Len(t, keys, n, "%s: keys %q", phase, keys)
		for _, k := range keys {
			require.True(t, strings.HasPrefix(k, prefix), "%s: key %q outside the prefix", phase, k)
			typ, ok := want[k]
			require.True(t, ok, "%s: key %q is no scope's", phase, k)
			require.Equal(t, typ, rdb.Type(ctx, k).Val(), "%s: type of %q", phase, k)
			require.Contains(t, kinds, typ, "%s: key %q", phase, k)
			require.Greater(t, rdb.PTTL(ctx, k).Val(), time.Duration(0), "%s: TTL of %q", phase, k)
		}
	}
	check("held", len(scopes), "hash")
	for _, p := range ps {
		p.Release(nil, nil)
	}
	check("released", len(scopes), "hash")
	t.Logf("%d scope keys (newlines, braces, NUL, 10 KiB, glob characters, invalid UTF-8): one hash each, held and released, all under %q with a TTL",
		len(scopes), prefix)
}

// TestScriptsRejectMalformedArguments calls the scripts with EVAL and
// arguments no Store sends: each answers an error starting "throttle:"
// and changes nothing.
func TestScriptsRejectMalformedArguments(t *testing.T) {
	srv := redistest.Start(t)
	store, rdb := dialStore(t, srv.Addr(), redisstore.Options{Prefix: "bad:"})
	m := fleetManager(t, store, 2, time.Second, nil)
	held := acquireWithin(t, m, "http://state.test/", 5*time.Second) // a hash and a lease to leave alone
	defer held.Release(nil, nil)
	h := store.Key("state.test")
	ctx := context.Background()
	snapshot := func() string {
		return fmt.Sprint(rdb.DBSize(ctx).Val(), rdb.HGetAll(ctx, h).Val(), rdb.PTTL(ctx, h).Val() > 0)
	}
	before := snapshot()
	dbsize := rdb.DBSize(ctx).Val()

	src := map[string]string{}
	for _, name := range []string{"admit", "release", "renew"} {
		b, err := os.ReadFile("scripts/" + name + ".lua")
		require.NoError(t, err)
		src[name] = string(b)
	}
	// Valid calls, each changed by one argument below. Keys of a scope
	// not held, so a script that did not refuse would create them.
	k := []string{"bad:{new}"}
	admit := []string{"", "lease1", "1000", "60000", "1", "0", "bad:released", "1", "0", "1000000",
		"new", "1", "1", "0", "1", "0", "0", "0", "0", "300000000", "0"}
	release := []string{"", "lease1", "60000", "bad:released", "1", "new", "-1", "0", "0", "0", "-1", "0", "1", "0", "{}", "0", "1"}
	renew := []string{"", "1000", "L:lease1|-1"}
	with := func(args []string, i int, v string) []string {
		a := slices.Clone(args)
		a[i] = v
		return a
	}
	type call struct {
		name, script string
		keys, args   []string
	}
	var calls []call
	add := func(name, script string, keys, args []string) { calls = append(calls, call{name, script, keys, args}) }
	for _, v := range []string{"x", "", "nan", "-1", "1e400", "0", "1.5", "2"} {
		add("admit n="+v, "admit", k, with(admit, 4, v))
		add("release n="+v, "release", k, with(release, 4, v))
	}
	add("admit 2 keys", "admit", append(slices.Clone(k), "bad:x"), admit)
	add("admit no keys", "admit", nil, admit)
	add("admit an argument short", "admit", k, admit[:len(admit)-1])
	add("admit an argument more", "admit", k, append(slices.Clone(admit), "0"))
	add("admit empty lease", "admit", k, with(admit, 1, ""))
	add("admit lease with |", "admit", k, with(admit, 1, "a|b"))
	add("admit 300-byte lease", "admit", k, with(admit, 1, strings.Repeat("l", 300)))
	for i, name := range map[int]string{0: "now", 2: "lease ttl", 3: "idle ttl"} {
		for _, v := range []string{"x", "nan", "-1", "1e400", "inf", "-inf"} {
			add("admit "+name+"="+v, "admit", k, with(admit, i, v))
		}
	}
	add("admit lease ttl=0", "admit", k, with(admit, 2, "0"))
	add("admit idle ttl=0", "admit", k, with(admit, 3, "0"))
	for _, v := range []string{"x", "", "nan", "-1", "1e400", "inf"} {
		add("admit deadline="+v, "admit", k, with(admit, 5, v))
	}
	// A deadline in the past: the caller stopped waiting (Redis was
	// paused, say); the admission must take nothing.
	add("admit past its deadline", "admit", k, with(admit, 5, "1"))
	for _, v := range []string{"x", "", "2", "-1"} {
		add("admit waits="+v, "admit", k, with(admit, 7, v))
	}
	for i, name := range map[int]string{8: "since", 9: "grace"} {
		for _, v := range []string{"x", "", "nan", "-1", "1e400", "inf"} {
			add("admit "+name+"="+v, "admit", k, with(admit, i, v))
		}
	}
	for i, name := range []string{"cost", "concurrency", "delay", "jitter", "slot delay", "quota", "window", "version", "bound", "max concurrency"} {
		for _, v := range []string{"x", "", "nan", "-nan", "-1", "1e400", "-inf", "0x"} {
			add("admit "+name+"="+v, "admit", k, with(admit, 11+i, v))
		}
	}
	add("admit concurrency=0", "admit", k, with(admit, 12, "0"))
	add("admit quota without window", "admit", k, with(admit, 16, "5"))
	add("admit bound=0", "admit", k, with(admit, 19, "0"))

	add("release 2 keys", "release", append(slices.Clone(k), "bad:x"), release)
	add("release an argument short", "release", k, release[:len(release)-1])
	add("release an argument more", "release", k, append(slices.Clone(release), "0"))
	add("release lease with |", "release", k, with(release, 1, "a|b"))
	add("release 300-byte lease", "release", k, with(release, 1, strings.Repeat("l", 300)))
	for _, v := range []string{"x", "nan", "-1", "1e400", "inf", "-inf"} {
		add("release now="+v, "release", k, with(release, 0, v))
		add("release idle ttl="+v, "release", k, with(release, 2, v))
	}
	add("release idle ttl=0", "release", k, with(release, 2, "0"))
	for i, name := range []string{"slot", "quota window", "gate", "quota delta", "quota floor", "window", "", "version", "", "delay", "concurrency"} {
		if name == "" {
			continue
		}
		for _, v := range []string{"x", "", "nan", "1e400", "-1e400"} {
			add("release "+name+"="+v, "release", k, with(release, 6+i, v))
		}
	}
	for i, name := range []string{"gate", "quota delta", "quota floor", "window", "", "version", "", "delay"} {
		if name == "" || name == "quota delta" || name == "quota floor" {
			continue
		}
		add("release "+name+"=-1", "release", k, with(release, 8+i, "-1"))
	}
	add("release learned concurrency=0", "release", k, with(release, 16, "0"))
	add("release version past 2^53-1", "release", k, with(release, 13, "9007199254740992"))
	for _, v := range []string{"-2", "1.5", "1e12"} {
		add("release slot="+v, "release", k, with(release, 6, v))
	}
	// A bad second scope: nothing of the first is written either.
	add("release a bad second scope", "release", append(slices.Clone(k), "bad:{new2}"),
		append(with(with(release, 4, "2"), 12, "1"), with(release, 6, "x")[5:]...))

	add("renew a member short", "renew", k, renew[:2])
	add("renew a member more", "renew", k, append(slices.Clone(renew), "x|0"))
	for _, v := range []string{"x", "", "nan", "0", "-1", "1e400", "inf"} {
		add("renew ttl="+v, "renew", k, with(renew, 1, v))
	}
	for _, v := range []string{"x", "nan", "-1", "1e400", "inf", "-inf"} {
		add("renew now="+v, "renew", k, with(renew, 0, v))
	}

	// The valid calls pass, so each case fails for its own argument.
	for _, c := range []call{{"admit", "admit", k, admit}, {"release", "release", k, release}, {"renew", "renew", k, renew}} {
		require.NoError(t, rdb.Eval(ctx, src[c.script], c.keys, toAny(c.args)...).Err(), "the valid %s call", c.name)
	}
	require.NoError(t, rdb.Del(ctx, k...).Err())
	require.Equal(t, before, snapshot())

	for _, c := range calls {
		err := rdb.Eval(ctx, src[c.script], c.keys, toAny(c.args)...).Err()
		var rerr redis.Error
		if !errors.As(err, &rerr) || !strings.HasPrefix(err.Error(), "throttle: "+c.script+": ") {
			t.Errorf("%s: got %v, want an error reply starting \"throttle: %s: \"", c.name, err, c.script)
		}
		if got := rdb.DBSize(ctx).Val(); got != dbsize {
			t.Fatalf("%s: DBSIZE %d, was %d", c.name, got, dbsize)
		}
		if got := snapshot(); got != before {
			t.Fatalf("%s changed the data:\n%s\nwas\n%s", c.name, got, before)
		}
	}
	t.Logf("%d malformed calls (admit, release, renew) refused with a \"throttle:\" error reply; DBSIZE stayed %d", len(calls), dbsize)
}

func toAny(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}

// deadLeases checks, just after a worker holding n leases on scope was
// killed, that they expire within leaseTTL of now in Redis's time (the
// bound a dead worker's slots have), and returns the earliest expiry.
func deadLeases(t *testing.T, rdb redis.Cmdable, store *redisstore.Store, scope string, n int, leaseTTL time.Duration) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	dead := leaseExpiries(t, rdb, store, scope)
	require.Len(t, dead, n, "the dead worker's leases")
	for _, exp := range dead {
		require.False(t, exp.After(now.Add(leaseTTL)), "a dead worker's lease expires at %v, %v after the kill (LeaseTTL %v)", exp, exp.Sub(now), leaseTTL)
	}
	return dead[0]
}

// leaseExpiries returns the expiries of the leases held in scope's hash
// (its "L:" fields), earliest first.
func leaseExpiries(t *testing.T, rdb redis.Cmdable, store *redisstore.Store, scope string) []time.Time {
	t.Helper()
	fields, err := rdb.HGetAll(context.Background(), store.Key(scope)).Result()
	require.NoError(t, err)
	var out []time.Time
	for k, v := range fields {
		if strings.HasPrefix(k, "L:") {
			us, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			out = append(out, time.UnixMicro(us))
		}
	}
	slices.SortFunc(out, time.Time.Compare)
	return out
}
