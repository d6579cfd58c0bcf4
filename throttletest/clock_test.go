package throttletest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestClockFiresInOrderAtTheirTimes(t *testing.T) {
	c := NewClock(t0)
	a, b := c.NewTimer(2*time.Second), c.NewTimer(time.Second)
	assert.Equal(t, 2, c.Timers())
	next, ok := c.Next()
	require.True(t, ok)
	assert.Equal(t, t0.Add(time.Second), next)
	c.Advance(1500 * time.Millisecond)
	assert.Equal(t, t0.Add(time.Second), <-b.C(), "a timer receives its own time")
	select {
	case <-a.C():
		t.Fatal("fired early")
	default:
	}
	assert.Equal(t, t0.Add(1500*time.Millisecond), c.Now())
	assert.True(t, c.AdvanceToNext())
	assert.Equal(t, t0.Add(2*time.Second), <-a.C())
	assert.Equal(t, t0.Add(2*time.Second), c.Now())
	assert.False(t, c.AdvanceToNext(), "nothing pending")
}

func TestClockStopResetNoStaleValue(t *testing.T) {
	c := NewClock(t0)
	tm := c.NewTimer(time.Second)
	c.Advance(time.Second) // fired, value waiting in the channel
	assert.False(t, tm.Reset(time.Second), "was not active")
	select {
	case <-tm.C():
		t.Fatal("stale value after Reset")
	default:
	}
	assert.True(t, tm.Stop())
	c.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	c.Set(t0) // never backwards
	assert.Equal(t, t0.Add(time.Second+time.Hour), c.Now())
	z := c.NewTimer(0)
	assert.Equal(t, c.Now(), <-z.C(), "a zero timer fires at once")
}

func TestBlockUntilTimersWithManager(t *testing.T) {
	c := NewClock(t0)
	cfg := throttle.DefaultConfig()
	cfg.Clock = c
	cfg.Default.Jitter = throttle.Jitter{}
	cfg.Robots.Enabled = false
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)
	p, err := m.Acquire(context.Background(), req)
	require.NoError(t, err)
	p.Release(&http.Response{StatusCode: 200}, nil)
	got := make(chan time.Time, 3)
	for range 3 {
		go func() {
			p, err := m.Acquire(context.Background(), req)
			if assert.NoError(t, err) {
				got <- c.Now()
				p.Release(&http.Response{StatusCode: 200}, nil)
			}
		}()
	}
	for i := 1; i <= 3; i++ {
		c.BlockUntilTimers(1)
		c.AdvanceToNext()
		assert.Equal(t, t0.Add(time.Duration(i)*time.Second), <-got)
	}
}

func TestResponse(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)
	rt := RoundTripFunc(func(r *http.Request) (*http.Response, error) {
		return Response(r, 429, "slow down", "Retry-After", "30"), nil
	})
	resp, err := rt.RoundTrip(req)
	require.NoError(t, err)
	assert.Equal(t, 429, resp.StatusCode)
	assert.Equal(t, "30", resp.Header.Get("Retry-After"))
	assert.Same(t, req, resp.Request)
	assert.EqualValues(t, 9, resp.ContentLength)
}

// TestClockSetBackKeepsTimers: Advance with a negative d sets the clock
// back; pending timers keep the time they had left, as a time.Timer does
// when the wall clock is set back.
func TestClockSetBackKeepsTimers(t *testing.T) {
	c := NewClock(t0)
	a, b := c.NewTimer(2*time.Second), c.NewTimer(time.Second)
	c.Advance(-time.Hour)
	assert.Equal(t, t0.Add(-time.Hour), c.Now())
	next, ok := c.Next()
	require.True(t, ok)
	assert.Equal(t, t0.Add(-time.Hour+time.Second), next, "1 s left, as before")
	fired := func(tm throttle.Timer) (time.Time, bool) {
		select {
		case v := <-tm.C():
			return v, true
		default:
			return time.Time{}, false
		}
	}
	c.Advance(time.Second)
	v, ok := fired(b)
	require.True(t, ok, "the 1 s timer fires 1 s after the jump")
	assert.Equal(t, t0.Add(-time.Hour+time.Second), v)
	_, ok = fired(a)
	require.False(t, ok, "fired early")
	c.Advance(time.Second)
	v, ok = fired(a)
	require.True(t, ok, "the 2 s timer fires 2 s after the jump")
	assert.Equal(t, t0.Add(-time.Hour+2*time.Second), v)
	assert.Zero(t, c.Timers())
}
