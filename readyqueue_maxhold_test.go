package throttle

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadyQueueMaxHoldReclaimInPop: with MaxHold, the TryAcquire a pop
// makes may reclaim a permit held too long, and so release it on the
// popping goroutine, while the queue's lock is held: the queue's release
// hook waited for that lock, and the pop deadlocked. The release now
// waits in the queue's pending list for the attempt to take it: the pop
// returns, and the group parked on the reclaimed slot is handed out by
// the next.
// (The clock is a step clock, and TryPop makes no timer; the real-time
// bound only turns a deadlock into a failure.)
func TestReadyQueueMaxHoldReclaimInPop(t *testing.T) {
	clk := &stepClock{t: time.Unix(1e9, 0)}
	cfg := plainConfig()
	cfg.Clock = clk
	cfg.MaxHold = time.Minute
	cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
	m := newManager(t, cfg)
	q := NewReadyQueue(m)
	require.NoError(t, q.Push(get(t, "http://a.example/1"), 0))
	require.NoError(t, q.Push(get(t, "http://a.example/2"), 0))
	req, p, _, err := q.TryPop()
	require.NoError(t, err)
	require.NotNil(t, p, "a/1, whose permit is never released")
	assert.Equal(t, "http://a.example/1", req.URL.String())
	req, p2, _, err := q.TryPop()
	require.NoError(t, err)
	require.Nil(t, req, "a/2 waits for a's slot: parked")
	require.Nil(t, p2)

	clk.t = clk.t.Add(2 * time.Minute) // a/1 held past MaxHold
	require.NoError(t, q.Push(get(t, "http://b.example/1"), 0))
	done := make(chan []string, 1)
	go func() { // b/1's TryAcquire reclaims a/1
		var got []string
		for range 2 {
			req, p, _, err := q.TryPop()
			if err != nil || p == nil {
				got = append(got, fmt.Sprint(err))
				continue
			}
			got = append(got, req.URL.String())
			p.Release(ok200, nil)
		}
		done <- got
	}()
	select {
	case got := <-done:
		assert.Equal(t, []string{"http://b.example/1", "http://a.example/2"}, got)
	case <-time.After(10 * time.Second):
		t.Fatal("TryPop deadlocked: the release hook waited for the lock its own pop held")
	}
	p.Release(ok200, nil) // reclaimed already: nothing
	assert.Zero(t, m.Stats().InFlight)
}
