package throttle

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func atConfig(delay, maxDelay time.Duration, target float64) ScopeConfig {
	cfg := defaultScopeConfig()
	cfg.Delay = delay
	cfg.AutoThrottle.Enabled = true
	cfg.AutoThrottle.MaxDelay = maxDelay
	cfg.AutoThrottle.TargetConcurrency = target
	return cfg
}

const ms = time.Millisecond

// TestAutoThrottleRule: Scrapy's _adjust_delay, vector by vector.
func TestAutoThrottleRule(t *testing.T) {
	cases := []struct {
		name            string
		delay, maxDelay time.Duration
		target          float64
		old, latency    time.Duration
		status          int
		want            time.Duration
	}{
		{"lowers toward latency", 0, 60 * time.Second, 1, 5 * time.Second, 1 * time.Second, 200, 3 * time.Second},
		{"target wins when above the mean", 0, 60 * time.Second, 1, 1 * time.Second, 4 * time.Second, 200, 4 * time.Second},
		{"raises to latency", 0, 60 * time.Second, 1, 2 * time.Second, 3 * time.Second, 200, 3 * time.Second},
		{"target concurrency divides", 0, 60 * time.Second, 2, 5 * time.Second, 4 * time.Second, 200, 3500 * ms},
		{"target concurrency 0.5 doubles", 0, 60 * time.Second, 0.5, 1 * time.Second, 1 * time.Second, 200, 2 * time.Second},
		{"clamped to max", 0, 10 * time.Second, 1, 5 * time.Second, 30 * time.Second, 200, 10 * time.Second},
		{"clamped to the configured delay", 2 * time.Second, 60 * time.Second, 1, 3 * time.Second, 100 * ms, 200, 2 * time.Second},
		{"non-200 may raise", 0, 60 * time.Second, 1, 1 * time.Second, 5 * time.Second, 500, 5 * time.Second},
		{"non-200 may not lower", 0, 60 * time.Second, 1, 5 * time.Second, 1 * time.Second, 404, 5 * time.Second},
		{"non-200 equal stays", 0, 60 * time.Second, 1, 2 * time.Second, 2 * time.Second, 301, 2 * time.Second},
		{"zero latency halves", 0, 60 * time.Second, 1, 4 * time.Second, 0, 200, 2 * time.Second},
		{"max below configured delay: configured wins", 5 * time.Second, 1 * time.Second, 1, 5 * time.Second, 10 * time.Second, 200, 5 * time.Second},
		{"huge latency saturates, no overflow", 0, 60 * time.Second, 1e-9, time.Second, time.Hour, 200, 60 * time.Second},
		{"negative latency is zero", 0, 60 * time.Second, 1, 4 * time.Second, -time.Second, 200, 2 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := atConfig(c.delay, c.maxDelay, c.target)
			assert.Equal(t, c.want, autoThrottleDelay(&cfg, c.old, c.latency, c.status))
		})
	}
}

func TestAutoThrottleStartDelay(t *testing.T) {
	for _, c := range []struct {
		delay, start, want time.Duration
	}{
		{0, 5 * time.Second, 5 * time.Second},
		{10 * time.Second, 5 * time.Second, 10 * time.Second}, // max(Delay, StartDelay)
		{time.Second, 0, time.Second},
	} {
		cfg := atConfig(c.delay, time.Minute, 1)
		cfg.AutoThrottle.StartDelay = c.start
		var a autoThrottle
		a.configure(&cfg)
		assert.Equal(t, c.want, a.current(&cfg))
		cfg.AutoThrottle.Enabled = false
		assert.Zero(t, a.current(&cfg), "off: no delay")
	}
}

// TestAutoThrottleConverges: eight responses of 1 s latency from a start
// of 5 s halve the distance each time: 3, 2, 1.5, 1.25, ... toward 1 s.
func TestAutoThrottleConverges(t *testing.T) {
	cfg := atConfig(0, time.Minute, 1)
	var a autoThrottle
	a.configure(&cfg)
	want := []time.Duration{3000 * ms, 2000 * ms, 1500 * ms, 1250 * ms, 1125 * ms, 1062500 * time.Microsecond,
		1031250 * time.Microsecond, 1015625 * time.Microsecond}
	for i, w := range want {
		a.onAnswer(time.Time{}, &cfg, &answer{status: 200, latency: time.Second})
		assert.Equal(t, w, a.delay, "step %d", i+1)
	}
	// A 503 with low latency doesn't lower it; a transport error has no
	// latency. (A "don't adjust" response never reaches the policies:
	// learn returns before them; TestAutoThrottleDebugRecord sends one.)
	before := a.delay
	a.onAnswer(time.Time{}, &cfg, &answer{status: 503, latency: 10 * ms})
	a.onAnswer(time.Time{}, &cfg, &answer{failed: true})
	assert.Equal(t, before, a.delay)
}

func TestAutoThrottleTargetConcurrencyValidated(t *testing.T) {
	for _, v := range []float64{0, -1} {
		cfg := DefaultConfig()
		cfg.Default.AutoThrottle.TargetConcurrency = v
		_, err := New(cfg)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, "Default.AutoThrottle.TargetConcurrency", ce.Field)
	}
}

