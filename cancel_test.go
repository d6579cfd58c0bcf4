package throttle

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
				assert.Zero(t, s.pol.(*defaultScope).adm.InFlight)
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
		p, err := m.Acquire(WithScopeKeys(context.Background(), "b"), get(t, "http://x/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()
		ctx, cancel := context.WithCancel(WithScopeKeys(context.Background(), "a", "b"))
		errc := make(chan error, 1)
		go func() { _, err := m.Acquire(ctx, get(t, "http://x/")); errc <- err }()
		synctest.Wait()
		got := make(chan time.Time, 1)
		go func() {
			p, err := m.Acquire(WithScopeKeys(context.Background(), "b"), get(t, "http://x/"))
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
