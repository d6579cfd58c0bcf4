package throttle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/require"
)

// faultyStore is a store.Memory that fails on demand, as a store whose
// server went away.
type faultyStore struct {
	*store.Memory
	fail     atomic.Bool
	admits   atomic.Int64
	releases atomic.Int64
}

var errGone = errors.New("connection refused")

func (f *faultyStore) Admit(ctx context.Context, req *store.Request) (store.Answer, error) {
	f.admits.Add(1)
	if f.fail.Load() {
		return store.Answer{}, errGone
	}
	return f.Memory.Admit(ctx, req)
}

func (f *faultyStore) Release(ctx context.Context, rel *store.Release) (store.ReleaseAnswer, error) {
	f.releases.Add(1)
	if f.fail.Load() {
		return store.ReleaseAnswer{}, errGone
	}
	return f.Memory.Release(ctx, rel)
}

func storeManager(t *testing.T, clock Clock, st store.Store, fallback bool, log *bytes.Buffer) *ThrottlingManager {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = time.Second, 0, Jitter{}
	cfg.Clock, cfg.Store, cfg.StoreFallbackLocal = clock, st, fallback
	if log != nil {
		cfg.Logger = slog.New(slog.NewTextHandler(log, nil))
	}
	return newManager(t, cfg)
}

func TestStoreFailClosed(t *testing.T) { synctest.Test(t, testStoreFailClosed) }

func testStoreFailClosed(t *testing.T) {
	var clock Clock
	fs := &faultyStore{Memory: store.NewMemory(clock)}
	m := storeManager(t, clock, fs, false, nil)
	fs.fail.Store(true)
	_, err := m.Acquire(context.Background(), get(t, "http://a.test/"))
	var se *store.Error
	require.ErrorAs(t, err, &se)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorIs(t, err, errGone)
	require.Equal(t, "admit", se.Op)
	p, _, err := m.TryAcquire(get(t, "http://a.test/"))
	require.Nil(t, p)
	require.ErrorIs(t, err, store.ErrUnavailable)

	fs.fail.Store(false) // back: no waiting for a retry time
	p, err = m.Acquire(context.Background(), get(t, "http://a.test/"))
	require.NoError(t, err)
	p.Release(ok200, nil)
}

func TestStoreFallbackLocal(t *testing.T) { synctest.Test(t, testStoreFallbackLocal) }

