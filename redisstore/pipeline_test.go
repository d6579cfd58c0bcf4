package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
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

// pipeHook counts the scripts sent and the longest pipeline.
type pipeHook struct {
	scripts, pipelines, longest atomic.Int64
}

func (h *pipeHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *pipeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if strings.HasPrefix(cmd.Name(), "eval") {
			h.scripts.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *pipeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		for _, c := range cmds {
			if strings.HasPrefix(c.Name(), "eval") {
				h.scripts.Add(1)
			}
		}
		for {
			l := h.longest.Load()
			if int64(len(cmds)) <= l || h.longest.CompareAndSwap(l, int64(len(cmds))) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestConcurrentCallsShareRoundTrips: 50 goroutines, each on its own
// host, send their scripts in shared pipelines, and still exactly one
// script per admission and one per release.
func TestConcurrentCallsShareRoundTrips(t *testing.T) {
	srv := redistest.Start(t)
	s, client := newStore(t, srv, redisstore.Options{})
	m := sharedManager(t, s, nil, nil)
	// Warm up (the first Acquire subscribes to the release channel).
	p, err := m.Acquire(context.Background(), req(t, "warm.test"))
	require.NoError(t, err)
	p.Release(&http.Response{StatusCode: 200}, nil)
	hook := &pipeHook{}
	client.AddHook(hook)

	const goroutines, each = 50, 20
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := req(t, fmt.Sprintf("host%d.test", g))
			for range each {
				p, err := m.Acquire(context.Background(), r)
				if err != nil {
					t.Error(err)
					return
				}
				p.Release(&http.Response{StatusCode: 200}, nil)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(2*goroutines*each), hook.scripts.Load(), "scripts sent for %d admissions and releases", goroutines*each)
	require.Greater(t, hook.longest.Load(), int64(1), "no pipeline carried more than one call")
	t.Logf("%d scripts in %d pipelines (longest %d)", hook.scripts.Load(), hook.pipelines.Load(), hook.longest.Load())
}

// TestAbandonedAdmissionGivenBack: an admission Redis runs after its
// caller stopped waiting (here Redis was paused, and with Options.Clock no
// deadline travels with it) has its lease given back at once, not after
// LeaseTTL.
func TestAbandonedAdmissionGivenBack(t *testing.T) {
	srv := redistest.Start(t)
	clock := throttletest.NewClock(time.Now())
	s, client := newStore(t, srv, redisstore.Options{Clock: clock, Timeout: 5 * time.Second, LeaseTTL: time.Minute})
	key := s.Key("gone.test")
	admit := &store.Request{Lease: "abandoned", Scopes: []store.Scope{{Key: "gone.test", Concurrency: 1, Cost: 1, Quota: 10, Window: time.Hour}}}

	require.NoError(t, srv.Pause())
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := s.Admit(ctx, admit)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, srv.Resume())

	// Redis runs the admission now, then the give-back. Real time: the
	// server is real; the wait ends as soon as the lease is gone, and
	// 20 s (a hang detector, a third of LeaseTTL) tells "at once" from
	// "at the lease's expiry" on a loaded machine too.
	deadline := time.Now().Add(20 * time.Second)
	for {
		fields, err := client.HGetAll(context.Background(), key).Result()
		require.NoError(t, err)
		leases := 0
		for f := range fields {
			if strings.HasPrefix(f, "L:") {
				leases++
			}
		}
		if len(fields) > 0 && leases == 0 {
			require.Equal(t, "0", fields["qu"], "the quota cost was not given back")
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease still held 20s after Redis came back (LeaseTTL 1m): %v", fields)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The slot is free: another admission gets it.
	ans, err := s.Admit(context.Background(), &store.Request{Lease: "next", Scopes: []store.Scope{{Key: "gone.test", Concurrency: 1, Cost: 1, Quota: 10, Window: time.Hour}}})
	require.NoError(t, err)
	require.True(t, ans.Admitted, "slot still taken: %+v", ans)
	// No renewal of the abandoned lease either: only "next" is held.
	require.Equal(t, 1, s.Renew(context.Background()))
}

// TestCloseWhileCalling: Close while callers are admitting and releasing
// returns, every caller gets an answer, and calls after Close still work
// (sent by the caller itself).
func TestCloseWhileCalling(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{})
	m := sharedManager(t, s, nil, nil)
	var wg sync.WaitGroup
	var calls atomic.Int64
	stop := make(chan struct{})
	for g := range 20 {
		wg.Go(func() {
			r := req(t, fmt.Sprintf("close%d.test", g))
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := m.Acquire(context.Background(), r)
				if err != nil {
					t.Error(err)
					return
				}
				p.Release(&http.Response{StatusCode: 200}, nil)
				calls.Add(1)
			}
		})
	}
	for calls.Load() < 200 {
		time.Sleep(time.Millisecond)
	}
	require.NoError(t, s.Close())
	before := calls.Load()
	for calls.Load() < before+200 {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
}

// TestRenewOneRoundTrip: a process's leases are renewed in one pipeline.
func TestRenewOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	clock := throttletest.NewClock(time.Now())
	s, client := newStore(t, srv, redisstore.Options{Clock: clock})
	m := sharedManager(t, s, clock, nil)
	var held []*throttle.Permit
	for i := range 10 {
		p, _, err := m.TryAcquire(req(t, fmt.Sprintf("renew%d.test", i)))
		require.NoError(t, err)
		require.NotNil(t, p)
		held = append(held, p)
	}
	hook := &pipeHook{}
	client.AddHook(hook)
	require.Equal(t, 10, s.Renew(context.Background()))
	require.Equal(t, int64(1), hook.pipelines.Load())
	require.Equal(t, int64(10), hook.scripts.Load())
	for _, p := range held {
		p.Release(&http.Response{StatusCode: 200}, nil)
	}
}

// TestDeadlinePassedInRedisTime: Redis refuses an admission whose
// caller's deadline has passed by its clock, which the store estimates to
// within half a round trip; when Redis sees it pass before the caller's
// own clock does, Acquire returns a *WaitError wrapping
// context.DeadlineExceeded (the caller gave up), not a *store.Error, and
// with StoreFallbackLocal the store is not taken for down.
func TestDeadlinePassedInRedisTime(t *testing.T) {
	srv := redistest.Start(t)
	for _, fallback := range []bool{false, true} {
		s, _ := newStore(t, srv, redisstore.Options{})
		var logs strings.Builder
		m := sharedManager(t, s, nil, func(c *throttle.Config) {
			c.StoreFallbackLocal = fallback
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		r := req(t, "skew.test")
		p, err := m.Acquire(context.Background(), r)
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 200}, nil)

		// The estimate puts Redis 10 s behind: a deadline 500 ms away
		// (before Options.Timeout's 1 s) reaches Redis already past.
		redisstore.SetClockOffset(s, -10*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		_, err = m.Acquire(ctx, r)
		cancel()
		var we *throttle.WaitError
		require.ErrorAs(t, err, &we, "fallback %v: %v", fallback, err)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.NotErrorIs(t, err, store.ErrUnavailable)

		// Without a deadline of the caller's, the store goes on.
		p, err = m.Acquire(context.Background(), r)
		require.NoError(t, err, "fallback %v", fallback)
		p.Release(&http.Response{StatusCode: 200}, nil)
		require.NotContains(t, logs.String(), "store unavailable", "fallback %v: a caller's deadline taken for a store failure", fallback)
	}
}

// TestClockEstimateHeals: a store whose estimate of Redis's clock is off
// (the local clock stepped) has its first admission refused as past its
// deadline; the next one goes without a deadline and estimates again,
// so the store does not refuse everything until restarted.
func TestClockEstimateHeals(t *testing.T) {
	srv := redistest.Start(t)
	s, _ := newStore(t, srv, redisstore.Options{})
	one := &store.Request{Scopes: []store.Scope{{Key: "heal.test", Concurrency: 100, Cost: 1}}}
	admit := func() error {
		one.Lease = fmt.Sprint(time.Now().UnixNano())
		_, err := s.Admit(context.Background(), one)
		return err
	}
	require.NoError(t, admit())
	redisstore.SetClockOffset(s, -time.Minute)
	require.ErrorContains(t, admit(), "too late")
	for range 3 {
		require.NoError(t, admit())
	}
}
