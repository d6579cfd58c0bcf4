package throttle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plainConfig is DefaultConfig without jitter or backoff noise, for tests
// that check exact times.
func plainConfig() Config {
	cfg := DefaultConfig()
	cfg.Default.Jitter = Jitter{}
	return cfg
}

// newManager makes a manager for tests on made-up hosts: robots.txt off,
// so no test reaches for the network (robots tests make their own).
func newManager(t testing.TB, cfg Config) *ThrottlingManager {
	t.Helper()
	cfg.Robots.Enabled = false
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

func get(t testing.TB, rawURL string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, rawURL, nil)
	require.NoError(t, err)
	return req
}

// ok200 is a response a Release can report.
var ok200 = &http.Response{StatusCode: 200, Header: http.Header{}}

// TestWorkedExample pins the slot-delay example to the millisecond:
// Concurrency 2, Delay 0.3 s, SlotDelay 1 s, no jitter: starts at 0.0,
// 0.3 and 1.0.
func TestWorkedExample(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Concurrency = 2
		cfg.Default.Delay = 300 * time.Millisecond
		cfg.Default.SlotDelay = time.Second
		m := newManager(t, cfg)
		t0 := time.Now()
		var mu sync.Mutex
		var starts []time.Duration
		var wg sync.WaitGroup
		for i := 0; i < 3; i++ {
			wg.Go(func() {
				p, err := m.Acquire(context.Background(), get(t, "http://example.com/"))
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				starts = append(starts, time.Since(t0))
				mu.Unlock()
				time.Sleep(100 * time.Millisecond) // the request takes 0.1 s (fake time)
				p.Release(ok200, nil)
			})
			synctest.Wait() // arrival order 0, 1, 2
		}
		wg.Wait()
		sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
		assert.Equal(t, []time.Duration{0, 300 * time.Millisecond, time.Second}, starts)
	})
}

func TestDelayBetweenStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = 2 * time.Second
		cfg.Default.SlotDelay = 0
		m := newManager(t, cfg)
		t0 := time.Now()
		for i := 0; i < 4; i++ {
			p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
			require.NoError(t, err)
			assert.Equal(t, time.Duration(i)*2*time.Second, time.Since(t0), "start %d", i)
			p.Release(ok200, nil)
		}
		// Another scope is not held back by this one.
		t1 := time.Now()
		p, err := m.Acquire(context.Background(), get(t, "http://b.example/"))
		require.NoError(t, err)
		assert.Equal(t, t1, time.Now())
		p.Release(ok200, nil)
	})
}

func TestExplicitZeroMeansZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Default.Concurrency = 3
		m := newManager(t, cfg)
		t0 := time.Now()
		var ps []*Permit
		for i := 0; i < 3; i++ {
			p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
			require.NoError(t, err)
			ps = append(ps, p)
		}
		assert.Equal(t, t0, time.Now(), "no delay at all")
		p, adm, err := m.TryAcquire(get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.Nil(t, p)
		assert.Equal(t, ReasonConcurrency, adm.Reason)
		assert.True(t, adm.At.IsZero(), "a slot must free first: no time known")
		for _, p := range ps {
			p.Release(ok200, nil)
		}
	})
}

func TestJitterRangeAndSeed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		gaps := func(seed uint64) []time.Duration {
			cfg := DefaultConfig()
			cfg.Default.Delay = time.Second
			cfg.Default.SlotDelay = 0
			cfg.Default.Jitter = Jitter{Min: -0.1, Max: 0.3}
			cfg.JitterSeed = seed
			m := newManager(t, cfg)
			var out []time.Duration
			last := time.Now()
			for i := 0; i < 200; i++ {
				p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
				require.NoError(t, err)
				if i > 0 {
					out = append(out, time.Since(last))
				}
				last = time.Now()
				p.Release(ok200, nil)
			}
			return out
		}
		g1, g2, g3 := gaps(7), gaps(7), gaps(8)
		assert.Equal(t, g1, g2, "same seed, same jitter")
		assert.NotEqual(t, g1, g3)
		var sum time.Duration
		for _, g := range g1 {
			assert.GreaterOrEqual(t, g, 900*time.Millisecond)
			assert.LessOrEqual(t, g, 1300*time.Millisecond)
			sum += g
		}
		mean := sum / time.Duration(len(g1))
		assert.InDelta(t, float64(1100*time.Millisecond), float64(mean), float64(40*time.Millisecond),
			"asymmetric range -10%%..+30%%: mean is +10%%")
	})
}

func TestFIFOPerScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = time.Second
		cfg.Default.SlotDelay = 0
		m := newManager(t, cfg)
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := 0; i < 20; i++ {
			wg.Go(func() {
				p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				p.Release(ok200, nil)
			})
			synctest.Wait()
		}
		wg.Wait()
		want := make([]int, 20)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order)
	})
}

func TestGlobalConcurrency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.GlobalConcurrency = 3
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		var inFlight, peak atomic.Int32
		var wg sync.WaitGroup
		for i := 0; i < 30; i++ {
			wg.Go(func() {
				p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://h%d.example/", i)))
				if !assert.NoError(t, err) {
					return
				}
				n := inFlight.Add(1)
				for {
					old := peak.Load()
					if n <= old || peak.CompareAndSwap(old, n) {
						break
					}
				}
				time.Sleep(time.Second)
				inFlight.Add(-1)
				p.Release(ok200, nil)
			})
		}
		wg.Wait()
		assert.Equal(t, int32(3), peak.Load())
		assert.Zero(t, m.global.n.Load(), "all global permits back")
	})
}

// TestGlobalCapDoesNotBlockOtherScopes: a request waiting for its own
// scope's delay doesn't hold a place in the global queue.
func TestGlobalQueueOnlyForReadyRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.GlobalConcurrency = 1
		cfg.Default.Delay, cfg.Default.SlotDelay = 10*time.Second, 0
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://slow.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		// slow.example now waits 10 s for its delay.
		done := make(chan struct{})
		go func() {
			defer close(done)
			p, err := m.Acquire(context.Background(), get(t, "http://slow.example/"))
			if assert.NoError(t, err) {
				p.Release(ok200, nil)
			}
		}()
		synctest.Wait()
		t0 := time.Now()
		p2, err := m.Acquire(context.Background(), get(t, "http://fast.example/"))
		require.NoError(t, err)
		assert.Equal(t, t0, time.Now())
		p2.Release(ok200, nil)
		<-done
	})
}

func TestMultiScopeAllAtOnceNothingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		ctxA := WithScopes(context.Background(), "a")
		ctxAB := WithScopes(context.Background(), "a", "b")
		ctxB := WithScopes(context.Background(), "b")
		pa, err := m.Acquire(ctxA, get(t, "http://x.example/"))
		require.NoError(t, err)
		var admitted atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			p, err := m.Acquire(ctxAB, get(t, "http://x.example/"))
			if assert.NoError(t, err) {
				admitted.Store(true)
				assert.Equal(t, []string{"a", "b"}, p.Scopes())
				p.Release(ok200, nil)
			}
		}()
		synctest.Wait()
		// The a+b request waits for a, holding nothing of b: a b-only
		// request passes it and takes b's only slot.
		sb := m.mustScope(t, "b")
		sb.mu.Lock()
		assert.Equal(t, IdleEmpty, sb.mgr.Idle(time.Now()))
		sb.mu.Unlock()
		pb, adm, err := m.TryAcquire(get(t, "http://x.example/").WithContext(ctxB))
		require.NoError(t, err)
		require.NotNil(t, pb, "not held behind a waiter that waits for another scope: %v", adm)
		// a frees, but b is taken: the a+b request starts only when both
		// admit it at the same instant.
		pa.Release(ok200, nil)
		synctest.Wait()
		assert.False(t, admitted.Load())
		pb.Release(ok200, nil)
		<-done
		assert.True(t, admitted.Load())
	})
}

// TestSharedScopeNotHeldByOtherScopesWait is the endpoint case: /download
// waits for its own 1 s delay; /search, sharing the host scope, goes at
// once instead of queueing behind it.
func TestSharedScopeNotHeldByOtherScopesWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 5
		download := cfg.Default
		download.Concurrency, download.Delay = 1, time.Second
		cfg.Scopes = map[string]ScopeConfig{"api/download": download}
		m := newManager(t, cfg)
		ctxDL := WithScopes(context.Background(), "api", "api/download")
		ctxSearch := WithScopes(context.Background(), "api", "api/search")
		p, err := m.Acquire(ctxDL, get(t, "http://api/download/1"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p, err := m.Acquire(ctxDL, get(t, "http://api/download/2"))
			if assert.NoError(t, err) {
				assert.Equal(t, t0.Add(time.Second), time.Now())
				p.Release(ok200, nil)
			}
		}()
		synctest.Wait()
		for range 3 {
			p, err := m.Acquire(ctxSearch, get(t, "http://api/search?q=x"))
			require.NoError(t, err)
			assert.Equal(t, t0, time.Now(), "search is not held behind download's delay")
			p.Release(ok200, nil)
		}
		<-done
	})
}