func testStoreFallbackLocal(t *testing.T) {
	var clock Clock
	fs := &faultyStore{Memory: store.NewMemory(clock)}
	var log bytes.Buffer
	m := storeManager(t, clock, fs, true, &log)
	fs.fail.Store(true)
	for range 3 {
		p, err := m.Acquire(context.Background(), get(t, "http://b.test/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		time.Sleep(time.Second) // fake time (synctest); the local delay holds meanwhile
	}
	// 3 s passed: the store was asked again after each StoreRetry (1 s).
	require.Equal(t, int64(3), fs.admits.Load())
	require.Equal(t, 1, strings.Count(log.String(), "store unavailable"), log.String())

	fs.fail.Store(false)
	p, err := m.Acquire(context.Background(), get(t, "http://b.test/"))
	require.NoError(t, err)
	require.True(t, p.ext != nil && p.ext.shared, "the store answers again: back to shared state")
	p.Release(ok200, nil)
	require.Contains(t, log.String(), "store answers again")
	require.Equal(t, int64(4), fs.admits.Load())
}

func TestStoreNeedsDefaultPolicy(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Store = store.NewMemory(nil)
	cfg.NewScopeManager = NewDefaultScopeManager
	_, err := New(cfg)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "Store", ce.Field)
}

// TestSharedFleetHoldsLimits: 4 managers on one store.Memory, 200 callers,
// Concurrency 2 and Delay 100 ms on one host: never more than 2 in flight,
// starts at least 100 ms apart, checked on the starts the store recorded.
func TestSharedFleetHoldsLimits(t *testing.T) { synctest.Test(t, testSharedFleetHoldsLimits) }

func testSharedFleetHoldsLimits(t *testing.T) {
	var clock Clock
	st := store.NewMemory(clock)
	cfg := DefaultConfig()
	cfg.Default.Concurrency, cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 2, 100*time.Millisecond, 0, Jitter{}
	cfg.Clock, cfg.Store = clock, st
	var ms []*ThrottlingManager
	for range 4 {
		ms = append(ms, newManager(t, cfg))
	}
	const n = 200
	var inFlight, peak atomic.Int64
	starts := make(chan time.Time, n)
	done := make(chan struct{})
	for i := range n {
		go func() {
			p, err := ms[i%4].Acquire(context.Background(), get(t, "http://fleet.test/"))
			if err != nil {
				t.Error(err)
				done <- struct{}{}
				return
			}
			if v := inFlight.Add(1); v > peak.Load() {
				peak.Store(v)
			}
			starts <- p.Acquired()
			inFlight.Add(-1)
			p.Release(&http.Response{StatusCode: 200}, nil)
			done <- struct{}{}
		}()
	}
	for range n {
		<-done // fake time moves while every goroutine waits
	}
	close(starts)
	var prev time.Time
	var all []time.Time
	for s := range starts {
		all = append(all, s)
	}
	slices.SortFunc(all, time.Time.Compare)
	for i, s := range all {
		if i > 0 && s.Sub(prev) < 100*time.Millisecond {
			t.Fatalf("starts %v and %v are %v apart", prev, s, s.Sub(prev))
		}
		prev = s
	}
	require.LessOrEqual(t, peak.Load(), int64(2))
	require.Len(t, all, n)
}

// fallbackWakeStore is a store.Memory that names a fallback time for a
// concurrency refusal, as redisstore does (the earliest lease expiry).
type fallbackWakeStore struct{ *store.Memory }

func (f fallbackWakeStore) Admit(ctx context.Context, req *store.Request) (store.Answer, error) {
	ans, err := f.Memory.Admit(ctx, req)
	if err == nil && !ans.Admitted && ans.Reason == store.ReasonConcurrency && ans.At.IsZero() {
		ans.At = ans.Now.Add(30 * time.Second)
	}
	return ans, err
}

// TestSharedDeadlineBeforeFallbackWake: a caller whose deadline falls
// before a concurrency refusal's fallback time waits for a release rather
// than giving up at once: the fallback is no earliest start.
func TestSharedDeadlineBeforeFallbackWake(t *testing.T) {
	synctest.Test(t, testSharedDeadlineBeforeFallbackWake)
}

func testSharedDeadlineBeforeFallbackWake(t *testing.T) {
	var clock Clock
	st := fallbackWakeStore{store.NewMemory(clock)}
	m1 := storeManager(t, clock, st, false, nil)
	m2 := storeManager(t, clock, st, false, nil)
	p1, err := m1.Acquire(context.Background(), get(t, "http://busy.test/"))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		p2, err := m2.Acquire(ctx, get(t, "http://busy.test/"))
		if err == nil {
			p2.Release(ok200, nil)
		}
		got <- err
	}()
	synctest.Wait() // m2 refused, and waiting
	require.Equal(t, 1, m2.Waiting(), "gave up at once")
	p1.Release(ok200, nil) // m2 is woken, then waits out the 1 s delay
	require.NoError(t, <-got)
}

// learnedStore records which releases carried learned state.
type learnedStore struct {
	*store.Memory
	sent []bool
}

func (l *learnedStore) Release(ctx context.Context, rel *store.Release) (store.ReleaseAnswer, error) {
	for _, rs := range rel.Scopes {
		l.sent = append(l.sent, rs.Learned)
	}
	return l.Memory.Release(ctx, rel)
}

// TestSharedReleaseSendsOnlyWhatIsNew: a release whose request taught
// nothing new sends no learned state; one that changed it (a 429) does.
func TestSharedReleaseSendsOnlyWhatIsNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ls := &learnedStore{Memory: store.NewMemory(nil)}
		cfg := DefaultConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter, cfg.Default.Backoff.Jitter = 0, 0, Jitter{}, Jitter{}
		cfg.Default.AutoThrottle.Enabled, cfg.Default.Rampup.Enabled = false, false
		cfg.Store, cfg.Robots.Enabled = ls, false
		m := newManager(t, cfg)
		r := get(t, "http://learn.example/")
		do := func(status int) {
			p, err := m.Acquire(t.Context(), r)
			require.NoError(t, err)
			time.Sleep(100 * time.Millisecond)
			p.Release(&http.Response{StatusCode: status, Header: http.Header{}}, nil)
		}
		for range 5 {
			do(200)
		}
		require.Equal(t, []bool{true, false, false, false, false}, ls.sent, "the first release records the state, the others change nothing")
		ls.sent = nil
		do(429)
		require.Equal(t, []bool{true}, ls.sent, "a 429 raised the backoff: sent")
	})
}

// TestStoreWaiterAtGlobalCapGivesUpItsTurn: a waiter whose own manager
// is at its GlobalConcurrency when the scope's slot frees cannot use it:
// it gives its turn in the store back while it waits for the cap, so
// another worker's request is not held behind it (in a store.Memory, the
// turn of a waiter for a release has no end of its own).
func TestStoreWaiterAtGlobalCapGivesUpItsTurn(t *testing.T) {
	synctest.Test(t, testStoreWaiterAtGlobalCapGivesUpItsTurn)
}

