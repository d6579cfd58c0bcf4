package throttle_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFakeClockMovedBackAnHour (issue 14 item 7): with a Config.Clock
// moved back one hour after a start, the next start waits the scope's
// delay (2 s), not an hour and 2 s.
func TestFakeClockMovedBackAnHour(t *testing.T) {
	clk := throttletest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	cfg := throttle.DefaultConfig()
	cfg.Clock = clk
	cfg.Robots.Enabled = false // a made-up host
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 2*time.Second, 0, throttle.Jitter{}
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodGet, "http://a.example/", nil)
	ctx := context.Background()

	p, err := m.Acquire(ctx, req)
	require.NoError(t, err)
	first := p.Acquired()
	p.Release(throttletest.Response(req, http.StatusOK, ""), nil)

	clk.Advance(-time.Hour)
	done := make(chan *throttle.Permit, 1)
	go func() {
		p, err := m.Acquire(ctx, req)
		assert.NoError(t, err)
		done <- p
	}()
	clk.BlockUntilTimers(1)
	next, _ := clk.Next()
	assert.LessOrEqual(t, next.Sub(clk.Now()), 2*time.Second, "the next start waits at most the scope's delay")
	clk.AdvanceToNext()
	p = <-done
	require.NotNil(t, p)
	assert.Equal(t, 2*time.Second, p.Acquired().Sub(first), "the manager's time went on from where it was")
	p.Release(throttletest.Response(req, http.StatusOK, ""), nil)
}
