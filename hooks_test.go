package throttle

// The hooks, hostile pass (issue 22 item 9): hooks that panic, block, are
// slow, or call back into the manager.

import (
	"bytes"
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/stretchr/testify/require"
)

// TestPanickingHookInReclaimLosesNoSlot: MaxHold reclaims two permits at
// once, and a hook the reclaim calls panics (the Warning hook, at the
// first reclaim's warning; or the Released hook): both slots come back,
// and the panic reaches the caller whose Acquire reclaimed them.
func TestPanickingHookInReclaimLosesNoSlot(t *testing.T) {
	for _, hook := range []string{"Warning", "Released"} {
		t.Run(hook, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var panics atomic.Bool
				boom := func() {
					if panics.Load() {
						panic(hook)
					}
				}
				cfg := plainConfig()
				cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 2
				cfg.MaxHold = 10 * time.Second
				switch hook {
				case "Warning":
					cfg.Hooks.Warning = func(hooks.Warning) { boom() }
				case "Released":
					cfg.Hooks.Released = func(hooks.Released) { boom() }
				}
				m := newManager(t, cfg)
				req := get(t, "http://a.test/")
				for range 2 {
					_, err := m.Acquire(context.Background(), req) // held, never released
					require.NoError(t, err)
				}
				time.Sleep(11 * time.Second)
				panics.Store(true)
				require.Equal(t, hook, mustPanic(t, func() { m.TryAcquire(req) }))
				panics.Store(false)
				require.Zero(t, m.Stats().InFlight, "both permits reclaimed")
				p, _, err := m.TryAcquire(get(t, "http://b.test/"))
				require.NoError(t, err)
				require.NotNil(t, p)
				p.ReleaseFeedback(Feedback{NoAdjust: true})
			})
		})
	}
}

// TestPanickingHookWhileWaitingLeavesNoGhost: a caller waiting for a slot
// wakes, reclaims a permit held past MaxHold, and a hook panics in it.
// The panic reaches that caller, who leaves the scope's queue: the next
// caller is not held behind a waiter that is gone.
func TestPanickingHookWhileWaitingLeavesNoGhost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panics atomic.Bool
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.MaxHold = 10 * time.Second
		cfg.Hooks.Released = func(hooks.Released) {
			if panics.Load() {
				panic("released")
			}
		}
		m := newManager(t, cfg)
		req := get(t, "http://a.test/")
		_, err := m.Acquire(context.Background(), req) // held, never released
		require.NoError(t, err)
		panics.Store(true)
		got := make(chan any, 1)
		go func() {
			defer func() { got <- recover() }()
			p, err := m.Acquire(context.Background(), req)
			got <- err
			p.ReleaseFeedback(Feedback{NoAdjust: true})
		}()
		synctest.Wait()
		require.Equal(t, 1, m.Waiting())
		time.Sleep(10 * time.Second) // the waiter wakes and reclaims the held permit
		synctest.Wait()
		require.Equal(t, "released", <-got)
		panics.Store(false)
		require.Zero(t, m.Waiting())
		p, adm, err := m.TryAcquire(req)
		require.NoError(t, err)
		require.NotNil(t, p, "the next caller starts at once, not behind the one gone: %+v", adm)
		p.ReleaseFeedback(Feedback{NoAdjust: true})
	})
}

// TestPanickingPolicyHookKeepsTheOthers: a DelayChanged hook that panics
// does not keep the release's other hooks from their events (Backoff,
// GateSet, Released), and its panic reaches Release's caller after them.
func TestPanickingPolicyHookKeepsTheOthers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var backoffs, gates, released atomic.Int32
		cfg := plainConfig()
		cfg.Default.Backoff.Jitter = Jitter{}
		cfg.Hooks = hooks.Hooks{
			DelayChanged: func(hooks.DelayChanged) { panic("delay changed") },
			Backoff:      func(hooks.Backoff) { backoffs.Add(1) },
			GateSet:      func(hooks.GateSet) { gates.Add(1) },
			Released:     func(hooks.Released) { released.Add(1) },
		}
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.test/"))
		require.NoError(t, err)
		resp := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"30"}}}
		require.Equal(t, "delay changed", mustPanic(t, func() { p.Release(resp, nil) }))
		require.Equal(t, []int32{1, 1, 1}, []int32{backoffs.Load(), gates.Load(), released.Load()},
			"Backoff, GateSet and Released each heard of the release")
		require.Zero(t, m.Stats().InFlight)
	})
}

