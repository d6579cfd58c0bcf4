package throttle

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSetScopeConfigWakesWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = time.Hour
		m := newManager(t, cfg)
		p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		t0 := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			p, err := m.Acquire(context.Background(), get(t, "http://a.example/"))
			if assert.NoError(t, err) {
				p.Release(ok200, nil)
			}
		}()
		time.Sleep(time.Second)
		sc := cfg.Default
		sc.Delay = 2 * time.Second
		require.NoError(t, m.SetScopeConfig("a.example", sc))
		<-done
		assert.Equal(t, t0.Add(2*time.Second), time.Now(), "re-evaluated with the new delay")
		sc.Delay = -1
		var ce *ConfigError
		require.ErrorAs(t, m.SetScopeConfig("a.example", sc), &ce)
		assert.Equal(t, `Scopes["a.example"].Delay`, ce.Field)
	})
}
