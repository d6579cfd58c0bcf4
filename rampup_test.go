package throttle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func rampConfig() ScopeConfig {
	cfg := backoffConfig()
	cfg.Delay = time.Second
	cfg.Rampup.Enabled = true
	cfg.Rampup.MaxConcurrency = 4
	return cfg
}

// quietWindow sends a request and lets a window pass without signals.
func (p *policy) quietWindow() {
	p.request(10*ms, ok)
	p.advance(p.s.cfg.Window)
}

// TestRampupLadderIsFinite: the delay halves to its floor in a finite
// number of windows (the last step lands on the floor exactly) with the
// configured concurrency; then the concurrency rises (slow start: 1, 2, 4
// ... slots a window) to the cap and stops there.
func TestRampupLadderIsFinite(t *testing.T) {
	for _, c := range []struct {
		name   string
		floor  time.Duration
		delays []time.Duration
	}{
		{"floor 0", 0, []time.Duration{500 * ms, 250 * ms, 125 * ms, 62500 * time.Microsecond, 31250 * time.Microsecond,
			15625 * time.Microsecond, 7812500, 3906250, 1953125, 0}},
		{"floor 100ms", 100 * ms, []time.Duration{500 * ms, 250 * ms, 125 * ms, 100 * ms}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := rampConfig()
			cfg.Rampup.MinDelay = c.floor
			p := newPolicy(t, cfg)
			p.advance(0)
			var got []time.Duration
			for range c.delays {
				assert.Equal(t, 1, p.s.concurrency(), "delay first")
				p.quietWindow()
				got = append(got, p.delay())
			}
			assert.Equal(t, c.delays, got)
			var conc []int
			for range 5 {
				p.quietWindow()
				conc = append(conc, p.s.concurrency())
				assert.Equal(t, c.floor, p.delay())
			}
			for i := range conc {
				assert.LessOrEqual(t, conc[i], 4, "never above the cap")
				if i > 0 {
					assert.GreaterOrEqual(t, conc[i], conc[i-1])
				}
			}
			assert.Equal(t, 4, conc[len(conc)-1], "up to the cap")
		})
	}
}

// TestRampupPacesTheConcurrencyPhase: past the delay phase, starts are
// spaced by latency / concurrency, so slots don't open in lockstep.
func TestRampupPacesTheConcurrencyPhase(t *testing.T) {
	cfg := rampConfig()
	cfg.Rampup.MaxConcurrency = 8
	p := newPolicy(t, cfg)
	p.advance(0)
	for range 12 {
		p.request(0, Feedback{Status: 200, Latency: 2 * time.Second})
		p.advance(cfg.Window)
	}
	c := p.s.concurrency()
	assert.Equal(t, 8, c)
	assert.Equal(t, 2*time.Second/8, p.delay(), "latency / concurrency")
	// Half-way between two concurrencies, the pace is half-way too.
	p.s.rampup.setLevel(p.now, p.s.rampup.k+2.5) // x = 1 + 2.5
	p.s.refresh()
	assert.Equal(t, 4, p.s.concurrency())
	assert.InDelta(t, float64(2*time.Second)/3.5, float64(p.delay()), 1)
}

func TestRampupCapDefaultsToGlobalConcurrency(t *testing.T) {
	cfg := rampConfig()
	cfg.Rampup.MaxConcurrency = 0
	cfg.Delay = 0
	p := newPolicy(t, cfg) // GlobalConcurrency 16
	p.advance(0)
	for range 30 {
		p.quietWindow()
	}
	assert.Equal(t, 16, p.s.concurrency())
}

// TestRampupSettles: a server that refuses more than 4 req/s. Rampup
// climbs, steps back on a signal, bisects between the last good and first
// bad level, and ends near the limit with about one signal per window.
func TestRampupSettles(t *testing.T) {
	cfg := rampConfig()
	p := newPolicy(t, cfg)
	p.advance(0)
	limit := 4.0 // req/s the server allows
	var rates []float64
	var perWindow []int
	for w := 0; w < 40; w++ {
		end := p.now.Add(cfg.Window)
		signals, oks := 0, 0
		for p.now.Before(end) {
			d := p.delay()
			rate := float64(p.s.concurrency()) / max(d.Seconds(), 0.01)
			fb := ok
			if rate > limit {
				fb = tooMany
				signals++
			} else {
				oks++
			}
			p.request(0, fb)
			p.now = p.now.Add(max(p.delay(), 10*ms))
			p.s.tick(p.now)
		}
		perWindow = append(perWindow, signals)
		rates = append(rates, float64(oks)/cfg.Window.Seconds())
	}
	var sum float64
	sig := 0
	for i := 20; i < 40; i++ {
		sum += rates[i]
		sig += perWindow[i]
	}
	mean := sum / 20
	assert.GreaterOrEqual(t, mean, 0.95*limit, "rates per window %v", rates)
	assert.LessOrEqual(t, mean, limit)
	assert.LessOrEqual(t, float64(sig)/20, 1.5, "about the target of 1 signal per window: %v", perWindow)
	t.Logf("rate per window %.2f, signals %v", rates, perWindow)
}

// At level 0 rampup can't step down: the signal goes to backoff.
func TestRampupAtFloorLeavesSignalToBackoff(t *testing.T) {
	p := newPolicy(t, rampConfig())
	p.request(0, tooMany)
	assert.Equal(t, 2*time.Second, p.delay(), "backoff stepped")
}

func TestRampupValidation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Default.Rampup.MinSignals = 0
	_, err := New(cfg)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Default.Rampup.MinSignals", ce.Field)
	cfg = DefaultConfig()
	cfg.Default.Rampup.MaxSignals = 0
	_, err = New(cfg)
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "Default.Rampup.MaxSignals", ce.Field)
}