func (m *ThrottlingManager) mustScope(t testing.TB, key string) *scope {
	t.Helper()
	s, err := m.lookup(key, m.clock.Now())
	require.NoError(t, err)
	return s
}

// TestToscrapeHierarchy is the documented multi-scope case: each request
// has its registrable domain and its host as scopes; toscrape.com allows
// 32, books.toscrape.com 24, quotes.toscrape.com 16.
func TestToscrapeHierarchy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.GlobalConcurrency = 100
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		set := func(key string, c int) {
			sc := cfg.Default
			sc.Concurrency = c
			if cfg.Scopes == nil {
				cfg.Scopes = map[string]ScopeConfig{}
			}
			cfg.Scopes[key] = sc
		}
		set("toscrape.com", 32)
		set("books.toscrape.com", 24)
		set("quotes.toscrape.com", 16)
		cfg.Scoper = func(req *http.Request) ([]Scope, error) {
			h, err := requestHost(req)
			if err != nil {
				return nil, err
			}
			return []Scope{{Key: "toscrape.com"}, {Key: h}}, nil
		}
		m := newManager(t, cfg)
		var mu sync.Mutex
		cur := map[string]int{}
		peak := map[string]int{}
		track := func(k string, d int) {
			mu.Lock()
			cur[k] += d
			peak[k] = max(peak[k], cur[k])
			mu.Unlock()
		}
		run := func(host string, n int) {
			var wg sync.WaitGroup
			for i := 0; i < n; i++ {
				wg.Go(func() {
					p, err := m.Acquire(context.Background(), get(t, "http://"+host+"/"))
					if !assert.NoError(t, err) {
						return
					}
					track(host, 1)
					track("all", 1)
					time.Sleep(time.Second)
					track(host, -1)
					track("all", -1)
					p.Release(ok200, nil)
				})
			}
			wg.Wait()
		}
		// Each subdomain alone reaches its own cap.
		run("books.toscrape.com", 60)
		run("quotes.toscrape.com", 60)
		assert.Equal(t, 24, peak["books.toscrape.com"])
		assert.Equal(t, 16, peak["quotes.toscrape.com"])
		// Together they never pass the domain's 32.
		peak = map[string]int{}
		var wg sync.WaitGroup
		wg.Go(func() { run("books.toscrape.com", 80) })
		wg.Go(func() { run("quotes.toscrape.com", 80) })
		wg.Wait()
		// Together exactly the domain's 32: a books request that waits for
		// books' own cap doesn't hold quotes requests behind it.
		assert.Equal(t, 32, peak["all"])
		assert.LessOrEqual(t, peak["books.toscrape.com"], 24)
		assert.LessOrEqual(t, peak["quotes.toscrape.com"], 16)
	})
}

func TestReleaseIdempotent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Default.Concurrency = 1
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		p2, err := m.Acquire(context.Background(), get(t, "http://b.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		p.Release(ok200, nil)
		p.ReleaseFeedback(Feedback{})
		var nilPermit *Permit
		nilPermit.Release(nil, nil) // no panic
		assert.Equal(t, int64(1), m.global.n.Load(), "a second Release frees nothing more")
		s := m.mustScope(t, "a.example")
		s.mu.Lock()
		assert.Equal(t, int32(0), s.mgr.(*defaultScope).adm.InFlight)
		s.mu.Unlock()
		p2.Release(ok200, nil)
		assert.Zero(t, m.global.n.Load())
	})
}

