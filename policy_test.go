package throttle

// The coordinator reaches a scope's rules through one interface (policy.go);
// a custom ScopeManager is adapted to it (custompolicy.go). These tests pin
// what such a manager gets and what it answers as unknown.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// wrapped is a user's ScopeManager: the default policy behind a type of
// its own, so the coordinator sees a custom manager.
type wrapped struct{ ScopeManager }

func wrapDefault(p ScopeParams) ScopeManager { return wrapped{NewDefaultScopeManager(p)} }

// TestCustomPolicyRobotsDelay: a site's Crawl-delay holds for a scope whose
// ScopeManager is the user's, on every path that admits requests: the
// adapter enforces it in front of the manager's Admit, which never hears
// of robots.txt. Pages come 2 s apart, robots.txt's fetch included, though
// the scope's own Delay is 100 ms.
func TestCustomPolicyRobotsDelay(t *testing.T) {
	for _, path := range []string{"Acquire", "Transport", "ReadyQueue"} {
		t.Run(path, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				site := &startsSite{robotsTxt: "User-agent: *\nCrawl-delay: 2\n"}
				cfg := DefaultConfig()
				cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 100*time.Millisecond, 0, 4
				cfg.NewScopeManager = wrapDefault
				m, err := New(cfg)
				require.NoError(t, err)
				m.robotsTxt.client = &http.Client{Transport: m.Transport(site), CheckRedirect: limitRedirects}
				crawlPaths[path](t, m, site, 20)

				gaps := site.gaps()
				require.Len(t, gaps, 20, "robots.txt and 20 pages")
				assert.Equal(t, "/robots.txt", site.paths[0])
				for i, g := range gaps {
					assert.GreaterOrEqual(t, g, 2*time.Second, "gap %d", i)
				}
				st := m.Stats()
				require.Len(t, st.Scopes, 1)
				assert.Equal(t, uint64(1), st.Scopes[0].Counts.Robots)
			})
		})
	}
}

// TestCustomPolicyUnknowns: beside a default scope, a custom one answers
// "unknown" where a ScopeManager cannot tell. Stats give its counts and
// waiting reason, but no policy fields and a zero Pace; Export writes
// nothing for it, and Import restores nothing to it; it still learns,
// inside its own manager, and the hooks' delay events come from the
// default scope alone.
func TestCustomPolicyUnknowns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.SlotDelay = 0
		custom := cfg.Default
		custom.NewManager = wrapDefault
		cfg.Scopes = map[string]ScopeConfig{"custom.example": custom}
		var changed []string
		cfg.Hooks.DelayChanged = func(e hooks.DelayChanged) { changed = append(changed, e.Scope) }
		m := newManager(t, cfg)
		refused := &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}}
		for _, host := range []string{"default.example", "custom.example"} {
			p, err := m.Acquire(context.Background(), get(t, "http://"+host+"/"))
			require.NoError(t, err)
			p.Release(refused, nil)
		}
		m.flushWarnings()

		byKey := map[string]ScopeStats{}
		for _, ss := range m.Stats().Scopes {
			byKey[ss.Key] = ss
		}
		def, cus := byKey["default.example"], byKey["custom.example"]
		assert.Equal(t, uint64(1), cus.Counts.Requests)
		assert.Zero(t, cus.Counts.Signals, "a custom scope's signals are the Feedbacks its Finish leaves with Backoff set")
		assert.Equal(t, ReasonBackoff, cus.Reason, "its Admit's answer")
		assert.Zero(t, cus.Pace, "no Pace: unknown")
		assert.Zero(t, cus.Concurrency)
		assert.Zero(t, cus.BackoffDelay)
		assert.Equal(t, ReasonBackoff, def.Pace.Binding)
		assert.Positive(t, def.BackoffDelay)
		assert.Equal(t, uint64(1), def.Counts.Signals)
		assert.Equal(t, []string{"default.example"}, changed)

		var buf bytes.Buffer
		require.NoError(t, m.Export(&buf))
		assert.Contains(t, buf.String(), "default.example")
		assert.NotContains(t, buf.String(), "custom.example")

		// A file that holds a state for the custom scope's key.
		file := bytes.ReplaceAll(buf.Bytes(), []byte("default.example"), []byte("custom.example"))
		m2 := newManager(t, cfg)
		n, err := m2.Import(bytes.NewReader(file))
		require.NoError(t, err)
		assert.Zero(t, n, "nothing restored to a custom ScopeManager")
		n, err = m2.Import(bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		assert.Equal(t, 1, n)
	})
}

