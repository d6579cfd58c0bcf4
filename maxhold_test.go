package throttle

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMaxHoldReclaims: a permit never released (a body that never ends)
// is reclaimed after MaxHold, as a timeout, with one warning; a caller
// waiting for its slot gets it then without any other event; the late
// Release does nothing.
func TestMaxHoldReclaims(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var log bytes.Buffer
		cfg := DefaultConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter, cfg.Default.Backoff.Jitter = 0, 0, Jitter{}, Jitter{}
		cfg.MaxHold = time.Minute
		cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
		m := newManager(t, cfg)
		ctx := context.Background()
		req := get(t, "http://tarpit.test/")
		stuck, err := m.Acquire(ctx, req)
		require.NoError(t, err)
		start := time.Now()
		p, err := m.Acquire(ctx, req) // waits for stuck's slot
		require.NoError(t, err)
		require.Equal(t, time.Minute, time.Since(start))
		stuck.Release(&http.Response{StatusCode: 200}, nil) // too late: nothing
		st := m.Stats()
		require.Equal(t, 1, st.InFlight)
		require.Equal(t, uint64(1), st.Scopes[0].Counts.Responses[0], "reclaimed as an error")
		require.Equal(t, time.Second, st.Scopes[0].BackoffDelay, "a timeout: backoff")
		p.Release(&http.Response{StatusCode: 200}, nil)
		require.Zero(t, m.Stats().InFlight)

		// TryAcquire reclaims too, and the warning is given once.
		time.Sleep(time.Second) // the backoff delay
		stuck, _, _ = m.TryAcquire(req)
		require.NotNil(t, stuck)
		time.Sleep(2 * time.Minute)
		p, _, err = m.TryAcquire(req)
		require.NoError(t, err)
		require.NotNil(t, p, "slot reclaimed at TryAcquire")
		p.Release(nil, nil)
		require.Equal(t, 1, strings.Count(log.String(), "held longer than MaxHold"), log.String())
	})
}
