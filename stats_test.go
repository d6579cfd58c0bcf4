package throttle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/stretchr/testify/require"
)

func statsConfig() Config {
	cfg := DefaultConfig()
	cfg.Default.SlotDelay, cfg.Default.Jitter, cfg.Default.Backoff.Jitter = 0, Jitter{}, Jitter{}
	return cfg
}

func scopeStat(st Stats, key string) *ScopeStats {
	for i := range st.Scopes {
		if st.Scopes[i].Key == key {
			return &st.Scopes[i]
		}
	}
	return nil
}

// TestStatsSaysWhyAndCounts: in flight, waiting, the reason a scope waits
// now, backoff state and counts by status class.
func TestStatsSaysWhyAndCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, statsConfig())
		ctx := context.Background()
		p, err := m.Acquire(ctx, get(t, "http://a.test/"))
		require.NoError(t, err)
		go func() {
			q, err := m.Acquire(ctx, get(t, "http://a.test/"))
			if err == nil {
				q.Release(&http.Response{StatusCode: 200}, nil)
			}
		}()
		synctest.Wait()
		st := m.Stats()
		a := scopeStat(st, "a.test")
		require.NotNil(t, a)
		require.Equal(t, 1, a.InFlight)
		require.Equal(t, 1, a.Waiting)
		require.Equal(t, ReasonConcurrency, a.Reason)
		require.Equal(t, 1, a.Concurrency)
		require.Equal(t, time.Second, a.Delay)
		require.Equal(t, 1, st.Waiting)
		require.Equal(t, 1, st.InFlight)

		p.Release(&http.Response{StatusCode: 503}, nil)
		synctest.Wait()
		time.Sleep(10 * time.Second) // the waiter went after the backoff delay
		synctest.Wait()
		st = m.Stats()
		a = scopeStat(st, "a.test")
		require.Equal(t, uint64(2), a.Counts.Requests)
		require.Equal(t, uint64(1), a.Counts.Responses[5])
		require.Equal(t, uint64(1), a.Counts.Responses[2])
		require.Equal(t, uint64(1), a.Counts.Signals)
		require.Equal(t, 2*time.Second, a.BackoffDelay)
		require.Equal(t, ReasonNone, a.Reason)
		require.Equal(t, uint64(2), st.Totals.Requests)

		// The counts of forgotten scopes stay in the totals.
		time.Sleep(2 * time.Hour)
		q, err := m.Acquire(ctx, get(t, "http://b.test/"))
		require.NoError(t, err)
		q.Release(nil, errors.New("refused"))
		for i := range m.shards { // sweep every shard now (the crawl would, in turn)
			sh := &m.shards[i]
			sh.mu.Lock()
			m.sweep(sh, time.Now())
			sh.mu.Unlock()
		}
		st = m.Stats()
		require.Nil(t, scopeStat(st, "a.test"), "a.test forgotten")
		require.Equal(t, uint64(3), st.Totals.Requests)
		require.Equal(t, uint64(1), st.Totals.Responses[0])
	})
}

func TestMaxWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := statsConfig()
		cfg.MaxWaiting = 2
		m := newManager(t, cfg)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p, err := m.Acquire(ctx, get(t, "http://a.test/"))
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { m.Acquire(ctx, get(t, "http://a.test/")) })
		}
		synctest.Wait()
		_, err = m.Acquire(ctx, get(t, "http://a.test/"))
		require.ErrorIs(t, err, ErrTooManyWaiting)
		require.Contains(t, err.Error(), "Config.MaxWaiting 2")
		cancel()
		wg.Wait()
		p.Release(nil, nil)
	})
}

// TestMaxRefusal: a scope that has answered only 503s for longer than
// MaxRefusal fails a waiting request at once, naming the scope and when
// to retry; its own probe still goes through, and an answer resets it.
func TestMaxRefusal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := statsConfig()
		cfg.MaxRefusal = 5 * time.Minute
		m := newManager(t, cfg)
		ctx := context.Background()
		req := get(t, "http://down.test/")
		for time.Since(time.Time{}) > 0 {
			p, err := m.Acquire(ctx, req)
			if err != nil {
				var re *WaitError
				require.ErrorAs(t, err, &re)
				require.ErrorIs(t, err, ErrScopeRefusing)
				require.Equal(t, "down.test", re.Scope)
				require.False(t, re.ReadyAt.IsZero())
				require.Contains(t, err.Error(), `"down.test"`)
				require.GreaterOrEqual(t, time.Since(re.RefusingSince), 5*time.Minute)
				// Waiting until ReadyAt, the probe is admitted.
				time.Sleep(time.Until(re.ReadyAt))
				p, err = m.Acquire(ctx, req)
				require.NoError(t, err)
				p.Release(&http.Response{StatusCode: 200}, nil)
				_, err = m.Acquire(ctx, req) // answered: waits again normally
				require.NoError(t, err)
				return
			}
			p.Release(&http.Response{StatusCode: 503}, nil)
		}
	})
}