// TestReleaseFeedbackCustomManager: a custom ScopeManager gets the Feedback
// through the interface; scopes after it in the permit (sorted by key) see
// what it changed, as when all scopes of a permit shared one Feedback.
func TestReleaseFeedbackCustomManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		var seen []int
		custom := cfg.Default
		custom.NewManager = func(p ScopeParams) ScopeManager {
			return &recordingScope{ScopeManager: NewDefaultScopeManager(p), onFinish: func(fb *Feedback) {
				seen = append(seen, fb.Status)
				fb.Status = http.StatusServiceUnavailable
			}}
		}
		cfg.Scopes = map[string]ScopeConfig{"a": custom}
		m := newManager(t, cfg)
		req := get(t, "http://x.example/").WithContext(WithScopes(context.Background(), "b", "a"))
		p, err := m.Acquire(req.Context(), req)
		require.NoError(t, err)
		p.Release(ok200, nil)
		assert.Equal(t, []int{200}, seen)
		b := m.mustScope(t, "b")
		b.mu.Lock()
		assert.Equal(t, cfg.Default.Backoff.MinDelay, b.mgr.(*defaultScope).backoff.delay, "b saw a's 503")
		b.mu.Unlock()
	})
}

// TestReleaseCustomFeedbackFunc: Release gives a custom FeedbackFunc the
// manager's time and hands its result to the scopes.
func TestReleaseCustomFeedbackFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		var at time.Time
		cfg.Feedback = func(now time.Time, resp *http.Response, err error) Feedback {
			at = now
			fb := DefaultFeedback(now, resp, err)
			if resp.Header.Get("X-Upstream-Status") == "429" {
				fb.Status = http.StatusTooManyRequests
			}
			return fb
		}
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		time.Sleep(time.Second)
		p.Release(&http.Response{StatusCode: 200, Header: http.Header{"X-Upstream-Status": {"429"}}}, nil)
		assert.Equal(t, m.clock.Now(), at)
		s := m.mustScope(t, "a.example")
		s.mu.Lock()
		assert.Equal(t, cfg.Default.Backoff.MinDelay, s.mgr.(*defaultScope).backoff.delay, "the 429 reached the scope")
		s.mu.Unlock()
	})
}

// TestCancelAtEveryStage cancels waiters blocked on each kind of wait and
// checks that nothing is consumed and later callers go at the right time.
func TestCancelAtEveryStage(t *testing.T) {
	stages := []struct {
		name  string
		setup func(cfg *Config)
		hold  bool // keep the first permit while the second waits
	}{
		{"delay", func(cfg *Config) { cfg.Default.Delay = 5 * time.Second }, false},
		{"concurrency", func(cfg *Config) { cfg.Default.Delay = 0 }, true},
		{"global", func(cfg *Config) { cfg.Default.Delay = 0; cfg.GlobalConcurrency = 1 }, true},
		{"slot delay", func(cfg *Config) { cfg.Default.Delay = 0; cfg.Default.SlotDelay = 5 * time.Second }, false},
		{"quota", func(cfg *Config) { cfg.Default.Delay = 0; cfg.Default.Quota = 1 }, false},
	}
	for _, st := range stages {
		t.Run(st.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := plainConfig()
				cfg.Default.SlotDelay = 0
				st.setup(&cfg)
				m := newManager(t, cfg)
				first, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
				require.NoError(t, err)
				if !st.hold {
					first.Release(ok200, nil)
				}
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error)
				go func() {
					_, err := m.Acquire(ctx, get(t, "http://a.example/"))
					errc <- err
				}()
				synctest.Wait()
				cancel()
				err = <-errc
				require.Error(t, err)
				assert.ErrorIs(t, err, context.Canceled)
				var we *WaitError
				assert.ErrorAs(t, err, &we)
				if st.hold {
					first.Release(ok200, nil)
				}
				s := m.mustScope(t, "a.example")
				s.mu.Lock()
				assert.Zero(t, s.queue.n, "the cancelled waiter left the queue")
				assert.Zero(t, s.mgr.(*defaultScope).adm.InFlight)
				s.mu.Unlock()
				assert.Zero(t, m.global.n.Load())
				assert.Zero(t, m.global.pending.Load())
				// The next caller is admitted as if the cancelled one never was.
				p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
				require.NoError(t, err)
				p.Release(ok200, nil)
			})
		})
	}
}

