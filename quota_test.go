package throttle

import (
	"context"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func quotaConfig(quota int64, window time.Duration) ScopeConfig {
	cfg := backoffConfig()
	cfg.Concurrency = 100
	cfg.Quota = quota
	cfg.Window = window
	return cfg
}

// TestQuotaWindowBoundariesExact: costs admitted in a window never exceed
// the quota; the next window opens exactly Window after the first start,
// also when that start is at the clock's zero.
func TestQuotaWindowBoundariesExact(t *testing.T) {
	for _, start := range []time.Time{{}, time.Unix(0, 0), time.Unix(1_700_000_000, 123)} {
		p := newPolicy(t, quotaConfig(3, time.Minute))
		p.now = start
		for i := 0; i < 3; i++ {
			require.Equal(t, ReasonNone, p.s.Admit(p.now, 1).Reason, "start %v, request %d", start, i)
			p.s.Start(p.now, 1)
			p.now = p.now.Add(10 * time.Second)
		}
		a := p.s.Admit(p.now, 1)
		assert.Equal(t, ReasonQuota, a.Reason)
		assert.Equal(t, start.Add(time.Minute), a.At, "the window ends exactly a minute after the first start")
		p.now = start.Add(time.Minute - time.Nanosecond)
		assert.Equal(t, ReasonQuota, p.s.Admit(p.now, 1).Reason, "a nanosecond before")
		p.now = start.Add(time.Minute)
		assert.Equal(t, ReasonNone, p.s.Admit(p.now, 1).Reason, "at the boundary")
		// Windows follow back to back, even after idle ones.
		p.s.Start(start.Add(5*time.Minute+30*time.Second), 3)
		a = p.s.Admit(start.Add(5*time.Minute+40*time.Second), 1)
		assert.Equal(t, start.Add(6*time.Minute), a.At)
	}
}

func TestQuotaCosts(t *testing.T) {
	p := newPolicy(t, quotaConfig(10, time.Minute))
	p.s.Start(p.now, 7)
	assert.Equal(t, ReasonNone, p.s.Admit(p.now, 3).Reason, "7+3 fits 10")
	assert.Equal(t, ReasonQuota, p.s.Admit(p.now, 4).Reason, "7+4 does not")
}

// One request larger than the whole quota is admitted into an empty
// window, never starved.
func TestQuotaOversizeRequestAdmittedIntoEmptyWindow(t *testing.T) {
	p := newPolicy(t, quotaConfig(10, time.Minute))
	assert.Equal(t, ReasonNone, p.s.Admit(p.now, 25).Reason)
	p.s.Start(p.now, 25)
	a := p.s.Admit(p.now, 1)
	assert.Equal(t, ReasonQuota, a.Reason)
	assert.Equal(t, ReasonNone, p.s.Admit(a.At, 25).Reason, "again in the next empty window")
}

func TestQuotaCorrections(t *testing.T) {
	t.Run("actual cost replaces the estimate", func(t *testing.T) {
		p := newPolicy(t, quotaConfig(10, time.Minute))
		tk := p.s.Start(p.now, 5)
		p.s.Start(p.now, 5)
		assert.Equal(t, ReasonQuota, p.s.Admit(p.now, 1).Reason)
		p.s.Finish(p.now, tk, &Feedback{Status: 200, Quota: []QuotaUse{{Cost: 1, HasCost: true}}})
		assert.Equal(t, int64(6), p.s.adm.Quota.Used)
		assert.Equal(t, ReasonNone, p.s.Admit(p.now, 4).Reason)
	})
	t.Run("server's remaining raises the count", func(t *testing.T) {
		p := newPolicy(t, quotaConfig(10, time.Minute))
		tk := p.s.Start(p.now, 1)
		p.s.Finish(p.now, tk, &Feedback{Status: 200, Quota: []QuotaUse{{Remaining: 2, HasRemaining: true}}})
		assert.Equal(t, int64(8), p.s.adm.Quota.Used)
		assert.Equal(t, ReasonNone, p.s.Admit(p.now, 2).Reason)
		assert.Equal(t, ReasonQuota, p.s.Admit(p.now, 3).Reason)
	})
	t.Run("a correction names its scope", func(t *testing.T) {
		p := newPolicy(t, quotaConfig(10, time.Minute)) // key "s"
		tk := p.s.Start(p.now, 5)
		p.s.Finish(p.now, tk, &Feedback{Status: 200, Quota: []QuotaUse{{Scope: "other", Cost: 0, HasCost: true}}})
		assert.Equal(t, int64(5), p.s.adm.Quota.Used)
	})
	t.Run("a cost for a past window is dropped", func(t *testing.T) {
		p := newPolicy(t, quotaConfig(10, time.Minute))
		tk := p.s.Start(p.now, 5)
		p.now = p.now.Add(61 * time.Second)
		p.s.Start(p.now, 2)
		p.s.Finish(p.now, tk, &Feedback{Status: 200, Quota: []QuotaUse{{Cost: 1, HasCost: true}}})
		assert.Equal(t, int64(2), p.s.adm.Quota.Used)
	})
	t.Run("remaining after the window ended counts in the new one", func(t *testing.T) {
		p := newPolicy(t, quotaConfig(10, time.Minute))
		tk := p.s.Start(p.now, 1)
		p.now = p.now.Add(61 * time.Second)
		p.s.Finish(p.now, tk, &Feedback{Status: 200, Quota: []QuotaUse{{Remaining: 0, HasRemaining: true}}})
		assert.Equal(t, ReasonQuota, p.s.Admit(p.now, 1).Reason)
	})
}

// TestQuotaThroughManager: the cost of each request, from the context,
// counted per scope; waits end exactly at the window's end.
func TestQuotaThroughManager(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 10
		credits := cfg.Default
		credits.Quota, credits.Window = 100, 10*time.Second
		cfg.Scopes = map[string]ScopeConfig{"credits": credits}
		m := newManager(t, cfg)
		ctx := WithScopes(context.Background(), Scope{Key: "api"}, Scope{Key: "credits", Cost: 30})
		t0 := time.Now()
		var starts []time.Duration
		for range 7 {
			p, err := m.Acquire(ctx, get(t, "http://api/"))
			require.NoError(t, err)
			starts = append(starts, time.Since(t0))
			p.Release(&http.Response{StatusCode: 200}, nil)
		}
		assert.Equal(t, []time.Duration{0, 0, 0, 10 * time.Second, 10 * time.Second, 10 * time.Second, 20 * time.Second}, starts)
	})
}
