package throttle

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadyQueueClose: Close returns the requests still queued, in push
// order, wherever they were (ready, waiting for a delay, parked for a
// slot, waiting for robots.txt); every Pop blocked in the queue returns
// ErrQueueClosed at once; Push, Pop and TryPop return it afterwards; a
// permit popped before is released as usual; a second Close returns
// nothing; the robots.txt fetch in flight ends on its own, and no
// goroutine is left (synctest.Test fails on one blocked for good).
func TestReadyQueueClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{robots: map[string]hostRobots{"slow.example": {status: 404, latency: 5 * time.Second}}, def: hostRobots{status: 404}}
		m, q := robotsQueue(t, site, func(c *Config) { c.Default.Delay, c.Default.Concurrency = 10*time.Second, 1 })
		var pushed []*http.Request
		push := func(u string) {
			req := get(t, u)
			require.NoError(t, q.Push(req, 0))
			pushed = append(pushed, req)
		}
		push("http://a.example/0")
		push("http://slow.example/0") // waits for robots.txt
		push("http://a.example/1")    // waits for a's slot, then its delay
		push("http://b.example/0")
		var p *Permit // a's, whose slot stays taken
		for range 2 { // a/0 and b/0, in the order their robots.txt came
			req, p1, err := q.Pop(context.Background())
			require.NoError(t, err)
			if req.URL.Host == "a.example" {
				p = p1
				continue
			}
			assert.Equal(t, "http://b.example/0", req.URL.String())
			p1.Release(ok200, nil)
		}
		require.NotNil(t, p)
		push("http://b.example/1") // waits for b's delay

		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 3)
		for range 3 {
			wg.Go(func() {
				req, p, err := q.Pop(context.Background())
				assert.Nil(t, req)
				assert.Nil(t, p)
				errs <- err
			})
		}
		time.Sleep(time.Second)
		synctest.Wait() // all three blocked
		left := q.Close()
		wg.Wait()
		close(errs)
		for err := range errs {
			assert.ErrorIs(t, err, ErrQueueClosed)
		}
		assert.Equal(t, time.Second, time.Since(t0), "the blocked Pops returned at once")
		assert.Equal(t, []*http.Request{pushed[1], pushed[2], pushed[4]}, left, "the requests still queued, in push order")
		assert.Equal(t, 0, q.Len())

		assert.Nil(t, q.Close(), "idempotent")
		assert.ErrorIs(t, q.Push(get(t, "http://c.example/"), 0), ErrQueueClosed)
		assert.Equal(t, 0, q.Len())
		req, p2, at, err := q.TryPop()
		assert.ErrorIs(t, err, ErrQueueClosed)
		assert.Nil(t, req)
		assert.Nil(t, p2)
		assert.True(t, at.IsZero())
		_, _, err = q.Pop(context.Background())
		assert.ErrorIs(t, err, ErrQueueClosed)

		p.Release(ok200, nil)
		time.Sleep(10 * time.Second) // the robots.txt fetch ends
		synctest.Wait()
		st := m.Stats()
		assert.Zero(t, st.InFlight)
		assert.Zero(t, st.Waiting)
		assert.Equal(t, uint64(3), st.Totals.Robots, "a, b and slow")
	})
}

// TestReadyQueueCloseRace: Close while workers push and pop loses no
// request: each one pushed is popped once or returned by Close once.
func TestReadyQueueCloseRace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = 100 * time.Millisecond
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		var (
			mu      sync.Mutex
			counted = map[*http.Request]int{}
			pushed  []*http.Request
		)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() { // pushers
				for i := 0; ; i++ {
					req := get(t, fmt.Sprintf("http://h%d.example/%d", i%50, w*1000+i))
					if err := q.Push(req, 0); err != nil {
						assert.ErrorIs(t, err, ErrQueueClosed)
						return
					}
					mu.Lock()
					pushed = append(pushed, req)
					mu.Unlock()
					time.Sleep(7 * time.Millisecond)
				}
			})
			wg.Go(func() { // poppers
				for {
					req, p, err := q.Pop(context.Background())
					if err != nil {
						assert.ErrorIs(t, err, ErrQueueClosed)
						return
					}
					mu.Lock()
					counted[req]++
					mu.Unlock()
					p.Release(ok200, nil)
				}
			})
		}
		time.Sleep(3 * time.Second)
		left := q.Close()
		wg.Wait()
		for _, r := range left {
			counted[r]++
		}
		require.NotEmpty(t, left)
		require.Greater(t, len(pushed), len(left))
		for _, r := range pushed {
			assert.Equal(t, 1, counted[r], r.URL.String())
		}
		assert.Len(t, counted, len(pushed))
	})
}