// TestCancelledMultiScopeWaiterWakesOthers: a b-only request queued
// behind an a+b request that waits for b's delay is woken when that
// request gives up, and goes at b's time.
func TestCancelledMultiScopeWaiterWakesOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		slow := cfg.Default
		slow.Delay = 10 * time.Second
		cfg.Scopes = map[string]ScopeConfig{"b": slow}
		m := newManager(t, cfg)
		p, err := m.Acquire(WithScopes(context.Background(), "b"), get(t, "http://x/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()
		ctx, cancel := context.WithCancel(WithScopes(context.Background(), "a", "b"))
		errc := make(chan error, 1)
		go func() { _, err := m.Acquire(ctx, get(t, "http://x/")); errc <- err }()
		synctest.Wait()
		got := make(chan time.Time, 1)
		go func() {
			p, err := m.Acquire(WithScopes(context.Background(), "b"), get(t, "http://x/"))
			if assert.NoError(t, err) {
				got <- time.Now()
				p.Release(ok200, nil)
			}
		}()
		synctest.Wait()
		time.Sleep(time.Second)
		cancel()
		assert.ErrorIs(t, <-errc, context.Canceled)
		assert.Equal(t, t0.Add(10*time.Second), <-got, "woken when the a+b waiter left, then b's delay")
	})
}

func TestDeadlineBeforeEarliestStartFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = 10 * time.Second
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		t0 := time.Now()
		_, err = m.Acquire(ctx, get(t, "http://a.example/"))
		assert.Equal(t, t0, time.Now(), "gave up without waiting")
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var we *WaitError
		require.ErrorAs(t, err, &we)
		assert.Equal(t, "a.example", we.Scope)
		assert.Equal(t, ReasonDelay, we.Reason)
		assert.Equal(t, t0.Add(10*time.Second), we.ReadyAt)
		// A deadline that can be met is waited for.
		ctx2, cancel2 := context.WithTimeout(context.Background(), 11*time.Second)
		defer cancel2()
		p, err = m.Acquire(ctx2, get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.Equal(t, t0.Add(10*time.Second), time.Now())
		p.Release(ok200, nil)
	})
}

func TestAcquireErrors(t *testing.T) {
	m := newManager(t, DefaultConfig())
	ctx := context.Background()
	_, err := m.Acquire(ctx, nil)
	assert.ErrorIs(t, err, ErrNilRequest)
	_, err = m.Acquire(ctx, &http.Request{})
	assert.ErrorIs(t, err, ErrNoHost)
	_, err = m.Acquire(ctx, get(t, "/relative/only"))
	assert.ErrorIs(t, err, ErrNoHost)
	_, err = m.Acquire(WithScopes(ctx), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrNoScope)
	_, err = m.Acquire(WithScopes(ctx, ""), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrEmptyScopeKey)
	_, err = m.Acquire(WithScopeCosts(ctx, Scope{Key: "a", Cost: -1}), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrNegativeCost)
	keys := make([]string, maxScopesPerRequest+1)
	for i := range keys {
		keys[i] = fmt.Sprint("s", i)
	}
	_, err = m.Acquire(WithScopes(ctx, keys...), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrTooManyScopes)
	p, err := m.Acquire(WithScopes(ctx, keys[:maxScopesPerRequest]...), get(t, "http://a/"))
	require.NoError(t, err, "exactly the cap is fine")
	p.Release(nil, nil)

	boom := errors.New("boom")
	cfg := DefaultConfig()
	cfg.Scoper = func(*http.Request) ([]Scope, error) { return nil, boom }
	m2 := newManager(t, cfg)
	_, err = m2.Acquire(ctx, get(t, "http://a/"))
	assert.ErrorIs(t, err, boom)
	cfg.Scoper = func(*http.Request) ([]Scope, error) { return nil, nil }
	m3 := newManager(t, cfg)
	_, err = m3.Acquire(ctx, get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrNoScope)
	_, _, err = m3.TryAcquire(nil)
	assert.ErrorIs(t, err, ErrNilRequest)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = m.Acquire(cctx, get(t, "http://a/"))
	assert.ErrorIs(t, err, context.Canceled)
}

func TestDuplicateScopesMerge(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Default.Quota = 10
		m := newManager(t, cfg)
		p, err := m.Acquire(WithScopeCosts(context.Background(), Scope{Key: "a", Cost: 2}, Scope{Key: "a", Cost: 3}), get(t, "http://x/"))
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, p.Scopes())
		assert.Equal(t, int64(5), p.scopes[0].cost)
		p.Release(ok200, nil)
	})
}

