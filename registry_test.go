package throttle

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func TestShardPadding(t *testing.T) {
	assert.Equal(t, uintptr(128), unsafe.Sizeof(shard{}), "shards must not share cache lines")
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