// TestSlowReleasedHookDoesNotHoldPop: a Released hook that blocks holds
// its own caller only. A ReadyQueue's Pop waiting for the slot the
// release freed gets it while the hook still runs, as an Acquire does.
func TestSlowReleasedHookDoesNotHoldPop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var block atomic.Bool
		unblock := make(chan struct{})
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Hooks.Released = func(hooks.Released) {
			if block.Load() {
				<-unblock
			}
		}
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		p, err := m.Acquire(context.Background(), get(t, "http://a/held"))
		require.NoError(t, err)
		require.NoError(t, q.Push(get(t, "http://a/next"), 0))
		popped := make(chan *Permit, 1)
		go func() {
			_, p2, err := q.Pop(context.Background())
			if err != nil {
				t.Error(err)
			}
			popped <- p2
		}()
		synctest.Wait() // Pop waits for the slot
		block.Store(true)
		released := make(chan struct{})
		go func() {
			p.Release(nil, nil)
			close(released)
		}()
		synctest.Wait()
		var p2 *Permit
		select {
		case p2 = <-popped:
		default:
			t.Error("Pop waits for the Released hook of the release that freed its slot")
		}
		close(unblock)
		<-released
		if p2 == nil {
			p2 = <-popped
		}
		block.Store(false)
		p2.Release(nil, nil)
	})
}

// TestHooksCallBackIntoManager: every hook calls back into the manager
// (Stats, Export, TryAcquire and Release in another scope, Waiting, Len)
// on events from Acquire, Release, a gate, a backoff, MaxHold's reclaim
// and the warning about many waiters: nothing deadlocks, and the
// callbacks see the manager as it is.
func TestHooksCallBackIntoManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var m *ThrottlingManager
		var calls atomic.Int32
		callBack := func() {
			calls.Add(1)
			_ = m.Stats()
			_, _ = m.Waiting(), m.NumScopes()
			var buf bytes.Buffer
			if err := m.Export(&buf); err != nil {
				t.Error(err)
			}
			req, _ := http.NewRequestWithContext(WithScopeKeys(context.Background(), "other"), http.MethodGet, "http://other.test/", nil)
			if p, _, err := m.TryAcquire(req); err == nil && p != nil {
				p.ReleaseFeedback(Feedback{NoAdjust: true})
			}
		}
		seen := map[string]*atomic.Int32{}
		for _, k := range []string{"admitted", "released", "delay", "backoff", "gate", "warning"} {
			seen[k] = new(atomic.Int32)
		}
		hit := func(k string) { seen[k].Add(1); callBack() }
		cfg := plainConfig()
		cfg.Default.Backoff.Jitter = Jitter{}
		cfg.MaxHold = time.Minute
		cfg.DelayedWarnThreshold = 2
		cfg.Hooks = hooks.Hooks{
			Admitted:     func(e hooks.Admitted) { hit("admitted") },
			Released:     func(e hooks.Released) { hit("released") },
			DelayChanged: func(e hooks.DelayChanged) { hit("delay") },
			Backoff:      func(e hooks.Backoff) { hit("backoff") },
			GateSet:      func(e hooks.GateSet) { hit("gate") },
			Warning:      func(e hooks.Warning) { hit("warning") },
		}
		m = newManager(t, cfg)
		ctx := context.Background()
		req := get(t, "http://a.test/")
		p, err := m.Acquire(ctx, req)
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"5"}}}, nil)
		// Two waiters (the warning), the first of which holds its
		// permit past MaxHold (reclaimed by the second).
		done := make(chan struct{})
		for range 2 {
			go func() {
				defer func() { done <- struct{}{} }()
				p, err := m.Acquire(ctx, req)
				if err != nil {
					t.Error(err)
				}
				time.Sleep(2 * time.Minute)
				p.Release(&http.Response{StatusCode: 200}, nil)
			}()
		}
		<-done
		<-done
		for k, n := range seen {
			require.NotZero(t, n.Load(), "no %s event", k)
		}
		require.Zero(t, m.Stats().InFlight)
	})
}