// TestInvariantsUnderLoad: 200 goroutines, many requests over a few
// scopes with jitter, random hold times and random cancellations. Never
// more than Concurrency holders per scope, never two starts in a scope
// closer than (1+Jitter.Min)*Delay, never more than GlobalConcurrency.
func TestInvariantsUnderLoad(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.GlobalConcurrency = 5
		cfg.Default.Concurrency = 2
		cfg.Default.Delay = 100 * time.Millisecond
		cfg.Default.SlotDelay = 150 * time.Millisecond
		cfg.Default.Jitter = symmetricJitter(0.5)
		cfg.Default.Backoff.Enabled = false
		cfg.JitterSeed = 1
		m := newManager(t, cfg)
		hosts := []string{"a", "b", "c", "d"}
		type rec struct {
			inFlight int
			last     time.Time
			started  bool
		}
		var mu sync.Mutex
		state := map[string]*rec{}
		for _, h := range hosts {
			state[h] = &rec{}
		}
		global, violations, admitted := 0, 0, 0
		minGap := time.Duration(float64(cfg.Default.Delay) * (1 + cfg.Default.Jitter.Min))
		var wg sync.WaitGroup
		for g := 0; g < 200; g++ {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for i := 0; i < 25; i++ {
					h := hosts[r.IntN(len(hosts))]
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(r.IntN(30))*time.Second)
					p, err := m.Acquire(ctx, get(t, "http://"+h+"/"))
					if err != nil {
						cancel()
						continue
					}
					mu.Lock()
					st := state[h]
					st.inFlight++
					global++
					admitted++
					now := time.Now()
					if st.inFlight > cfg.Default.Concurrency || global > cfg.GlobalConcurrency ||
						(st.started && now.Sub(st.last) < minGap) {
						violations++
					}
					st.last, st.started = now, true
					mu.Unlock()
					time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
					mu.Lock()
					st.inFlight--
					global--
					mu.Unlock()
					p.Release(ok200, nil)
					cancel()
				}
			})
		}
		wg.Wait()
		assert.Zero(t, violations)
		assert.Greater(t, admitted, 1000)
		assert.Zero(t, m.global.n.Load(), "every global permit back")
		for _, h := range hosts {
			s := m.mustScope(t, h)
			s.mu.Lock()
			assert.Zero(t, s.queue.n)
			assert.Zero(t, s.mgr.(*defaultScope).adm.InFlight)
			s.mu.Unlock()
		}
		t.Logf("admitted %d requests", admitted)
	})
}

func TestIdleScopesForgotten(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.IdleTimeout = time.Minute
		cfg.LearnedIdleTimeout = time.Hour
		cfg.Default.Delay = 0
		cfg.Default.SlotDelay = 0
		m := newManager(t, cfg)
		for i := 0; i < 1000; i++ {
			p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://h%d.example/", i)))
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		// One host learns something: a 429 raises its backoff delay.
		p, err := m.Acquire(context.Background(), get(t, "http://learned.example/"))
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 429, Header: http.Header{}}, nil)
		assert.Equal(t, 1001, m.Len())
		time.Sleep(2 * time.Minute)
		// New scopes trigger the sweeps, shard by shard.
		for i := 0; i < 2000; i++ {
			p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://new%d.example/", i)))
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		n := 0
		for i := 0; i < 1000; i++ {
			sh := &m.shards[0]
			_ = sh
			if m.has(fmt.Sprintf("h%d.example", i)) {
				n++
			}
		}
		assert.Zero(t, n, "idle scopes forgotten")
		assert.True(t, m.has("learned.example"), "learned state outlives IdleTimeout")
	})
}

// TestIdleScopesForgottenOnKnownHosts: a crawl that goes on over a host it
// already knows creates no scope, so no shard sweeps on its own; each
// Acquire still gives the next shard in turn a sweep (sweepStep), so the
// idle scopes are forgotten all the same. A shard left with a quarter of
// its peak or less gets a new map: a Go map keeps its room when entries
// are deleted.
func TestIdleScopesForgottenOnKnownHosts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.IdleTimeout = time.Minute
		cfg.LearnedIdleTimeout = time.Hour
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		alive := get(t, "http://alive.example/")
		for i := range 10_000 {
			p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://h%d.example/", i)))
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		// Once a second, more than sweepPeriod/numShards apart: one
		// shard per Acquire, all of them within numShards seconds.
		for range cfg.IdleTimeout/time.Second + numShards + 1 {
			time.Sleep(time.Second)
			p, err := m.Acquire(context.Background(), alive)
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		assert.Equal(t, 1, m.Len(), "only the live scope is left")
		for i := range m.shards {
			sh := &m.shards[i]
			sh.mu.RLock()
			assert.LessOrEqual(t, sh.peak, 1, "shard %d's map made anew", i)
			sh.mu.RUnlock()
		}
	})
}

