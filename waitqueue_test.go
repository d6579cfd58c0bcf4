package throttle

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

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
