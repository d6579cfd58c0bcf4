package throttle

import (
	"context"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/require"
)

// TestNewRefusesInvalidConfig: New names the first invalid field; explicit
// zero is valid.
func TestNewRefusesInvalidConfig(t *testing.T) {
	for field, mutate := range map[string]func(*Config){
		"GlobalConcurrency":            func(c *Config) { c.GlobalConcurrency = 0 },
		"IdleTimeout":                  func(c *Config) { c.IdleTimeout = -time.Second },
		"LearnedIdleTimeout":           func(c *Config) { c.LearnedIdleTimeout = time.Second },
		"MaxScopes":                    func(c *Config) { c.MaxScopes = -1 },
		"DelayedWarnThreshold":         func(c *Config) { c.DelayedWarnThreshold = -1 },
		"MaxWaiting":                   func(c *Config) { c.MaxWaiting = -1 },
		"MaxRefusal":                   func(c *Config) { c.MaxRefusal = -1 },
		"MaxHold":                      func(c *Config) { c.MaxHold = -1 },
		"StoreRetry":                   func(c *Config) { c.StoreRetry = -1 },
		"Store":                        func(c *Config) { c.Store = store.NewMemory(nil); c.NewScopeManager = NewDefaultScopeManager },
		"Robots.MaxOrigins":            func(c *Config) { c.Robots.MaxOrigins = -1 },
		"Robots.MaxBytes":              func(c *Config) { c.Robots.MaxBytes = -1 },
		"Default.Concurrency":          func(c *Config) { c.Default.Concurrency = 0 },
		"Default.Delay":                func(c *Config) { c.Default.Delay = -time.Millisecond },
		`Scopes["a.test"].Concurrency`: func(c *Config) { s := c.Default; s.Concurrency = -3; c.Scopes = map[string]ScopeConfig{"a.test": s} },
		"Default.Rampup.MaxRate":       func(c *Config) { c.Default.Rampup.MaxRate = math.NaN() },
		"Default.Rampup.Max":           func(c *Config) { c.Default.Rampup.MaxRate = -1 },
		"Default.AutoThrottle.TargetConcurrency": func(c *Config) {
			c.Default.AutoThrottle.TargetConcurrency = math.NaN()
		},
	} {
		cfg := DefaultConfig()
		mutate(&cfg)
		_, err := New(cfg)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, field)
		require.ErrorIs(t, err, ErrInvalidConfig)
		require.Contains(t, ce.Field, field, "the error names the field: %v", err)
	}
	cfg := DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, Jitter{}
	_, err := New(cfg)
	require.NoError(t, err, "explicit zero is valid")
}

// TestConfigErrorShowsValue: a ConfigError names the field and shows the
// value it refused, in its Value and its message; a field without a value
// to show (a Scopes key, the list of statuses) has none.
func TestConfigErrorShowsValue(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*Config)
		value  any
		msg    string
	}{
		{func(c *Config) { c.Default.Delay = -time.Second }, -time.Second,
			"throttle: config Default.Delay = -1s: must be >= 0"},
		{func(c *Config) { c.MaxWaiting = -2 }, -2,
			"throttle: config MaxWaiting = -2: must be >= 0"},
		{func(c *Config) { c.Default.Jitter.Min = math.NaN() }, math.NaN(),
			"throttle: config Default.Jitter.Min = NaN: must be a finite number"},
		{func(c *Config) { c.Default.Backoff.Factor = 0.5 }, 0.5,
			"throttle: config Default.Backoff.Factor = 0.5: must be >= 1"},
		{func(c *Config) { c.Default.Backoff.Jitter.Max = 101 }, 101.0,
			"throttle: config Default.Backoff.Jitter.Max = 101: must be <= 100"},
		{func(c *Config) { c.Robots.TTL = -time.Minute }, -time.Minute,
			"throttle: config Robots.TTL = -1m0s: must be >= 0"},
		{func(c *Config) {
			s := c.Default
			s.SlotDelay = -time.Millisecond
			c.Scopes = map[string]ScopeConfig{"api.example.com": s}
		}, -time.Millisecond, `throttle: config Scopes["api.example.com"].SlotDelay = -1ms: must be >= 0`},
		{func(c *Config) { c.Scopes = map[string]ScopeConfig{"": c.Default} }, nil,
			`throttle: config Scopes[""]: scope key must not be empty`},
		{func(c *Config) { c.Default.Backoff.Statuses = []int{429, 42} }, nil,
			"throttle: config Default.Backoff.Statuses: 42 is not an HTTP status"},
	} {
		cfg := DefaultConfig()
		tc.mutate(&cfg)
		_, err := New(cfg)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce, tc.msg)
		require.Equal(t, tc.msg, err.Error())
		if f, ok := tc.value.(float64); ok && math.IsNaN(f) {
			v, _ := ce.Value.(float64)
			require.True(t, math.IsNaN(v), "Value %v", ce.Value)
			continue
		}
		require.Equal(t, tc.value, ce.Value, tc.msg)
	}
}

// TestConfigErrorValueOfAScopeConfigFunc: a configuration that
// ScopeConfigFunc returns shows its refused value too.
func TestConfigErrorValueOfAScopeConfigFunc(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Robots.Enabled = false
	cfg.ScopeConfigFunc = func(scope string, def ScopeConfig) (ScopeConfig, bool) {
		def.Window = -time.Second
		return def, true
	}
	m, err := New(cfg)
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodGet, "http://a.test/", nil)
	require.NoError(t, err)
	_, err = m.Acquire(context.Background(), req)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, -time.Second, ce.Value)
	require.Contains(t, err.Error(), `ScopeConfigFunc("a.test").Window = -1s: must be > 0`)
}

// TestZeroConfigPointsToDefaultConfig: the zero Config, or a literal that
// leaves a field at a zero New refuses, is told to start from
// DefaultConfig (it answered "GlobalConcurrency: must be >= 1"); a value
// set on purpose gets no such hint.
func TestZeroConfigPointsToDefaultConfig(t *testing.T) {
	_, err := New(Config{})
	require.EqualError(t, err, "throttle: config GlobalConcurrency = 0: must be >= 1 "+
		"(DefaultConfig() has 16: start from throttle.DefaultConfig() and change what you need)")

	_, err = New(Config{GlobalConcurrency: 4, Default: ScopeConfig{Delay: time.Second}})
	require.EqualError(t, err, "throttle: config Default.Concurrency = 0: must be >= 1 "+
		"(DefaultConfig() has 1: start from throttle.DefaultConfig() and change what you need)")

	cfg := DefaultConfig()
	cfg.GlobalConcurrency = -1
	_, err = New(cfg)
	require.EqualError(t, err, "throttle: config GlobalConcurrency = -1: must be >= 1")
}
