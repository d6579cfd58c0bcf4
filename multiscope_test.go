package throttle

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMultiScopeAllAtOnceNothingHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		ctxA := WithScopeKeys(context.Background(), "a")
		ctxAB := WithScopeKeys(context.Background(), "a", "b")
		ctxB := WithScopeKeys(context.Background(), "b")
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
		assert.Equal(t, IdleEmpty, sb.pol.idleness(time.Now()))
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
		ctxDL := WithScopeKeys(context.Background(), "api", "api/download")
		ctxSearch := WithScopeKeys(context.Background(), "api", "api/search")
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