// TestCustomPolicyHeld: a custom scope created again after its key was
// evicted with a wait pending is held until that wait ends, by the adapter,
// whatever its manager's Admit says.
func TestCustomPolicyHeld(t *testing.T) {
	c := &custom{mgr: wrapDefault(ScopeParams{Key: "k", Config: plainConfig().Default, GlobalConcurrency: 1}), key: "k"}
	now := time.Unix(1e9, 0)
	require.Equal(t, Admission{}, c.admit(now, 1))
	c.holdUntil(now, now.Add(5*time.Second), true)
	assert.Equal(t, Admission{At: now.Add(5 * time.Second), Reason: ReasonGate}, c.admit(now, 1))
	assert.Equal(t, Busy, c.idleness(now))
	assert.Equal(t, Admission{}, c.admit(now.Add(5*time.Second), 1))
	assert.Equal(t, IdleEmpty, c.idleness(now.Add(5*time.Second)))
	c.holdUntil(now, now.Add(time.Second), false)
	assert.Equal(t, ReasonDelay, c.admit(now, 1).Reason)
}

// TestCustomPolicyFeedbackChanged: what a custom Finish changes in the
// Feedback decides the signal the coordinator counts for its scope.
func TestCustomPolicyFeedbackChanged(t *testing.T) {
	for _, tc := range []struct {
		backoff bool
		scopes  []string
		signal  bool
	}{{false, nil, false}, {true, nil, true}, {true, []string{"k"}, true}, {true, []string{"other"}, false}} {
		t.Run(fmt.Sprint(tc), func(t *testing.T) {
			c := &custom{mgr: &recordingScope{ScopeManager: wrapDefault(ScopeParams{Key: "k", Config: plainConfig().Default, GlobalConcurrency: 1}),
				onFinish: func(fb *Feedback) { fb.Backoff, fb.BackoffScopes = tc.backoff, tc.scopes }}, key: "k"}
			now := time.Unix(1e9, 0)
			var tk Ticket
			c.begin(&tk, now, 1, false)
			signal, changed := c.end(now, &tk, Feedback{Status: 200}, false)
			assert.Equal(t, tc.signal, signal)
			require.NotNil(t, changed)
			assert.Equal(t, tc.backoff, changed.Backoff)
		})
	}
}

// TestStoreRefusesCustomAtRunTime: a custom ScopeManager cannot reach a
// Store by a way New does not check: SetScopeConfig and ScopeConfigFunc
// refuse it with a ConfigError naming the field, and nothing is changed.
func TestStoreRefusesCustomAtRunTime(t *testing.T) {
	cfg := plainConfig()
	cfg.Store = store.NewMemory(nil)
	cfg.ScopeConfigFunc = func(key string, def ScopeConfig) (ScopeConfig, bool) {
		def.NewManager = wrapDefault
		return def, key == "func.example"
	}
	m := newManager(t, cfg)
	sc := cfg.Default
	sc.NewManager = wrapDefault
	err := m.SetScopeConfig("set.example", sc)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, `Scopes["set.example"].NewManager`, ce.Field)
	_, err = m.Acquire(context.Background(), get(t, "http://func.example/"))
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, `ScopeConfigFunc("func.example").NewManager`, ce.Field)
	assert.Zero(t, m.NumScopes())

	p, err := m.Acquire(context.Background(), get(t, "http://set.example/"))
	require.NoError(t, err, "the default policy, as before the refused call")
	p.Release(ok200, nil)
}
