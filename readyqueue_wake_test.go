package throttle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingClock is the real clock (fake time in a synctest bubble) that
// counts the timers made.
type countingClock struct {
	Clock
	timers atomic.Int32
}

func (c *countingClock) NewTimer(d time.Duration) Timer {
	c.timers.Add(1)
	return c.Clock.NewTimer(d)
}

// TestReadyQueueReleaseWakesPop: a request waiting for a slot is popped
// the moment a permit of its scope is released, with no timer: also when
// the slot is in a scope it shares with another host, and when the global
// cap is what held it.
func TestReadyQueueReleaseWakesPop(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config func(*Config)
		first  string // popped first; the second waits for its release
		second string
		scopes []string // WithScopes for both, plus the host
	}{
		{name: "concurrency", config: func(c *Config) {}, first: "http://a/1", second: "http://a/2"},
		{name: "shared scope", config: func(c *Config) {}, first: "http://a/", second: "http://b/", scopes: []string{"api"}},
		{name: "global cap", config: func(c *Config) { c.GlobalConcurrency = 1 }, first: "http://a/", second: "http://b/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := plainConfig()
				cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
				tc.config(&cfg)
				clock := &countingClock{Clock: newRealClock()}
				cfg.Clock = clock
				m := newManager(t, cfg)
				q := NewReadyQueue(m)
				for _, u := range []string{tc.first, tc.second} {
					req := get(t, u)
					if tc.scopes != nil {
						req = req.WithContext(WithScopeKeys(context.Background(), append([]string{req.URL.Host}, tc.scopes...)...))
					}
					require.NoError(t, q.Push(req, 0))
				}
				t0 := time.Now()
				req, p1, err := q.Pop(context.Background())
				require.NoError(t, err)
				assert.Equal(t, tc.first, req.URL.String())

				done := make(chan popped)
				go func() {
					req, p, err := q.Pop(context.Background())
					assert.NoError(t, err)
					p.Release(ok200, nil)
					done <- popped{req.URL.String(), time.Since(t0)}
				}()
				synctest.Wait()
				select {
				case <-done:
					t.Fatal("second request popped while the first holds its slot")
				default:
				}
				time.Sleep(5 * time.Second)
				p1.Release(ok200, nil)
				assert.Equal(t, popped{tc.second, 5 * time.Second}, <-done)
				assert.Zero(t, clock.timers.Load(), "timers made")
			})
		})
	}
}

// TestReadyQueuePushWakesPop: a Pop on an empty queue returns when a
// request is pushed; one waiting for a delay returns at its end.
func TestReadyQueuePushWakesPop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 3*time.Second, 0
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		t0 := time.Now()
		done := make(chan popped)
		go func() {
			for range 2 {
				req, p, err := q.Pop(context.Background())
				assert.NoError(t, err)
				p.Release(ok200, nil)
				done <- popped{req.URL.String(), time.Since(t0)}
			}
		}()
		time.Sleep(time.Second)
		require.NoError(t, q.Push(get(t, "http://a/1"), 0))
		require.NoError(t, q.Push(get(t, "http://a/2"), 0))
		assert.Equal(t, popped{"http://a/1", time.Second}, <-done)
		assert.Equal(t, popped{"http://a/2", 4 * time.Second}, <-done)
	})
}