// stepClock is a Clock that moves only when told and makes no timers, for
// tests on one goroutine in which nothing waits.
type stepClock struct{ t time.Time }

func (c *stepClock) Now() time.Time                 { return c.t }
func (c *stepClock) NewTimer(d time.Duration) Timer { panic("stepClock: nothing should wait") }

// TestSweepStepAnyEpoch: sweepStep compares UnixNano times by difference,
// so its turn goes on where UnixNano overflows: a clock in year 1, and one
// that crosses 2262.
func TestSweepStepAnyEpoch(t *testing.T) {
	for _, start := range []time.Time{{}, time.Unix(0, math.MaxInt64).Add(-time.Minute)} {
		clk := &stepClock{t: start}
		cfg := plainConfig()
		cfg.Clock = clk
		cfg.IdleTimeout = time.Minute
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		for i := range 1000 {
			p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://h%d.example/", i)))
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		alive := get(t, "http://alive.example/")
		for range cfg.IdleTimeout/time.Second + numShards + 1 {
			clk.t = clk.t.Add(time.Second)
			p, err := m.Acquire(context.Background(), alive)
			require.NoError(t, err)
			p.Release(ok200, nil)
		}
		assert.Equal(t, 1, m.Len(), "from %v", start)
	}
}

// TestScopeKeyIsACopy: a scope keeps a copy of its key, not the request's
// URL string that the host was sliced from, which it would keep alive.
func TestScopeKeyIsACopy(t *testing.T) {
	m := newManager(t, plainConfig())
	req := get(t, "http://example.com/"+strings.Repeat("x", 1000))
	p, err := m.Acquire(context.Background(), req)
	require.NoError(t, err)
	defer p.Release(ok200, nil)
	key := p.scopes[0].s.key
	assert.Equal(t, "example.com", key)
	assert.NotSame(t, unsafe.StringData(req.URL.Host), unsafe.StringData(key))
}

func (m *ThrottlingManager) has(key string) bool {
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		_, ok := sh.m[key]
		sh.mu.RUnlock()
		if ok {
			return true
		}
	}
	return false
}

func TestSetScopeConfigWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = time.Hour
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
			if assert.NoError(t, err) {
				p.Release(ok200, nil)
			}
		}()
		time.Sleep(time.Second)
		sc := cfg.Default
		sc.Delay = 2 * time.Second
		require.NoError(t, m.SetScopeConfig("a.example", sc))
		<-done
		assert.Equal(t, t0.Add(2*time.Second), time.Now(), "re-evaluated with the new delay")
		sc.Delay = -1
		var ce *ConfigError
		require.ErrorAs(t, m.SetScopeConfig("a.example", sc), &ce)
		assert.Equal(t, `Scopes["a.example"].Delay`, ce.Field)
	})
}

func TestShardPadding(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(shard{}), "shards must not share cache lines")
}

// TestTicketFields: defaultScope.start sets a Ticket field by field; a new
// field must be set there too.
func TestTicketFields(t *testing.T) {
	assert.Equal(t, 4, reflect.TypeFor[Ticket]().NumField(), "set the new field in defaultScope.start")
	cfg := DefaultConfig().Default
	cfg.SlotDelay = 0
	d := NewDefaultScopeManager(ScopeParams{Key: "a", Config: cfg}).(*defaultScope)
	now := time.Now()
	tk := Ticket{Slot: 7, Cost: 9, Window: 3, Start: now.Add(-time.Hour)} // a used ticket
	d.start(&tk, now, 2)
	assert.Equal(t, Ticket{Slot: -1, Cost: 2, Start: now}, tk)
	assert.Equal(t, tk, d.Start(now, 2), "Start is start in place")
}

