package throttle

import (
	"math"
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