// TestReadyQueueLeaderHandsOver: of several waiting callers only the
// first holds a timer; when it leaves (cancelled, or with a request) the
// next takes over, so no ready request is left waiting.
func TestReadyQueueLeaderHandsOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 4*time.Second, 0
		clock := &countingClock{Clock: newRealClock()}
		cfg.Clock = clock
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		for i := range 3 {
			require.NoError(t, q.Push(get(t, fmt.Sprintf("http://a/%d", i)), 0))
		}
		_, p, err := q.Pop(context.Background())
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()

		firstCtx, cancelFirst := context.WithCancel(context.Background())
		defer cancelFirst()
		type result struct {
			i   int
			got popped
			err error
		}
		results := make(chan result, 4)
		for i := range 4 {
			ctx := context.Background()
			if i == 0 {
				ctx = firstCtx
			}
			go func() {
				req, p, err := q.Pop(ctx)
				r := result{i: i, err: err}
				if err == nil {
					r.got = popped{req.URL.String(), time.Since(t0)}
					p.Release(ok200, nil)
				}
				results <- r
			}()
			synctest.Wait() // they line up in this order
		}
		assert.Equal(t, int32(1), clock.timers.Load(), "timers while 4 callers wait")
		time.Sleep(time.Second)
		cancelFirst()
		r := <-results
		assert.Equal(t, 0, r.i)
		assert.ErrorIs(t, r.err, context.Canceled)

		got := map[int]popped{}
		for range 2 {
			r := <-results
			require.NoError(t, r.err)
			got[r.i] = r.got
		}
		assert.Equal(t, map[int]popped{1: {"http://a/1", 4 * time.Second}, 2: {"http://a/2", 8 * time.Second}}, got)
		synctest.Wait()
		select {
		case r := <-results:
			t.Fatalf("caller %d returned from an empty queue", r.i)
		default:
		}
		require.NoError(t, q.Push(get(t, "http://b/"), 0))
		r = <-results
		assert.Equal(t, result{i: 3, got: popped{"http://b/", 8 * time.Second}}, r)
	})
}

// TestReadyQueueBehindAcquire: a host with a blocking Acquire caller
// ahead is parked; when that caller gives up, which releases nothing, the
// queue asks again within queueRecheck.
func TestReadyQueueBehindAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 10*time.Second, 0
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		p, err := m.Acquire(context.Background(), get(t, "http://a/first"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			_, err := m.Acquire(ctx, get(t, "http://a/blocking")) // waits for a's delay
			assert.ErrorIs(t, err, context.Canceled)
		}()
		synctest.Wait()
		require.NoError(t, q.Push(get(t, "http://a/queued"), 0))
		req, _, at, err := q.TryPop()
		require.NoError(t, err)
		assert.Nil(t, req)
		assert.Equal(t, queueRecheck, at.Sub(t0), "parked behind the Acquire caller until")
		time.AfterFunc(3*time.Second, cancel)
		got := popAll(t, q, 1, t0)
		assert.Equal(t, []popped{{"http://a/queued", 10 * time.Second}}, got)
	})
}

// TestReadyQueueNoLostWakeup: workers that pop and release as fast as
// they can on one one-slot host, in real time. A release that came
// while a pop was parking the host it frees, and was missed, would leave
// every worker waiting for good.
func TestReadyQueueNoLostWakeup(t *testing.T) {
	const n, workers = 100000, 2
	cfg := plainConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
	m := newManager(t, cfg)
	q := NewReadyQueue(m)
	for i := range n {
		require.NoError(t, q.Push(get(t, fmt.Sprintf("http://h/%d", i)), 0))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var left atomic.Int32
	left.Store(n)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for left.Load() > 0 {
				_, p, err := q.Pop(ctx)
				if err != nil {
					return
				}
				p.Release(ok200, nil)
				if left.Add(-1) == 0 {
					cancel()
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, left.Load(), "requests left when the workers stopped")
}

// TestReadyQueueStoreRelease: with a Store, a release by another
// process's manager unparks the queue's request (Store.Watch).
func TestReadyQueueStoreRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Store = store.NewMemory(nil)
		other, mine := newManager(t, cfg), newManager(t, cfg)
		q := NewReadyQueue(mine)
		p, err := other.Acquire(context.Background(), get(t, "http://a/other"))
		require.NoError(t, err)
		require.NoError(t, q.Push(get(t, "http://a/mine"), 0))
		t0 := time.Now()
		done := make(chan popped)
		go func() {
			req, p, err := q.Pop(context.Background())
			assert.NoError(t, err)
			p.Release(ok200, nil)
			done <- popped{req.URL.String(), time.Since(t0)}
		}()
		time.Sleep(3 * time.Second)
		p.Release(ok200, nil)
		assert.Equal(t, popped{"http://a/mine", 3 * time.Second}, <-done)
	})
}