// TestHooks: every hook is called, without locks held (each calls back
// into the manager).
func TestHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var got []string
		rec := func(s string) {
			mu.Lock()
			got = append(got, s)
			mu.Unlock()
		}
		var m *ThrottlingManager
		cfg := statsConfig()
		cfg.Default.Concurrency = 4
		cfg.Hooks = hooks.Hooks{
			Admitted: func(e hooks.Admitted) { m.Stats(); rec(fmt.Sprintf("admitted %v waited %v", e.Scopes, e.Waited)) },
			Released: func(e hooks.Released) { m.Stats(); rec(fmt.Sprintf("released %v %d", e.Scopes, e.Status)) },
			DelayChanged: func(e hooks.DelayChanged) {
				m.Stats()
				rec(fmt.Sprintf("delay %s %v->%v (%v)", e.Scope, e.OldDelay, e.NewDelay, e.Reason))
			},
			Backoff: func(e hooks.Backoff) { m.Stats(); rec(fmt.Sprintf("backoff %s %d", e.Scope, e.Status)) },
			GateSet: func(e hooks.GateSet) { m.Stats(); rec(fmt.Sprintf("gate %s +%v", e.Scope, time.Until(e.Until))) },
		}
		m = newManager(t, cfg)
		ctx := context.Background()
		req := get(t, "http://h.test/")
		p, err := m.Acquire(ctx, req)
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"30"}}}, nil)
		p, err = m.Acquire(ctx, req)
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 200}, nil)
		require.Equal(t, []string{
			"admitted [h.test] waited 0s",
			"delay h.test 1s->2s (backoff)",
			"backoff h.test 429",
			"gate h.test +30s",
			"released [h.test] 429",
			"admitted [h.test] waited 30s",
			"released [h.test] 200",
		}, got)
	})
}

// TestWarnings: each warning once, in words, to the log and the hook.
func TestWarnings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log bytes.Buffer
		var hooked []hooks.Warning
		cfg := statsConfig()
		cfg.Default.Concurrency, cfg.Default.Delay = 16, time.Second
		cfg.Default.AutoThrottle.TargetConcurrency = 32
		cfg.Default.AutoThrottle.Enabled = true
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
		cfg.Hooks.Warning = func(e hooks.Warning) { hooked = append(hooked, e) }
		m := newManager(t, cfg)
		ctx := context.Background()
		for _, host := range []string{"a.test", "b.test"} {
			for range 2 * ineffectiveAfter {
				p, err := m.Acquire(ctx, get(t, "http://"+host+"/"))
				require.NoError(t, err)
				time.Sleep(200 * time.Millisecond) // a request takes 200 ms; the delay is 1 s or more
				p.Release(&http.Response{StatusCode: 200}, nil)
			}
		}
		out := log.String()
		require.Equal(t, 1, strings.Count(out, "TargetConcurrency 32 exceeds Concurrency 16"), out)
		require.Equal(t, 1, strings.Count(out, "Concurrency 16 has had no effect"), out)
		require.Contains(t, out, "never more than 1 was in flight")
		require.Len(t, hooked, 2)
		require.Equal(t, "a.test", hooked[1].Scope)
	})
}

// TestHooksCarryTheRequestContext: the Admitted and Released events carry
// the request's context (and URL), so a hook can tie a wait to the
// caller's trace; a request without a context of its own gets
// context.Background(), never nil.
func TestHooksCarryTheRequestContext(t *testing.T) {
	type key struct{}
	var admitted, released []context.Context
	cfg := plainConfig()
	cfg.Hooks.Admitted = func(ev hooks.Admitted) { admitted = append(admitted, ev.Context) }
	cfg.Hooks.Released = func(ev hooks.Released) { released = append(released, ev.Context) }
	m := newManager(t, cfg)
	ctx := context.WithValue(context.Background(), key{}, "trace-1")
	req := get(t, "http://a.example/").WithContext(ctx)
	p, err := m.Acquire(ctx, req)
	require.NoError(t, err)
	p.Release(ok200, nil)
	require.Len(t, admitted, 1)
	require.Len(t, released, 1)
	require.Equal(t, "trace-1", admitted[0].Value(key{}))
	require.Equal(t, "trace-1", released[0].Value(key{}))

	p, _, err = m.TryAcquire(get(t, "http://b.example/"))
	require.NoError(t, err)
	p.Release(ok200, nil)
	require.Len(t, released, 2)
	require.NotNil(t, released[1])
	require.Nil(t, released[1].Value(key{}))
}
