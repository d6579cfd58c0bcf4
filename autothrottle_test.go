package throttle

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
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
