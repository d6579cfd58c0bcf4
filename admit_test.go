package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestAcquireErrors(t *testing.T) {
	m := newManager(t, DefaultConfig())
	ctx := context.Background()
	_, err := m.Acquire(ctx, nil)
	assert.ErrorIs(t, err, ErrNilRequest)
	_, err = m.Acquire(ctx, &http.Request{})
	assert.ErrorIs(t, err, ErrNoHost)
	_, err = m.Acquire(ctx, get(t, "/relative/only"))
	assert.ErrorIs(t, err, ErrNoHost)
	_, err = m.Acquire(WithScopeKeys(ctx), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrNoScope)
	_, err = m.Acquire(WithScopeKeys(ctx, ""), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrEmptyScopeKey)
	_, err = m.Acquire(WithScopes(ctx, Scope{Key: "a", Cost: -1}), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrNegativeCost)
	keys := make([]string, maxScopesPerRequest+1)
	for i := range keys {
		keys[i] = fmt.Sprint("s", i)
	}
	_, err = m.Acquire(WithScopeKeys(ctx, keys...), get(t, "http://a/"))
	assert.ErrorIs(t, err, ErrTooManyScopes)
	p, err := m.Acquire(WithScopeKeys(ctx, keys[:maxScopesPerRequest]...), get(t, "http://a/"))
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
		p, err := m.Acquire(WithScopes(context.Background(), Scope{Key: "a", Cost: 2}, Scope{Key: "a", Cost: 3}), get(t, "http://x/"))
		require.NoError(t, err)
		assert.Equal(t, []string{"a"}, p.Scopes())
		assert.Equal(t, int64(5), p.scopes()[0].ticket.Cost)
		p.Release(ok200, nil)
	})
}
