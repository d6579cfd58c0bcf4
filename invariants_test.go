package throttle

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

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
			assert.Zero(t, s.pol.(*defaultScope).adm.InFlight)
			s.mu.Unlock()
		}
		t.Logf("admitted %d requests", admitted)
	})
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
					ctx, cancel := context.WithTimeout(WithScopeKeys(context.Background(), mine...), time.Duration(r.IntN(20))*time.Second)
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
			assert.Zero(t, s.pol.(*defaultScope).adm.InFlight, k)
			s.mu.Unlock()
		}
	})
}
