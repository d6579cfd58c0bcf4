package throttle

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
