package throttle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
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
		`{"key":"a.test","state":{"v":3,"a":{"d":7000000000,"s":true}}}`
	for name, in := range map[string]string{
		"truncated":       good,
		"future version":  strings.Replace(good, `"version":1`, `"version":2`, 1) + `]}`,
		"other format":    strings.Replace(good, `throttle-learned`, `other`, 1) + `]}`,
		"bad record":      good + `,{"key":"b.test","state":{"v":3,"a":{"d":-5}}}]}`,
		"bad record ver":  good + `,{"key":"b.test","state":{"v":9}}]}`,
		"no key":          good + `,{"key":"","state":{"v":3}}]}`,
		"duplicate":       good + `,{"key":"a.test","state":{"v":3}}]}`,
		"duplicate key64": good + `,{"key64":"YS50ZXN0","state":{"v":3}}]}`,
		"both keys":       good + `,{"key":"b.test","key64":"/w==","state":{"v":3}}]}`,
		"empty key64":     good + `,{"key64":"","state":{"v":3}}]}`,
		"key64 not b64":   good + `,{"key64":"!!","state":{"v":3}}]}`,
		"future time":     good + `,{"key":"b.test","state":{"v":3,"b":{"ls":9000000000000000000}}}]}`,
		"unknown field":   good + `],"extra":1}`,
		"field twice":     good + `],"scopes":[]}`,
		"scopes no array": strings.Replace(good, `"scopes":[`, `"scopes":{`, 1) + `}}`,
		"not an object":   `[]`,
		"newer, then bad": strings.Replace(good, `"version":1`, `"version":2`, 1) + `,{"key":"b.test","state":{"v":4,"new":1}}]}`,
		"trailing data":   good + `]} {}`,
		"not json":        "\x00\x01",
		"empty":           "",
	} {
		n, err := m.Import(strings.NewReader(in))
		require.ErrorIs(t, err, ErrImport, name)
		require.Zero(t, n, name)
		require.Zero(t, m.NumScopes(), "%s: nothing applied", name)
	}
	_, err := m.Import(strings.NewReader(strings.Replace(good, `"version":1`, `"version":2`, 1) + `,{"key":"b.test","state":{"v":4,"new":1}}]}`))
	require.ErrorContains(t, err, "version 2 is newer", "the version, read before the records, is the reason given")
	n, err := m.Import(strings.NewReader(`{"format":"throttle-learned","version":1,"scopes":null}`))
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = m.Import(strings.NewReader(good + `]}`))
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func FuzzImport(f *testing.F) {
	f.Add(`{"format":"throttle-learned","version":1,"exported":"2026-01-01T00:00:00Z","scopes":[{"key":"a.test","state":{"v":3,"a":{"d":7000000000,"s":true},"b":{"d":2000000000,"bad":1000000000,"hb":true,"ls":1,"w":1,"ws":2},"r":{"r":3.5,"g":3,"bad":4,"l":100000000,"se":true,"w":1}}}]}`)
	f.Add(`{"format":"throttle-learned","version":1,"scopes":[]}`)
	f.Add(`{"format":"throttle-learned","version":1,"scopes":[{"key":"x","state":{"v":3,"r":{"r":1e308}}}]}`)
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
			if n != 0 || m.NumScopes() != 0 {
				t.Fatalf("refused file applied %d scopes", m.NumScopes())
			}
			return
		}
		if m.NumScopes() != n {
			t.Fatalf("imported %d scopes, holds %d", n, m.NumScopes())
		}
		// Whatever was imported, the scopes still admit: a first request
		// at once, a second one after at most the largest delay a policy
		// learns (never "wait for a release" with nothing held).
		st := m.Stats()
		for _, ss := range st.Scopes {
			req, _ := http.NewRequestWithContext(WithScopeKeys(context.Background(), ss.Key), http.MethodGet, "http://x.test/", nil)
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

// learnOn makes the scope key learn a backoff step (a 503) in m.
func learnOn(t testing.TB, m *ThrottlingManager, key string) {
	t.Helper()
	req, err := http.NewRequestWithContext(WithScopeKeys(context.Background(), key), http.MethodGet, "http://x.test/", nil)
	require.NoError(t, err)
	p, adm, err := m.TryAcquire(req)
	require.NoError(t, err)
	require.NotNil(t, p, "%q: %+v", key, adm)
	p.ReleaseFeedback(Feedback{Status: 503})
}

// learnedKeys returns the keys of m's scopes with learned state, and
// their backoff delays.
func learnedKeys(m *ThrottlingManager) map[string]time.Duration {
	keys := map[string]time.Duration{}
	for _, ss := range m.Stats().Scopes {
		if ss.BackoffDelay > 0 {
			keys[ss.Key] = ss.BackoffDelay
		}
	}
	return keys
}

// TestExportKeepsEveryKeyByteForByte (issue 22 item 5): scope keys that
// are not valid UTF-8 (a JSON string cannot hold them: encoding/json
// writes U+FFFD instead) come back from Export and Import byte for byte,
// with their learned state; valid ones are written as plain strings.
func TestExportKeepsEveryKeyByteForByte(t *testing.T) {
	keys := []string{"a.test", "\xff", "bad\x80utf8.test", "\xed\xa0\x80", "é.test", "\u2028<&>", "\ufffd"}
	m := newManager(t, exportConfig())
	for _, k := range keys {
		learnOn(t, m, k)
	}
	want := learnedKeys(m)
	require.Len(t, want, len(keys))
	var buf bytes.Buffer
	require.NoError(t, m.Export(&buf))
	require.Contains(t, buf.String(), `"key":"a.test"`, "a valid key is a plain string")

	m2 := newManager(t, exportConfig())
	n, err := m2.Import(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, len(keys), n)
	require.Equal(t, want, learnedKeys(m2), "every key and its state restored")
	var again bytes.Buffer
	require.NoError(t, m2.Export(&again))
	require.Equal(t, stripExported(buf.String()), stripExported(again.String()))
}

// FuzzExportKeys: whatever bytes two scope keys hold, Export and Import
// restore both, byte for byte, and a second export is the first one.
func FuzzExportKeys(f *testing.F) {
	f.Add("a.test", "b.test")
	f.Add("\xff", "\ufffd")
	f.Add("\xed\xa0\x80", "x\x00y")
	f.Add("\"key64\"", "\\u0000")
	f.Fuzz(func(t *testing.T, a, b string) {
		if a == "" || b == "" || a == b || len(a)+len(b) > 4096 {
			t.Skip()
		}
		m := newManager(t, exportConfig())
		learnOn(t, m, a)
		learnOn(t, m, b)
		want := learnedKeys(m)
		var buf bytes.Buffer
		if err := m.Export(&buf); err != nil {
			t.Fatal(err)
		}
		m2 := newManager(t, exportConfig())
		n, err := m2.Import(bytes.NewReader(buf.Bytes()))
		if err != nil {
			t.Fatalf("import of an export: %v\n%s", err, buf.String())
		}
		if got := learnedKeys(m2); n != len(want) || !maps.Equal(got, want) {
			t.Fatalf("imported %d scopes %q, exported %q", n, slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
		}
		var again bytes.Buffer
		if err := m2.Export(&again); err != nil {
			t.Fatal(err)
		}
		if stripExported(again.String()) != stripExported(buf.String()) {
			t.Fatalf("second export differs:\n%s\n%s", buf.String(), again.String())
		}
	})
}

// TestImportAllOrNothingScopeConfig (issue 22 item 6): a scope whose
// configuration ScopeConfigFunc gets wrong fails the whole Import before
// any scope is touched, the scopes the table holds already included.
func TestImportAllOrNothingScopeConfig(t *testing.T) {
	src := newManager(t, exportConfig())
	for _, k := range []string{"a.test", "b.test", "c.test"} {
		learnOn(t, src, k)
	}
	var buf bytes.Buffer
	require.NoError(t, src.Export(&buf))

	cfg := exportConfig()
	cfg.ScopeConfigFunc = func(key string, def ScopeConfig) (ScopeConfig, bool) {
		if key == "b.test" {
			def.Delay = -time.Second // invalid
			return def, true
		}
		return def, false
	}
	m := newManager(t, cfg)
	m.mustScope(t, "c.test") // a scope the table holds, cold
	n, err := m.Import(bytes.NewReader(buf.Bytes()))
	var ce *ConfigError
	require.ErrorAs(t, err, &ce, "the scope configuration's error, not the file's")
	require.NotErrorIs(t, err, ErrImport)
	require.Contains(t, err.Error(), `"b.test"`)
	require.Zero(t, n)
	require.Equal(t, 1, m.NumScopes(), "no scope made")
	require.Empty(t, learnedKeys(m), "no state applied")
}

// TestImportNeverLosesScopesQuietly: a file with more scopes than
// MaxScopes is refused whole; one that fits the cap but that the table's
// eviction still trims (the cap holds per shard) says how many scopes it
// kept and how many it lost, and the count is the scopes that hold their
// state.
func TestImportNeverLosesScopesQuietly(t *testing.T) {
	src := newManager(t, exportConfig())
	for i := range 1000 {
		learnOn(t, src, fmt.Sprintf("h%d.test", i))
	}
	var buf bytes.Buffer
	require.NoError(t, src.Export(&buf))

	cfg := exportConfig()
	cfg.MaxScopes = 999
	m := newManager(t, cfg)
	n, err := m.Import(bytes.NewReader(buf.Bytes()))
	require.ErrorIs(t, err, ErrImport)
	require.ErrorContains(t, err, "MaxScopes")
	require.Zero(t, n)
	require.Zero(t, m.NumScopes())

	cfg.MaxScopes = 1000
	m = newManager(t, cfg)
	n, err = m.Import(bytes.NewReader(buf.Bytes()))
	kept := len(learnedKeys(m))
	require.Equal(t, kept, n, "the count is the scopes that hold their state")
	if kept < 1000 {
		require.ErrorIs(t, err, ErrImport)
		require.ErrorContains(t, err, fmt.Sprintf("%d of 1000 scopes forgotten", 1000-kept))
	} else {
		require.NoError(t, err)
	}
	t.Logf("MaxScopes 1000, 1000 scopes imported: %d kept", kept)

	cfg.MaxScopes = 4000
	m = newManager(t, cfg)
	n, err = m.Import(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Equal(t, 1000, n)
	require.Len(t, learnedKeys(m), 1000)
}

// importedOn returns a manager on a clock at t0 with cfg, which imported
// file, its clock, and a request in the scope key.
func importedOn(t *testing.T, cfg Config, t0 time.Time, file []byte, key string) (*ThrottlingManager, *stepClock, *http.Request) {
	t.Helper()
	clk := &stepClock{t: t0}
	cfg.Clock = clk
	m := newManager(t, cfg)
	_, err := m.Import(bytes.NewReader(file))
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(WithScopeKeys(context.Background(), key), http.MethodGet, "http://x.test/", nil)
	require.NoError(t, err)
	return m, clk, req
}

// recoveredAfter imports file into a manager on a clock at t0, then sends
// one request a second, each answered 200, and returns how long the
// backoff key learned took to recover (at most limit).
func recoveredAfter(t *testing.T, cfg Config, t0 time.Time, file []byte, key string, limit time.Duration) time.Duration {
	t.Helper()
	m, clk, req := importedOn(t, cfg, t0, file, key)
	for el := time.Duration(0); el < limit; el += time.Second {
		if learnedKeys(m)[key] == 0 {
			return el
		}
		if p, _, err := m.TryAcquire(req); err == nil && p != nil {
			p.ReleaseFeedback(Feedback{Status: 200})
		}
		clk.t = clk.t.Add(time.Second)
	}
	return limit
}

// TestImportFutureTimesHoldNothing: a file written on a machine whose
// clock ran ahead (by less than the day Import accepts) holds its times in
// the future. Its backoff recovers as soon as the same file's with
// today's times: the times are moved back so that none lies ahead of the
// importing manager's clock, instead of holding every window until then.
func TestImportFutureTimesHoldNothing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := exportConfig()
	cfg.Default.AutoThrottle.Enabled = false
	cfg.Clock = &stepClock{t: t0}
	m := newManager(t, cfg)
	learnOn(t, m, "a.test")
	var buf bytes.Buffer
	require.NoError(t, m.Export(&buf))

	var f exportFile
	require.NoError(t, json.Unmarshal(buf.Bytes(), &f))
	require.NotNil(t, f.Scopes[0].State.Back)
	ahead := 23 * time.Hour
	b := f.Scopes[0].State.Back
	b.LastStep += int64(ahead)
	b.Win += int64(ahead)
	future, err := json.Marshal(&f)
	require.NoError(t, err)

	const limit = 3 * time.Hour
	now := recoveredAfter(t, cfg, t0, buf.Bytes(), "a.test", limit)
	require.Less(t, now, limit, "the file with today's times recovers")
	later := recoveredAfter(t, cfg, t0, future, "a.test", limit)
	require.Equal(t, now, later, "the file written %v ahead recovers as soon", ahead)
}

// rampupStarts imports file into a manager on a clock at t0 with cfg,
// then offers the scope key a request every 50 ms, each answered 200 in
// 10 ms, for d: it returns how many started.
func rampupStarts(t *testing.T, cfg Config, t0 time.Time, file []byte, key string, d time.Duration) int {
	t.Helper()
	m, clk, req := importedOn(t, cfg, t0, file, key)
	n := 0
	for el := time.Duration(0); el < d; el += 50 * time.Millisecond {
		if p, _, err := m.TryAcquire(req); err == nil && p != nil {
			n++
			p.ReleaseFeedback(Feedback{Status: 200, Latency: 10 * time.Millisecond})
		}
		clk.t = clk.t.Add(50 * time.Millisecond)
	}
	return n
}

// TestImportAbsurdLatencyWedgesNothing: a record whose rampup latency is
// absurd (9e18 ns, 285 years) caps the scope's rate at concurrency over
// that latency, and the average moves an eighth of the way per response:
// at one start per MaxDelay, the scope crawled 4 requests in 20 minutes,
// 36 in 3 hours. Import holds the latency to the scope's MaxDelay, from
// which the rate comes back as from a record of a slow site's.
func TestImportAbsurdLatencyWedgesNothing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := exportConfig()
	cfg.Default.AutoThrottle.Enabled = false
	cfg.Default.Delay = time.Second
	cfg.Default.Rampup.Enabled = true
	file := func(lat time.Duration) []byte {
		return []byte(fmt.Sprintf(`{"format":"throttle-learned","version":1,"scopes":[{"key":"a.test","state":{"v":3,`+
			`"r":{"r":2,"g":1,"l":%d,"ch":%d,"ga":%d}}}]}`, lat, t0.UnixNano(), t0.UnixNano()))
	}
	slow := rampupStarts(t, cfg, t0, file(cfg.Default.Backoff.MaxDelay), "a.test", 20*time.Minute)
	absurd := rampupStarts(t, cfg, t0, file(9e18), "a.test", 20*time.Minute)
	t.Logf("starts in 20 minutes: %d from a latency of MaxDelay, %d from 9e18 ns", slow, absurd)
	require.Greater(t, slow, 1000)
	require.Equal(t, slow, absurd)
}

// endless is a reader that never ends: a file's head, then next(0),
// next(1), and so on.
type endless struct {
	head string
	next func(i int) string
	buf  []byte
	i    int
	read int
}

func (e *endless) Read(b []byte) (int, error) {
	if e.read == 0 {
		e.buf = []byte(e.head)
	}
	for len(e.buf) < len(b) {
		e.buf = append(e.buf, e.next(e.i)...)
		e.i++
	}
	n := copy(b, e.buf)
	e.buf = e.buf[n:]
	e.read += n
	return n, nil
}

// TestImportReadsBounded: a file that never ends (a stream, a hostile
// server's) is refused once it passes the limit, having read no more;
// one of many small records, once it holds more than Import reads.
func TestImportReadsBounded(t *testing.T) {
	const limit = 1 << 20
	head := `{"format":"throttle-learned","version":1,"scopes":[`
	for name, e := range map[string]*endless{
		"endless records": {head: head, next: func(i int) string { return fmt.Sprintf(`{"key":"%d.test","state":{"v":3}},`, i) }},
		"endless key":     {head: head + `{"key":"`, next: func(int) string { return "a" }},
		"endless spaces":  {next: func(int) string { return " " }},
	} {
		_, _, err := readExport(e, time.Now(), limit, maxImportScopes)
		require.ErrorIs(t, err, ErrImport, name)
		require.ErrorContains(t, err, "larger than 1048576 bytes", name)
		require.LessOrEqual(t, e.read, limit+1, "%s: read past the limit", name)
	}
	e := &endless{head: head, next: func(i int) string { return fmt.Sprintf(`{"key":"%d.test","state":{"v":3}},`, i) }}
	_, _, err := readExport(e, time.Now(), limit, 100)
	require.ErrorIs(t, err, ErrImport)
	require.ErrorContains(t, err, "more scopes than 100")
	require.Less(t, e.read, 100*40, "refused at the 101st record")
}
