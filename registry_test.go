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
		assert.Equal(t, 1001, m.NumScopes())
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
		assert.Equal(t, 1, m.NumScopes(), "only the live scope is left")
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
		assert.Equal(t, 1, m.NumScopes(), "from %v", start)
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
	key := p.scopes()[0].s.key
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
// with MaxScopes 2,000: the manager holds at most 2,000 scopes besides the
// one with a permit, the most recent ones; a scope with a permit is never
// evicted.
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
				peak = max(peak, m.NumScopes())
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("scopes held: %d at the end, %d at most", m.NumScopes(), peak)
		assert.LessOrEqual(t, peak, 2000+1)
		assert.True(t, m.has("held.example"), "a scope with a permit stays")
		assert.True(t, m.has("farm49999.example"), "the most recent stay")
		assert.False(t, m.has("farm0.example"), "the oldest go")
		held.Release(ok200, nil)
	})
}

// retryAfter300 is a link farm's answer: 429, come back in 300 s.
func retryAfter300() *http.Response {
	return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"300"}}}
}

// farmStep sends one request to each of n new hosts, prefix<i>.example
// for i from first, at the clock's time, and answers each with resp.
func farmStep(t testing.TB, m *ThrottlingManager, reqs *hostRequests, prefix string, first, n int, resp func() *http.Response) {
	t.Helper()
	for i := first; i < first+n; i++ {
		p, adm, err := m.TryAcquire(reqs.to(prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		if p == nil {
			t.Fatalf("new host %s%d.example refused: %+v", prefix, i, adm)
		}
		p.Release(resp(), nil)
	}
}

// stepManager returns a manager on cfg with MaxScopes limit, and the
// stepClock it reads, at 2026-01-01.
func stepManager(t testing.TB, cfg Config, limit int) (*ThrottlingManager, *stepClock) {
	clk := &stepClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Clock = clk
	cfg.MaxScopes = limit
	return newManager(t, cfg), clk
}

// TestMaxScopesBoundsGatedScopes: 20,000 new hosts, 1,000 a second, each
// answering 429 with Retry-After: 300, under MaxScopes 1,000, and under a
// MaxScopes of 5, below the number of shards. Every scope is gated for
// 300 s when the cap is reached, and the table still holds at most
// MaxScopes scopes (it held all 20,000 when eviction skipped the gated
// ones; with MaxScopes 5, one per shard at least, so 64).
func TestMaxScopesBoundsGatedScopes(t *testing.T) {
	for _, limit := range []int{1000, 5} {
		m, clk := stepManager(t, benchConfig(), limit)
		reqs := newHostRequests()
		for sec := range 20 {
			farmStep(t, m, reqs, "farm", sec*1000, 1000, retryAfter300)
			require.LessOrEqual(t, m.NumScopes(), limit, "after %d hosts", (sec+1)*1000)
			clk.t = clk.t.Add(time.Second)
		}
	}
}

// TestMaxScopesFrozenClockDefaultDelay: the default Delay (1 s, ±50 %)
// with a clock that never moves: every scope's gap after its one start
// is still running, and 20,000 hosts leave at most MaxScopes scopes.
func TestMaxScopesFrozenClockDefaultDelay(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GlobalConcurrency = 1 << 20
	m, _ := stepManager(t, cfg, 1000)
	reqs := newHostRequests()
	for i := range 20_000 {
		farmStep(t, m, reqs, "h", i, 1, func() *http.Response { return ok200 })
		if i%1000 == 999 {
			require.LessOrEqual(t, m.NumScopes(), 1000, "after %d hosts", i+1)
		}
	}
}

// policyCalls counts the calls a manager makes to its scopes' policies
// that ask for their state (Admit, Idle): the work of keeping the table
// under MaxScopes shows in them.
type policyCalls struct {
	ScopeManager
	n *int
}

func (c *policyCalls) Admit(now time.Time, cost int64) Admission {
	*c.n++
	return c.ScopeManager.Admit(now, cost)
}

func (c *policyCalls) Idle(now time.Time) Idleness {
	*c.n++
	return c.ScopeManager.Idle(now)
}

// TestMaxScopesEvictionCostFlat: the policy calls per 1,000 new hosts
// (gated ones, as in a link farm answering Retry-After: 300) are about
// the same at 2,000 hosts seen as at 20,000: eviction does not rescan the
// shard for each new scope (it asked every scope of the shard whether it
// was idle, so the cost grew with the table).
func TestMaxScopesEvictionCostFlat(t *testing.T) {
	cfg := benchConfig()
	calls := 0
	cfg.NewScopeManager = func(p ScopeParams) ScopeManager {
		return &policyCalls{ScopeManager: NewDefaultScopeManager(p), n: &calls}
	}
	m, clk := stepManager(t, cfg, 1000)
	reqs := newHostRequests()
	per1000 := map[int]int{}
	for sec := range 20 {
		before := calls
		farmStep(t, m, reqs, "farm", sec*1000, 1000, retryAfter300)
		per1000[(sec+1)*1000] = calls - before
		clk.t = clk.t.Add(time.Second)
	}
	t.Logf("policy calls per 1,000 new hosts: %d at 2,000 hosts seen, %d at 20,000", per1000[2000], per1000[20_000])
	assert.LessOrEqual(t, per1000[20_000], 2*per1000[2000]+100)
}