// TestAutoThrottleDebugRecord: at Debug level, one structured record per
// adjustment, like AUTOTHROTTLE_DEBUG.
func TestAutoThrottleDebugRecord(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := atConfig(0, time.Minute, 1)
	s := NewDefaultScopeManager(ScopeParams{Key: "example.com", Config: cfg, Logger: log}).(*defaultScope)
	now := time.Unix(0, 0)
	tk := s.Start(now, 1)
	s.Finish(now.Add(time.Second), tk, &Feedback{Status: 200, Latency: time.Second, Size: 1234})
	var rec map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &rec), buf.String())
	assert.Equal(t, "DEBUG", rec["level"])
	assert.Equal(t, "example.com", rec["scope"])
	assert.EqualValues(t, 0, rec["in_flight"])
	assert.EqualValues(t, 3000, rec["delay_ms"])
	assert.EqualValues(t, -2000, rec["change_ms"])
	assert.EqualValues(t, 1000, rec["latency_ms"])
	assert.EqualValues(t, 1234, rec["size"])
	// No change, no record.
	buf.Reset()
	s.Finish(now.Add(2*time.Second), s.Start(now, 1), &Feedback{Status: 200, Latency: time.Second, NoAdjust: true})
	assert.Empty(t, buf.String())
}

// TestAutoThrottleFlooredWarned: AutoThrottle switched on over a Delay of
// DefaultConfig's 1 s or more can never run faster than DefaultConfig
// (Delay is its floor): New says so at once, through the Warning hook and
// the logger, naming both settings. A Delay under 1 s leaves AutoThrottle
// room to speed up, and draws no such warning.
func TestAutoThrottleFlooredWarned(t *testing.T) {
	var log bytes.Buffer
	var w warnings
	cfg := DefaultConfig()
	cfg.Default.AutoThrottle.Enabled = true
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	cfg.Hooks.Warning = w.hook
	fast, polite, off := cfg.Default, cfg.Default, cfg.Default
	fast.Delay = 0
	polite.Delay = 2 * time.Second
	off.AutoThrottle.Enabled = false
	cfg.Scopes = map[string]ScopeConfig{"fast.example": fast, "polite.example": polite, "off.example": off}
	newManager(t, cfg)
	msgs := w.all()
	assert.Contains(t, msgs, "throttle: Default.AutoThrottle is on but Default.Delay 1s floors it: AutoThrottle never goes under Delay, "+
		"so it can only slow the scope down and never runs it faster than DefaultConfig (Delay 1s); "+
		"lower Delay (e.g. 0) for it to speed up on fast sites")
	assert.Contains(t, msgs, `Scopes["polite.example"].AutoThrottle is on but Scopes["polite.example"].Delay 2s floors it`)
	assert.Equal(t, 2, strings.Count(msgs, "floors it"), msgs)
	assert.Equal(t, 2, strings.Count(log.String(), "floors it"), log.String())

	for _, d := range []time.Duration{0, 200 * ms, 999 * ms} {
		var w warnings
		cfg := DefaultConfig()
		cfg.Default.AutoThrottle.Enabled, cfg.Default.Delay = true, d
		cfg.Hooks.Warning = w.hook
		newManager(t, cfg)
		assert.Empty(t, w.all(), "Delay %v", d)
	}
}

// TestAutoThrottleRecipeFasterOnAFastSite: the README's recipe for
// AutoThrottle (DefaultConfig, AutoThrottle on, Delay 0) runs a site that
// answers in 50 ms far faster than DefaultConfig, which starts one
// request a second, and draws no warning; AutoThrottle over
// DefaultConfig's Delay runs exactly as DefaultConfig there (after its
// slower start): that is what New warns about.
func TestAutoThrottleRecipeFasterOnAFastSite(t *testing.T) {
	crawl := func(cfg Config) (n int) {
		synctest.Test(t, func(t *testing.T) {
			cfg.JitterSeed = 1
			m := newManager(t, cfg)
			end := time.Now().Add(2 * time.Minute)
			for time.Now().Before(end) {
				p, err := m.Acquire(context.Background(), get(t, "http://fast.example/"))
				require.NoError(t, err)
				n++
				time.Sleep(50 * ms)
				p.Release(ok200, nil)
			}
		})
		return n
	}
	def := DefaultConfig()
	floored := DefaultConfig()
	floored.Default.AutoThrottle.Enabled = true
	recipe := DefaultConfig()
	recipe.Default.AutoThrottle.Enabled = true
	recipe.Default.Delay = 0
	var w warnings
	recipe.Hooks.Warning = w.hook

	nDef, nFloored, nRecipe := crawl(def), crawl(floored), crawl(recipe)
	t.Logf("starts in 2 minutes at 50 ms latency: DefaultConfig %d, AutoThrottle over Delay 1s %d, the recipe (Delay 0) %d",
		nDef, nFloored, nRecipe)
	assert.Empty(t, w.all())
	assert.Greater(t, nRecipe, 10*nDef, "the recipe goes faster than DefaultConfig")
	assert.LessOrEqual(t, nFloored, nDef, "floored at Delay: never faster than DefaultConfig")
	assert.InDelta(t, 120, nDef, 12)
}