// TestInvariantsMultiScope: 200 goroutines, requests with 1-3 random
// scopes of five, random hold times, random cancellations, some scopes
// with delays. Per scope never more than its Concurrency and never two
// starts closer than (1+Jitter.Min)*Delay; never more than
// GlobalConcurrency; everything free at the end.
func TestInvariantsMultiScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.GlobalConcurrency = 6
		cfg.Default.Concurrency = 2
		cfg.Default.Delay = 0
		cfg.Default.SlotDelay = 0
		cfg.Default.Backoff.Enabled = false
		cfg.JitterSeed = 9
		slow := cfg.Default
		slow.Concurrency, slow.Delay = 1, 300*time.Millisecond
		wide := cfg.Default
		wide.Concurrency = 4
		cfg.Scopes = map[string]ScopeConfig{"slow": slow, "wide": wide}
		m := newManager(t, cfg)
		keys := []string{"a", "b", "slow", "wide", "e"}
		limit := map[string]int{"a": 2, "b": 2, "slow": 1, "wide": 4, "e": 2}
		minGap := map[string]time.Duration{"slow": time.Duration(float64(slow.Delay) * (1 + slow.Jitter.Min))}
		var mu sync.Mutex
		cur := map[string]int{}
		last := map[string]time.Time{}
		global, violations, admitted, cancelled := 0, 0, 0, 0
		var wg sync.WaitGroup
		for g := 0; g < 200; g++ {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 2))
				for i := 0; i < 25; i++ {
					n := 1 + r.IntN(3)
					var mine []string
					for _, j := range r.Perm(len(keys))[:n] {
						mine = append(mine, keys[j])
					}
					ctx, cancel := context.WithTimeout(WithScopes(context.Background(), mine...), time.Duration(r.IntN(20))*time.Second)
					p, err := m.Acquire(ctx, get(t, "http://x/"))
					if err != nil {
						mu.Lock()
						cancelled++
						mu.Unlock()
						cancel()
						continue
					}
					mu.Lock()
					now := time.Now()
					admitted++
					global++
					if global > cfg.GlobalConcurrency {
						violations++
					}
					for _, k := range mine {
						cur[k]++
						if cur[k] > limit[k] {
							violations++
						}
						if l, ok := last[k]; ok && now.Sub(l) < minGap[k] {
							violations++
						}
						last[k] = now
					}
					mu.Unlock()
					time.Sleep(time.Duration(r.IntN(200)) * time.Millisecond)
					mu.Lock()
					global--
					for _, k := range mine {
						cur[k]--
					}
					mu.Unlock()
					p.Release(ok200, nil)
					cancel()
				}
			})
		}
		wg.Wait()
		t.Logf("admitted %d, gave up %d", admitted, cancelled)
		assert.Zero(t, violations)
		assert.Greater(t, admitted, 2000)
		assert.Zero(t, m.global.n.Load())
		assert.Zero(t, m.global.pending.Load())
		for _, k := range keys {
			s := m.mustScope(t, k)
			s.mu.Lock()
			assert.Zero(t, s.queue.n, k)
			assert.Zero(t, s.mgr.(*defaultScope).adm.InFlight, k)
			s.mu.Unlock()
		}
	})
}

// TestMaxScopesBoundsALinkFarm: 50,000 distinct hosts, each used once,
// with MaxScopes 2,000: the manager holds about 2,000 scopes, the most
// recent ones; a scope with a permit is never evicted.
func TestMaxScopesBoundsALinkFarm(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.MaxScopes = 2000
		cfg.GlobalConcurrency = 100
		m := newManager(t, cfg)
		held, err := m.Acquire(context.Background(), get(t, "http://held.example/"))
		require.NoError(t, err)
		peak := 0
		for i := 0; i < 50_000; i++ {
			p, err := m.Acquire(context.Background(), get(t, fmt.Sprintf("http://farm%d.example/", i)))
			require.NoError(t, err)
			p.Release(ok200, nil)
			if i%1000 == 0 {
				peak = max(peak, m.Len())
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("scopes held: %d at the end, %d at most", m.Len(), peak)
		assert.LessOrEqual(t, peak, 2000+2000/8+numShards)
		assert.True(t, m.has("held.example"), "a scope with a permit stays")
		assert.True(t, m.has("farm49999.example"), "the most recent stay")
		assert.False(t, m.has("farm0.example"), "the oldest go")
		held.Release(ok200, nil)
	})
}
