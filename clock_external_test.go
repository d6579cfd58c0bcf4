package throttle_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFakeClockMovedBackAnHour (issue 14 item 7): with a Config.Clock
// moved back one hour after a start, the next start waits the scope's
// delay (2 s), not an hour and 2 s.
func TestFakeClockMovedBackAnHour(t *testing.T) {
	clk := throttletest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	m, req := clockedManager(t, clk, func(c *throttle.ScopeConfig) { c.Delay = 2 * time.Second }, false)
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

// TestClockMovedBack: whatever a Config.Clock does backwards (an hour, a
// second), with or without a Store sharing it, whether the next caller
// comes after the jump or was already waiting when it came, and whether
// it waits in Acquire or in a ReadyQueue's Pop, the next start waits at most what its rule asks (the
// delay with its jitter, the slot delay, the server's wait, the quota
// window), never the jump on top; a caller that a store's clock holds
// through the jump waits at most twice that.
func TestClockMovedBack(t *testing.T) {
	const (
		delay     = 2 * time.Second
		slotDelay = 3 * time.Second
		window    = 10 * time.Second
	)
	// The server gate: a store sees the jump only from the starts it
	// recorded, so the gate may also keep the time from the last start
	// to the response that set it (see admission.State's rebase).
	rules := []struct {
		name   string
		config func(*throttle.ScopeConfig)
		resp   func(*http.Request) *http.Response
		most   time.Duration
	}{
		{"delay with jitter", func(c *throttle.ScopeConfig) { c.Delay, c.Jitter = delay, throttle.Jitter{Min: -0.5, Max: 0.5} }, nil, delay * 3 / 2},
		{"slot delay", func(c *throttle.ScopeConfig) { c.SlotDelay = slotDelay }, nil, slotDelay},
		{"quota", func(c *throttle.ScopeConfig) { c.Quota, c.Window = 1, window }, nil, window},
		{"server gate", func(c *throttle.ScopeConfig) { c.Backoff.Jitter = throttle.Jitter{} }, func(req *http.Request) *http.Response {
			resp := throttletest.Response(req, http.StatusTooManyRequests, "")
			resp.Header.Set("Retry-After", "30")
			return resp
		}, 30*time.Second + latency},
	}
	for _, rule := range rules {
		for _, shared := range []bool{false, true} {
			for _, waiting := range []bool{false, true} {
				for _, back := range []time.Duration{time.Hour, time.Second} {
					for _, queue := range []bool{false, true} {
						name := fmt.Sprintf("%s/store=%v/waiting=%v/back=%v/queue=%v", rule.name, shared, waiting, back, queue)
						t.Run(name, func(t *testing.T) {
							testClockMovedBack(t, rule.config, rule.resp, rule.most, shared, waiting, back, queue)
						})
					}
				}
			}
		}
	}
}

// latency is the response time in testClockMovedBack.
const latency = 100 * time.Millisecond

func testClockMovedBack(t *testing.T, config func(*throttle.ScopeConfig), resp func(*http.Request) *http.Response,
	most time.Duration, shared, waiting bool, back time.Duration, queue bool) {
	clk := throttletest.NewClock(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	m, req := clockedManager(t, clk, config, shared)
	ctx := context.Background()

	p, err := m.Acquire(ctx, req)
	require.NoError(t, err)
	clk.Advance(latency)
	if resp == nil {
		resp = func(req *http.Request) *http.Response { return throttletest.Response(req, http.StatusOK, "") }
	}
	p.Release(resp(req), nil)

	if !waiting {
		clk.Advance(-back)
	}
	done := make(chan *throttle.Permit, 1)
	go func() {
		if !queue {
			p, err := m.Acquire(ctx, req)
			assert.NoError(t, err)
			done <- p
			return
		}
		q := throttle.NewReadyQueue(m)
		defer q.Close()
		assert.NoError(t, q.Push(req, 0))
		_, p, err := q.Pop(ctx)
		assert.NoError(t, err)
		done <- p
	}()
	for clk.Timers() == 0 { // the caller waits for a timer
		select {
		case p := <-done:
			t.Fatalf("started at once, at %v", p.Acquired())
		case <-time.After(time.Millisecond):
		}
	}
	if waiting {
		clk.Advance(-back)
	}
	jumped := clk.Now()
	for {
		select {
		case p := <-done:
			require.NotNil(t, p)
			waited := clk.Now().Sub(jumped)
			if shared && waiting {
				// The store's clock is the one that went back, and it
				// reads no timer: it cannot tell how long before its
				// next reading the jump came, and takes it as just now.
				// The caller waits what it had left, then at most the
				// rule's wait again.
				most *= 2
			}
			assert.LessOrEqual(t, waited, most, "the next start waits at most its rule's wait")
			p.Release(throttletest.Response(req, http.StatusOK, ""), nil)
			return
		default:
		}
		if clk.Now().Sub(jumped) > back+most {
			t.Fatalf("no start %v after the jump", clk.Now().Sub(jumped))
		}
		if !clk.AdvanceToNext() {
			time.Sleep(time.Millisecond) // the caller is between two timers
		}
	}
}

// clockedManager returns a manager on clk (and a store.Memory on clk when
// shared) whose Default is DefaultConfig's without delays or jitter, then
// changed by config, and a request to its one host.
func clockedManager(t *testing.T, clk *throttletest.Clock, config func(*throttle.ScopeConfig), shared bool) (*throttle.ThrottlingManager, *http.Request) {
	cfg := throttle.DefaultConfig()
	cfg.Clock = clk
	cfg.Robots.Enabled = false // a made-up host
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, throttle.Jitter{}
	config(&cfg.Default)
	if shared {
		cfg.Store = store.NewMemory(clk)
	}
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, "http://a.example/", nil)
	require.NoError(t, err)
	return m, req
}
