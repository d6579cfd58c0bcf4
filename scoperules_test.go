package throttle

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configOf returns the configuration the scope key got.
func configOf(t *testing.T, m *ThrottlingManager, key string) ScopeConfig {
	t.Helper()
	cfg, _, err := m.scopeConfig(key)
	require.NoError(t, err)
	return cfg
}

// TestScopesLiteral is what a colly user wrote: a Config.Scopes entry with
// only the fields they care about. It was refused ("Window: must be >
// 0"); now the rest comes from Default, and the scope runs at exactly
// that pace: two at once, starts 200 ms apart (Jitter{} is no jitter).
func TestScopesLiteral(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Scopes = map[string]ScopeConfig{"example.com": {Delay: 200 * time.Millisecond, Concurrency: 2}}
		m := newManager(t, cfg)
		sc := configOf(t, m, "example.com")
		def := defaultScopeConfig()
		assert.Equal(t, 2, sc.Concurrency)
		assert.Equal(t, 200*time.Millisecond, sc.Delay)
		assert.Equal(t, def.Window, sc.Window, "from Default")
		assert.Equal(t, def.Backoff, sc.Backoff, "from Default: backoff stays on")
		assert.Equal(t, def.AutoThrottle, sc.AutoThrottle)
		assert.Equal(t, def.Rampup, sc.Rampup)
		assert.Equal(t, Jitter{}, sc.Jitter, "an explicit zero: no jitter")

		t0 := time.Now()
		var starts []time.Duration
		for range 4 {
			p, err := m.Acquire(context.Background(), get(t, "http://example.com/"))
			require.NoError(t, err)
			starts = append(starts, time.Since(t0))
			p.Release(ok200, nil)
		}
		assert.Equal(t, []time.Duration{0, 200 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond}, starts)
	})
}

// TestScopesExplicitZeroMeansZero: a zero that means something stays what
// it says in a Scopes entry (no delay, no jitter, no quota), and a
// sub-config turned off on purpose stays off.
func TestScopesExplicitZeroMeansZero(t *testing.T) {
	cfg := DefaultConfig()
	off := defaultBackoffConfig()
	off.Enabled = false
	cfg.Scopes = map[string]ScopeConfig{
		"a.example": {Concurrency: 3},
		"b.example": {Backoff: off},
	}
	m := newManager(t, cfg)
	a := configOf(t, m, "a.example")
	assert.Zero(t, a.Delay)
	assert.Zero(t, a.SlotDelay)
	assert.Equal(t, Jitter{}, a.Jitter)
	assert.Zero(t, a.Quota)
	b := configOf(t, m, "b.example")
	assert.False(t, b.Backoff.Enabled, "off on purpose")
	assert.Equal(t, 1, b.Concurrency, "from Default")
}

// TestScopesGlob: a key with *, ? or [ is a pattern (path.Match) for the
// scopes that have no entry of their own, colly's DomainGlob; the exact
// key wins, then the longest pattern.
func TestScopesGlob(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scopes = map[string]ScopeConfig{
		"*.example.com":     {Delay: 2 * time.Second},
		"*.api.example.com": {Delay: 3 * time.Second},
		"www.example.com":   {Delay: 4 * time.Second},
	}
	m := newManager(t, cfg)
	for key, want := range map[string]time.Duration{
		"a.example.com":      2 * time.Second,
		"v1.api.example.com": 3 * time.Second,
		"www.example.com":    4 * time.Second,
		"example.com":        defaultScopeConfig().Delay, // "*." needs a label
		"example.org":        defaultScopeConfig().Delay,
	} {
		assert.Equal(t, want, configOf(t, m, key).Delay, key)
	}
	p, _, err := m.TryAcquire(get(t, "http://shop.example.com/"))
	require.NoError(t, err)
	require.NotNil(t, p)
	p.Release(ok200, nil)
	assert.Equal(t, 2*time.Second, m.Stats().Scopes[0].Delay)

	// A pattern set at run time applies to the scopes made after it.
	require.NoError(t, m.SetScopeConfig("*.example.org", ScopeConfig{Delay: 5 * time.Second}))
	assert.Equal(t, 5*time.Second, configOf(t, m, "x.example.org").Delay)
}

// TestScopesBadPattern: New and SetScopeConfig refuse a malformed pattern,
// naming the entry.
func TestScopesBadPattern(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Scopes = map[string]ScopeConfig{"[a-": {}}
	_, err := New(cfg)
	var ce *ConfigError
	require.True(t, errors.As(err, &ce), "%v", err)
	assert.Equal(t, `Scopes["[a-"]`, ce.Field)
	m := newManager(t, DefaultConfig())
	assert.ErrorIs(t, m.SetScopeConfig("[a-", ScopeConfig{}), ErrInvalidConfig)
}

// TestSetScopeConfigLiteral: SetScopeConfig completes its argument from
// Default the same way.
func TestSetScopeConfigLiteral(t *testing.T) {
	m := newManager(t, DefaultConfig())
	require.NoError(t, m.SetScopeConfig("example.com", ScopeConfig{Delay: 100 * time.Millisecond}))
	sc := configOf(t, m, "example.com")
	assert.Equal(t, 100*time.Millisecond, sc.Delay)
	assert.Equal(t, defaultScopeConfig().Window, sc.Window)
	assert.True(t, sc.Backoff.Enabled)
}