func testStoreWaiterAtGlobalCapGivesUpItsTurn(t *testing.T) {
	mem := store.NewMemory(nil)
	worker := func(global int) *ThrottlingManager {
		cfg := DefaultConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, Jitter{}
		cfg.GlobalConcurrency, cfg.Store = global, mem
		return newManager(t, cfg)
	}
	w1, w2 := worker(1), worker(16)
	held, err := w2.Acquire(context.Background(), get(t, "http://x.test/"))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		p, err := w1.Acquire(context.Background(), get(t, "http://x.test/"))
		if err == nil {
			p.Release(ok200, nil)
		}
		done <- err
	}()
	synctest.Wait() // w1's caller waits for x.test, with its turn
	other, _, err := w1.TryAcquire(get(t, "http://other.test/"))
	require.NoError(t, err)
	require.NotNil(t, other, "w1 takes its one global slot")
	defer func() { // also when the test fails: no goroutine left blocked
		other.Release(ok200, nil)
		require.NoError(t, <-done, "the waiter starts once its manager has a global slot")
	}()
	held.Release(ok200, nil)
	synctest.Wait() // the waiter woke, and waits for w1's global slot
	p, adm, err := w2.TryAcquire(get(t, "http://x.test/"))
	require.NoError(t, err)
	require.NotNil(t, p, "refused (%v): held behind a waiter that cannot start", adm.Reason)
	p.Release(ok200, nil)
}

// TestStoreFallbackNoTurnGivenBack: a waiter whose store fails, with
// StoreFallbackLocal, goes to local state at once: it does not first ask
// the failing store to take its turn back (a second call that would fail
// too, after the store's own timeout).
func TestStoreFallbackNoTurnGivenBack(t *testing.T) {
	synctest.Test(t, testStoreFallbackNoTurnGivenBack)
}

func testStoreFallbackNoTurnGivenBack(t *testing.T) {
	var clock Clock
	fs := &faultyStore{Memory: store.NewMemory(clock)}
	m := storeManager(t, clock, fs, true, nil)
	p, err := m.Acquire(context.Background(), get(t, "http://a.test/"))
	require.NoError(t, err)
	p.Release(ok200, nil)
	done := make(chan error, 1)
	go func() {
		p, err := m.Acquire(context.Background(), get(t, "http://a.test/")) // refused: the delay, 1 s
		if err == nil {
			p.Release(ok200, nil)
		}
		done <- err
	}()
	synctest.Wait()
	fs.fail.Store(true)
	releases := fs.releases.Load()
	require.NoError(t, <-done, "admitted from local state")
	require.Equal(t, releases, fs.releases.Load(), "store calls to release: no turn given back to the failing store (the local permit's release is local)")
}

// TestStoreFallbackAfterWait: a caller waits on the store's delay (the
// store named a start 5 s on), and the store fails when it asks again.
// With StoreFallbackLocal it is admitted locally at the time the store
// failed, and that is the start it reports and the local delay counts
// from: the next local start comes a Delay after it, not a Delay after
// the moment the caller began to wait.
func TestStoreFallbackAfterWait(t *testing.T) { synctest.Test(t, testStoreFallbackAfterWait) }

func testStoreFallbackAfterWait(t *testing.T) {
	var clock Clock
	fs := &faultyStore{Memory: store.NewMemory(clock)}
	m := storeManager(t, clock, fs, true, nil) // Delay 1 s
	other := storeManager(t, clock, fs, true, nil)
	// Another worker starts: the store's next start is 1 s on.
	p0, err := other.Acquire(context.Background(), get(t, "http://w.test/"))
	require.NoError(t, err)
	p0.Release(ok200, nil)
	t0 := time.Now()
	got := make(chan *Permit, 1)
	go func() {
		p, err := m.Acquire(context.Background(), get(t, "http://w.test/"))
		require.NoError(t, err)
		got <- p
	}()
	synctest.Wait() // refused by the store, waiting for its time
	require.Equal(t, 1, m.Waiting())
	fs.fail.Store(true) // the store goes away while it waits
	p := <-got
	require.Equal(t, time.Second, p.Acquired().Sub(t0), "the local start is when the store failed")
	p.Release(ok200, nil)
	began := time.Now()
	p2, err := m.Acquire(context.Background(), get(t, "http://w.test/"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, p2.Acquired().Sub(p.Acquired()), time.Second, "local starts a Delay apart")
	require.Equal(t, time.Second, time.Since(began), "the local delay counts from the local start")
	p2.Release(ok200, nil)
}
