package throttle

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

func exportConfig() Config {
	cfg := DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter, cfg.Default.Backoff.Jitter = 0, 0, Jitter{}, Jitter{}
	cfg.Default.AutoThrottle.Enabled = true
	return cfg
}

// TestExportImportResumes: what one manager learned (a backoff delay on one
// host, an AutoThrottle delay on another) is what a new one starts with.
func TestExportImportResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, exportConfig())
		ctx := context.Background()
		p, err := m.Acquire(ctx, get(t, "http://slow.test/"))
		require.NoError(t, err)
		time.Sleep(3 * time.Second)
		p.Release(&http.Response{StatusCode: 200}, nil) // AutoThrottle: (5+3)/2 = 4 s
		p, err = m.Acquire(ctx, get(t, "http://limited.test/"))
		require.NoError(t, err)
		p.Release(&http.Response{StatusCode: 503}, nil) // backoff

		var buf bytes.Buffer
		require.NoError(t, m.Export(&buf))
		require.Contains(t, buf.String(), `"format":"throttle-learned"`)

		m2 := newManager(t, exportConfig())
		n, err := m2.Import(bytes.NewReader(buf.Bytes()))
		require.NoError(t, err)
		require.Equal(t, 2, n)
		var again bytes.Buffer
		require.NoError(t, m2.Export(&again))
		require.JSONEq(t, stripExported(buf.String()), stripExported(again.String()))

		// The new manager waits what the old one learned.
		start := time.Now()
		p, err = m2.Acquire(ctx, get(t, "http://slow.test/"))
		require.NoError(t, err)
		p.Release(nil, errors.New("no response: nothing to learn"))
		p, err = m2.Acquire(ctx, get(t, "http://slow.test/"))
		require.NoError(t, err)
		require.Equal(t, 4*time.Second, time.Since(start), "AutoThrottle delay restored")
		p.Release(nil, errors.New("x"))
	})
}

func stripExported(s string) string {
	i := strings.Index(s, `"exported":"`)
	j := strings.Index(s[i+12:], `"`)
	return s[:i] + s[i+12+j+2:]
}

// TestImportRefusesAndAppliesNothing: bad files are refused whole.
func TestImportRefusesAndAppliesNothing(t *testing.T) {
	m := newManager(t, exportConfig())
	good := `{"format":"throttle-learned","version":1,"exported":"2026-01-01T00:00:00Z","scopes":[` +
		`{"key":"a.test","state":{"v":2,"a":{"d":7000000000,"s":true}}}`
	for name, in := range map[string]string{
		"truncated":      good,
		"future version": strings.Replace(good, `"version":1`, `"version":2`, 1) + `]}`,
		"other format":   strings.Replace(good, `throttle-learned`, `other`, 1) + `]}`,
		"bad record":     good + `,{"key":"b.test","state":{"v":2,"a":{"d":-5}}}]}`,
		"bad record ver": good + `,{"key":"b.test","state":{"v":9}}]}`,
		"no key":         good + `,{"key":"","state":{"v":2}}]}`,
		"duplicate":      good + `,{"key":"a.test","state":{"v":2}}]}`,
		"future time":    good + `,{"key":"b.test","state":{"v":2,"b":{"ls":9000000000000000000}}}]}`,
		"unknown field":  good + `],"extra":1}`,
		"trailing data":  good + `]} {}`,
		"not json":       "\x00\x01",
		"empty":          "",
	} {
		n, err := m.Import(strings.NewReader(in))
		require.ErrorIs(t, err, ErrImport, name)
		require.Zero(t, n, name)
		require.Zero(t, m.Len(), "%s: nothing applied", name)
	}
	n, err := m.Import(strings.NewReader(good + `]}`))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func FuzzImport(f *testing.F) {
	f.Add(`{"format":"throttle-learned","version":1,"exported":"2026-01-01T00:00:00Z","scopes":[{"key":"a.test","state":{"v":2,"a":{"d":7000000000,"s":true},"b":{"d":2000000000,"bad":1000000000,"hb":true,"ls":1,"w":1,"ws":2},"r":{"r":3.5,"g":3,"bad":4,"l":100000000,"se":true,"w":1}}}]}`)
	f.Add(`{"format":"throttle-learned","version":1,"scopes":[]}`)
	f.Add(`{"format":"throttle-learned","version":1,"scopes":[{"key":"x","state":{"v":2,"r":{"r":1e308}}}]}`)
	f.Fuzz(func(t *testing.T, in string) {
		// Bounded work per input. maxImportSize (256 MiB) is too large to
		// go past here, one input at a time.
		if len(in) > 1<<20 {
			t.Skip()
		}
		cfg := exportConfig()
		cfg.Default.Rampup.Enabled = true
		m := newManager(t, cfg)
		n, err := m.Import(strings.NewReader(in))
		if err != nil {
			if n != 0 || m.Len() != 0 {
				t.Fatalf("refused file applied %d scopes", m.Len())
			}
			return
		}
		if m.Len() != n {
			t.Fatalf("imported %d scopes, holds %d", n, m.Len())
		}
		// Whatever was imported, the scopes still admit: a first request
		// at once, a second one after at most the largest delay a policy
		// learns (never "wait for a release" with nothing held).
		st := m.Stats()
		for _, ss := range st.Scopes {
			req, _ := http.NewRequestWithContext(WithScopes(context.Background(), ss.Key), http.MethodGet, "http://x.test/", nil)
			p, adm, err := m.TryAcquire(req)
			if err != nil || p == nil {
				t.Fatalf("scope %q refuses a first request: %v %+v", ss.Key, err, adm)
			}
			p.ReleaseFeedback(Feedback{Status: 200, NoAdjust: true})
			p, adm, err = m.TryAcquire(req)
			if err != nil {
				t.Fatal(err)
			}
			if p != nil {
				p.ReleaseFeedback(Feedback{Status: 200, NoAdjust: true})
			} else if limit := time.Now().Add(2 * cfg.Default.Backoff.MaxDelay); adm.At.IsZero() || adm.At.After(limit) {
				t.Fatalf("scope %q then refuses with %+v (%v from now)", ss.Key, adm, time.Until(adm.At))
			}
		}
		// And they export.
		var buf bytes.Buffer
		if err := m.Export(&buf); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Import(&buf); err != nil {
			t.Fatalf("re-import of an export: %v", err)
		}
	})
}
