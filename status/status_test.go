package status

import (
	"context"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/stretchr/testify/require"
)

// evilKey is a scope key an attacker could make a crawler see (a host
// name in a link, a scope a Scoper takes from the URL).
const evilKey = `<script>alert(1)</script>`

// statusScene is a manager with one scope in each state the status page
// shows:
//
//	busy.example     2 of 2 in flight, 3 waiting (concurrency)
//	slow.example     backoff after a 503
//	limited.example  a 429 with Retry-After: 30 (server gate)
//	auto.example     AutoThrottle on, a 300 ms response
//	ok.example       one 200
//	evilKey          one 200 (throttle.WithScopeKeys)
//
// stop cancels the waiters and releases the permits. It runs on the real
// clock or inside a synctest bubble.
func statusScene(t testing.TB) (m *throttle.ThrottlingManager, stop func()) {
	t.Helper()
	cfg := throttle.DefaultConfig()
	cfg.Robots.Enabled = false
	cfg.Default.Jitter, cfg.Default.Backoff.Jitter, cfg.Default.SlotDelay = throttle.Jitter{}, throttle.Jitter{}, 0
	busy := cfg.Default
	busy.Concurrency = 2
	auto := cfg.Default
	auto.AutoThrottle.Enabled = true
	cfg.Scopes = map[string]throttle.ScopeConfig{"busy.example": busy, "auto.example": auto}
	m, err := throttle.New(cfg)
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	acquire := func(ctx context.Context, u string) *throttle.Permit {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		require.NoError(t, err)
		p, err := m.Acquire(ctx, req)
		require.NoError(t, err)
		return p
	}
	held := []*throttle.Permit{acquire(ctx, "http://busy.example/1"), acquire(ctx, "http://busy.example/2")}
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://busy.example/w%d", i), nil)
			if p, err := m.Acquire(ctx, req); err == nil {
				p.Release(nil, context.Canceled)
			}
		})
	}
	for deadline := time.Now().Add(5 * time.Second); m.Waiting() < 3; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waiters: %d, want 3", m.Waiting())
		}
	}
	// The rest happens at one instant in a synctest bubble.
	release := func(p *throttle.Permit, status int, h http.Header, latency time.Duration) {
		if h == nil {
			h = http.Header{}
		}
		fb := throttle.DefaultFeedback(time.Now(), &http.Response{StatusCode: status, Header: h}, nil)
		fb.Latency = latency
		p.ReleaseFeedback(fb)
	}
	release(acquire(ctx, "http://slow.example/"), 503, nil, 1200*time.Millisecond)
	release(acquire(ctx, "http://limited.example/"), 429, http.Header{"Retry-After": {"30"}}, 80*time.Millisecond)
	release(acquire(ctx, "http://auto.example/"), 200, nil, 300*time.Millisecond)
	release(acquire(ctx, "http://ok.example/"), 200, nil, 120*time.Millisecond)
	release(acquire(throttle.WithScopeKeys(ctx, evilKey), "http://evil.example/"), 200, nil, 45*time.Millisecond)
	return m, func() {
		cancel()
		wg.Wait()
		for _, p := range held {
			p.Release(nil, context.Canceled)
		}
	}
}

// statusFields are the JSON document's fields.
var statusFields = []string{"at", "in_flight", "waiting", "global_concurrency", "scopes", "n", "in_backoff",
	"totals", "robots", "series", "queues", "top_waiting", "top_backoff", "top_busy"}

// serveStatus runs one request through h.
func serveStatus(h http.Handler, method, target string, header http.Header) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// keyCells returns the scope keys of an HTML table's rows, in order.
func keyCells(table string) []string {
	var keys []string
	const open = `<td class="key">`
	for {
		i := strings.Index(table, open)
		if i < 0 {
			return keys
		}
		table = table[i+len(open):]
		j := strings.Index(table, "</td>")
		keys = append(keys, table[:j])
		table = table[j:]
	}
}

// statusTables splits a page into its three tables' HTML (each from its
// heading to the next) and the legend's.
func statusTables(t testing.TB, page string) (waiting, backoff, busy, legend string) {
	t.Helper()
	i, j := strings.Index(page, `id="waiting"`), strings.Index(page, `id="backoff"`)
	k, l := strings.Index(page, `id="busy"`), strings.Index(page, `id="legend"`)
	require.True(t, i >= 0 && j > i && k > j && l > k, "page has the three tables and the legend in order")
	return page[i:j], page[j:k], page[k:l], page[l:]
}

// TestStatusHTML: the page lists the totals, the scopes with callers
// waiting, the scopes in backoff and the busiest scopes, with the pace
// and the rule that binds it and why each waits.
func TestStatusHTML(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, stop := statusScene(t)
		defer stop()
		rec := serveStatus(Handler(m), http.MethodGet, "/status", nil)
		require.Equal(t, http.StatusOK, rec.Code)
		require.Equal(t, "text/html; charset=utf-8", rec.Header().Get("Content-Type"))
		require.Contains(t, rec.Header().Get("Content-Security-Policy"), "default-src 'none'")
		require.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
		page := rec.Body.String()
		require.Equal(t, fmt.Sprint(len(page)), rec.Header().Get("Content-Length"))

		waiting, backoff, busy, _ := statusTables(t, page)
		require.Equal(t, []string{"busy.example"}, keyCells(waiting), "only the scope with waiters")
		require.Contains(t, waiting, `<td class="key">busy.example</td><td>2 / 2</td><td>3</td><td>1s</td><td class="why">1/s (delay)</td><td class="why">concurrency</td>`)
		require.Contains(t, waiting, `<th>pace: starts/s allowed (rule that binds)</th>`)
		keys := keyCells(busy)
		require.Len(t, keys, 6)
		require.Equal(t, "busy.example", keys[0], "the scope with permits in flight comes first")
		require.Equal(t, []string{"limited.example", "slow.example"}, keyCells(backoff)[:2])
		require.Len(t, keyCells(backoff), 2)
		require.Contains(t, backoff, `<td class="why">server gate</td><td>in 30s</td>`)
		require.Contains(t, backoff, "gate 30s")
		// AutoThrottle from its 5s start after a 300ms response: (5s+300ms)/2.
		require.Contains(t, busy, `<td class="key">auto.example</td><td>0 / 1</td><td>0</td><td>2.65s</td><td class="why">0.377/s (autothrottle)</td><td class="why">autothrottle</td><td>in 2.65s</td><td>–</td><td>2.65s</td><td>300ms</td>`)
		require.Contains(t, busy, `<td class="key">ok.example</td><td>0 / 1</td><td>0</td><td>1s</td><td class="why">1/s (delay)</td><td class="why">delay</td><td>in 1s</td>`)
		require.Contains(t, backoff, `<td class="why">0/s (server gate)</td>`, "the pace names the rule that binds")
		// Totals: 2+1+1+1+1+1 requests, 3 2xx, 1 4xx, 1 5xx, 2 signals.
		require.Contains(t, page, "<td>2</td><td>16</td><td>3</td><td>2</td><td>7</td><td>0</td><td>3</td><td>0</td><td>1</td><td>1</td><td>0</td><td>2</td>")
	})
}

// TestStatusCountsRobotsApart: the manager's robots.txt fetches have a
// column (and a JSON field) of their own; a 404 robots.txt is no 4xx of
// the requests.
func TestStatusCountsRobotsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := throttle.DefaultConfig()
		cfg.Default.Delay = 0
		m, err := throttle.New(cfg)
		require.NoError(t, err)
		site := throttletest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Path == "/robots.txt" {
				return throttletest.Response(req, http.StatusNotFound, ""), nil
			}
			return throttletest.Response(req, http.StatusOK, "page"), nil
		})
		client := &http.Client{Transport: m.Transport(site)}
		for _, path := range []string{"/a", "/b"} {
			resp, err := client.Get("http://shop.example" + path)
			require.NoError(t, err)
			resp.Body.Close()
		}
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(serveStatus(Handler(m), http.MethodGet, "/?format=json", nil).Body.Bytes(), &top))
		require.JSONEq(t, `{"requests":2,"signals":0,"responses":{"1xx":0,"2xx":2,"3xx":0,"4xx":0,"5xx":0,"errors":0},"robots_txt":1}`,
			string(top["totals"]))
		page := serveStatus(Handler(m), http.MethodGet, "/", nil).Body.String()
		require.Contains(t, page, "<th>signals</th><th>robots.txt</th></tr>")
		require.Contains(t, page, "<tr><td>0</td><td>16</td><td>0</td><td>0</td><td>2</td><td>0</td><td>2</td><td>0</td><td>0</td><td>0</td><td>0</td><td>0</td><td>1</td></tr>")
		require.Contains(t, page, "<dt>robots.txt (totals)</dt>")
	})
}

// TestStatusEscapes: scope keys are attacker-controlled; the page shows
// them as text and contains no script element at all.
func TestStatusEscapes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, stop := statusScene(t)
		defer stop()
		page := serveStatus(Handler(m), http.MethodGet, "/", nil).Body.String()
		require.Contains(t, page, `<td class="key">&lt;script&gt;alert(1)&lt;/script&gt;</td>`)
		require.NotContains(t, strings.ToLower(page), "<script")

		var doc statusJSON
		body := serveStatus(Handler(m), http.MethodGet, "/?format=json", nil).Body.String()
		require.NotContains(t, body, "<script", "encoding/json escapes < and > too")
		require.NoError(t, json.Unmarshal([]byte(body), &doc))
		require.True(t, slices.ContainsFunc(doc.TopBusy, func(s scopeJSON) bool { return s.Key == evilKey }))
	})
}

// TestStatusJSON: the JSON document's field names, units and values.
func TestStatusJSON(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, stop := statusScene(t)
		defer stop()
		h := Handler(m)
		for _, rec := range []*httptest.ResponseRecorder{
			serveStatus(h, http.MethodGet, "/?format=json", nil),
			serveStatus(h, http.MethodGet, "/", http.Header{"Accept": {"application/json"}}),
		} {
			require.Equal(t, http.StatusOK, rec.Code)
			require.Equal(t, "application/json; charset=utf-8", rec.Header().Get("Content-Type"))
			body := rec.Body.Bytes()

			// Stable field names.
			var top map[string]json.RawMessage
			require.NoError(t, json.Unmarshal(body, &top))
			require.ElementsMatch(t, statusFields, slices.Collect(mapKeys(top)))
			seen := map[string]bool{}
			for _, list := range []string{"top_waiting", "top_backoff", "top_busy"} {
				var scopes []map[string]any
				require.NoError(t, json.Unmarshal(top[list], &scopes))
				for _, s := range scopes {
					for k := range s {
						seen[k] = true
					}
				}
			}
			require.ElementsMatch(t, []string{"key", "in_flight", "waiting", "concurrency", "delay_ms", "why", "ready_at",
				"backoff_delay_ms", "backoff_concurrency", "backoff_bad_ms", "backoff_safe_ms", "outage",
				"autothrottle_delay_ms", "rampup_rate_per_s", "rate_per_s", "binding", "gate", "last_latency_ms", "counts"}, slices.Collect(mapKeys(seen)))
			require.JSONEq(t, `{"requests":7,"signals":2,"responses":{"1xx":0,"2xx":3,"3xx":0,"4xx":1,"5xx":1,"errors":0},"robots_txt":0}`,
				string(top["totals"]))

			var doc statusJSON
			require.NoError(t, json.Unmarshal(body, &doc))
			require.True(t, time.Now().Equal(doc.At), "%v", doc.At)
			require.Equal(t, 2, doc.InFlight)
			require.Equal(t, 3, doc.Waiting)
			require.Equal(t, 16, doc.GlobalConcurrency)
			require.Equal(t, 6, doc.Scopes)
			require.Equal(t, 50, doc.N)
			require.Len(t, doc.TopWaiting, 1, "only the scope with callers waiting")
			busy := doc.TopWaiting[0]
			require.Equal(t, "busy.example", busy.Key)
			require.Len(t, doc.TopBusy, 6)
			require.Equal(t, busy, doc.TopBusy[0], "the same row in both lists")
			require.Equal(t, "concurrency", busy.Why)
			require.Equal(t, 3, busy.Waiting)
			require.Equal(t, 1000.0, busy.DelayMS)
			require.Len(t, doc.TopBackoff, 2)
			lim, slow := doc.TopBackoff[0], doc.TopBackoff[1]
			require.Equal(t, "limited.example", lim.Key)
			require.Equal(t, "server gate", lim.Why)
			require.True(t, time.Now().Add(30*time.Second).Equal(lim.Gate), "%v", lim.Gate)
			require.True(t, lim.Gate.Equal(lim.ReadyAt))
			require.Equal(t, "slow.example", slow.Key)
			require.Equal(t, "backoff", slow.Why)
			require.Equal(t, 2000.0, slow.BackoffDelayMS)
			require.Equal(t, 2000.0, slow.DelayMS)
			require.True(t, slow.Gate.IsZero())
			require.Equal(t, uint64(1), slow.Counts.Responses.C5)
			require.Equal(t, uint64(1), slow.Counts.Signals)
			i := slices.IndexFunc(doc.TopBusy, func(s scopeJSON) bool { return s.Key == "auto.example" })
			require.GreaterOrEqual(t, i, 0)
			require.Equal(t, 300.0, doc.TopBusy[i].LastLatencyMS)
			require.Positive(t, doc.TopBusy[i].AutoThrottleDelayMS)
		}
	})
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// TestStatusNegotiation: ?format wins; else the first of JSON and HTML
// in Accept; else HTML.
func TestStatusNegotiation(t *testing.T) {
	m, err := throttle.New(throttle.DefaultConfig())
	require.NoError(t, err)
	h := Handler(m)
	for _, tc := range []struct {
		target, accept string
		want           string // content type prefix, or a status
	}{
		{"/", "", "text/html"},
		{"/?format=json", "", "application/json"},
		{"/?format=json", "text/html", "application/json"},
		{"/?format=html", "application/json", "text/html"},
		{"/", "application/json", "application/json"},
		{"/", "Application/JSON; charset=utf-8", "application/json"},
		{"/", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", "text/html"},
		{"/", "application/json, text/html", "application/json"},
		{"/", "text/html, application/json", "text/html"},
		{"/", "application/json;q=0, text/html", "text/html"},
		{"/", "*/*", "text/html"},
		{"/?format=xml", "", "400"},
		{"/?format=JSON", "", "400"},
	} {
		var hd http.Header
		if tc.accept != "" {
			hd = http.Header{"Accept": {tc.accept}}
		}
		rec := serveStatus(h, http.MethodGet, tc.target, hd)
		if tc.want == "400" {
			require.Equal(t, http.StatusBadRequest, rec.Code, "%s %q", tc.target, tc.accept)
			continue
		}
		require.Equal(t, http.StatusOK, rec.Code, "%s %q", tc.target, tc.accept)
		require.True(t, strings.HasPrefix(rec.Header().Get("Content-Type"), tc.want), "%s %q: %s", tc.target, tc.accept, rec.Header().Get("Content-Type"))
		require.Equal(t, "Accept", rec.Header().Get("Vary"))
	}
}

// rowsScene is a manager with 120 scopes: h000.example .. h119.example,
// scope i with i+1 requests; the first 60 ended in backoff with a 503.
func rowsScene(t testing.TB) *throttle.ThrottlingManager {
	cfg := throttle.DefaultConfig()
	cfg.Robots.Enabled = false
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, throttle.Jitter{}
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	for i := range 120 {
		u := fmt.Sprintf("http://h%03d.example/", i)
		for j := range i + 1 {
			req, _ := http.NewRequest(http.MethodGet, u, nil)
			p, err := m.Acquire(context.Background(), req)
			require.NoError(t, err)
			status := 200
			if i < 60 && j == i {
				status = 503
			}
			p.Release(&http.Response{StatusCode: status, Header: http.Header{}}, nil)
		}
	}
	return m
}

// TestStatusRowLimit: each table shows at most n rows (default 50, at
// most 1000), the top ones in order. No caller waits in rowsScene: the
// waiting table is empty and the busiest table goes by requests.
func TestStatusRowLimit(t *testing.T) {
	m := rowsScene(t)
	h := Handler(m)
	want := func(from, n int) []string {
		var keys []string
		for i := range n {
			keys = append(keys, fmt.Sprintf("h%03d.example", from-i))
		}
		return keys
	}

	waiting, backoff, busy, _ := statusTables(t, serveStatus(h, http.MethodGet, "/", nil).Body.String())
	require.Empty(t, keyCells(waiting))
	require.Contains(t, waiting, "No caller is waiting in Acquire.")
	require.Equal(t, want(119, 50), keyCells(busy), "by in flight, then requests")
	require.Len(t, keyCells(backoff), 50)

	waiting, backoff, busy, _ = statusTables(t, serveStatus(h, http.MethodGet, "/?n=10", nil).Body.String())
	require.Empty(t, keyCells(waiting))
	require.Equal(t, want(119, 10), keyCells(busy))
	// Every backoff is one 1s step after one signal: ties go by key.
	require.Equal(t, []string{"h000.example", "h001.example", "h002.example"}, keyCells(backoff)[:3])
	require.Len(t, keyCells(backoff), 10)

	_, backoff, busy, _ = statusTables(t, serveStatus(h, http.MethodGet, "/?n=5000", nil).Body.String())
	require.Len(t, keyCells(busy), 120)
	require.Len(t, keyCells(backoff), 60)

	var doc statusJSON
	require.NoError(t, json.Unmarshal(serveStatus(h, http.MethodGet, "/?format=json&n=3", nil).Body.Bytes(), &doc))
	require.Equal(t, 3, doc.N)
	require.Equal(t, 120, doc.Scopes)
	require.Empty(t, doc.TopWaiting)
	require.Len(t, doc.TopBusy, 3)
	require.Equal(t, "h119.example", doc.TopBusy[0].Key)
	require.Equal(t, uint64(120), doc.TopBusy[0].Counts.Requests)
	require.Len(t, doc.TopBackoff, 3)
	require.Equal(t, 1000.0, doc.TopBackoff[0].BackoffDelayMS)
	require.NoError(t, json.Unmarshal(serveStatus(h, http.MethodGet, "/?format=json&n=100000", nil).Body.Bytes(), &doc))
	require.Equal(t, 1000, doc.N)

	for _, n := range []string{"0", "-1", "x", "1.5", ""} {
		rec := serveStatus(h, http.MethodGet, "/?n="+n, nil)
		if n == "" {
			require.Equal(t, http.StatusOK, rec.Code)
			continue
		}
		require.Equal(t, http.StatusBadRequest, rec.Code, "n=%s", n)
	}
}

// TestStatusEmpty: a manager with no scopes yet has empty lists, [] in
// JSON.
func TestStatusEmpty(t *testing.T) {
	m, err := throttle.New(throttle.DefaultConfig())
	require.NoError(t, err)
	h := Handler(m)
	page := serveStatus(h, http.MethodGet, "/", nil).Body.String()
	require.Contains(t, page, "No caller is waiting in Acquire.")
	require.Contains(t, page, "No scope is in backoff.")
	require.Contains(t, page, "No scopes yet.")
	body := serveStatus(h, http.MethodGet, "/?format=json", nil).Body.String()
	require.Contains(t, body, `"top_waiting":[],"top_backoff":[],"top_busy":[]`)
}

// TestStatusRefresh: the page reloads itself with a meta refresh every
// ?refresh= seconds (default 5, at most 3600; 0 turns it off) and its
// links keep n; a refresh that is not a non-negative integer gets 400, as
// a bad n does; the JSON answer has no refresh.
func TestStatusRefresh(t *testing.T) {
	m, err := throttle.New(throttle.DefaultConfig())
	require.NoError(t, err)
	h := Handler(m)
	page := func(target string) string {
		t.Helper()
		rec := serveStatus(h, http.MethodGet, target, nil)
		require.Equal(t, http.StatusOK, rec.Code, target)
		return rec.Body.String()
	}
	const meta = `<meta http-equiv="refresh"`

	p := page("/")
	require.Contains(t, p, `<meta http-equiv="refresh" content="5">`, "default 5s")
	require.Equal(t, 1, strings.Count(p, meta))
	require.Contains(t, p, `<a href="?format=json&amp;n=50">JSON</a>`)
	require.Contains(t, p, `<a href="?n=50&amp;refresh=0">stop</a>`)

	p = page("/?refresh=7&n=20")
	require.Contains(t, p, `<meta http-equiv="refresh" content="7">`)
	require.Equal(t, 1, strings.Count(p, meta))
	require.Contains(t, p, "Reloads every 7s")
	require.Contains(t, p, `<a href="?format=json&amp;n=20">JSON</a>`, "the JSON link keeps n")
	require.Contains(t, p, `<a href="?n=20&amp;refresh=0">stop</a>`)

	p = page("/?refresh=0&n=20")
	require.NotContains(t, strings.ToLower(p), "http-equiv", "refresh=0: no meta refresh")
	require.Contains(t, p, `<a href="?format=json&amp;n=20">JSON</a>`)
	require.Contains(t, p, `<a href="?n=20&amp;refresh=5">reload every 5s</a>`)

	require.Contains(t, page("/?refresh=100000"), `<meta http-equiv="refresh" content="3600">`, "capped")

	for _, r := range []string{"-1", "x", "1.5", "5s", "%205"} {
		for _, format := range []string{"", "&format=json"} {
			rec := serveStatus(h, http.MethodGet, "/?refresh="+r+format, nil)
			require.Equal(t, http.StatusBadRequest, rec.Code, "refresh=%s%s", r, format)
			require.Contains(t, rec.Body.String(), "refresh must be a non-negative integer")
		}
	}

	for _, target := range []string{"/?format=json", "/?format=json&refresh=7", "/?format=json&refresh=0"} {
		rec := serveStatus(h, http.MethodGet, target, nil)
		require.Equal(t, http.StatusOK, rec.Code, target)
		var top map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &top))
		require.ElementsMatch(t, statusFields, slices.Collect(mapKeys(top)), target)
		require.NotContains(t, rec.Body.String(), "refresh", target)
	}
}

// TestStatusWaitingOnlyWaiters: the waiting table and top_waiting list
// only the scopes with callers blocked in Acquire; a scope with a permit
// in flight and no caller waiting, and a scope that finished (no waiter,
// nothing in flight), show only among the busiest scopes.
func TestStatusWaitingOnlyWaiters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := throttle.DefaultConfig() // Concurrency 1
		cfg.Robots.Enabled = false
		m, err := throttle.New(cfg)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		acquire := func(u string) *throttle.Permit {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			require.NoError(t, err)
			p, err := m.Acquire(ctx, req)
			require.NoError(t, err)
			return p
		}
		held := []*throttle.Permit{acquire("http://queue.example/1"), acquire("http://running.example/")}
		acquire("http://done.example/").Release(&http.Response{StatusCode: 200, Header: http.Header{}}, nil)
		var wg sync.WaitGroup
		wg.Go(func() { // blocks: queue.example's one slot is held
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://queue.example/2", nil)
			if p, err := m.Acquire(ctx, req); err == nil {
				p.Release(nil, context.Canceled)
			}
		})
		synctest.Wait()
		require.Equal(t, 1, m.Waiting())
		h := Handler(m)

		waiting, _, busy, _ := statusTables(t, serveStatus(h, http.MethodGet, "/", nil).Body.String())
		require.Equal(t, []string{"queue.example"}, keyCells(waiting))
		require.Contains(t, waiting, `<td class="key">queue.example</td><td>1 / 1</td><td>1</td>`)
		require.NotContains(t, waiting, "done.example")
		require.NotContains(t, waiting, "running.example")
		require.NotContains(t, waiting, "No caller is waiting in Acquire.")
		require.Equal(t, []string{"queue.example", "running.example", "done.example"}, keyCells(busy),
			"by in flight, then requests, then key")
		require.Contains(t, busy, `<td class="key">done.example</td><td>0 / 1</td><td>0</td>`)

		jsonKeys := func(l []scopeJSON) []string {
			keys := []string{}
			for _, s := range l {
				keys = append(keys, s.Key)
			}
			return keys
		}
		var doc statusJSON
		require.NoError(t, json.Unmarshal(serveStatus(h, http.MethodGet, "/?format=json", nil).Body.Bytes(), &doc))
		require.Equal(t, []string{"queue.example"}, jsonKeys(doc.TopWaiting))
		require.Equal(t, 1, doc.TopWaiting[0].Waiting)
		require.Equal(t, []string{"queue.example", "running.example", "done.example"}, jsonKeys(doc.TopBusy))

		// The waiter gives up and the permits are released: every scope
		// has finished, none is listed as waiting, all are still busiest.
		cancel()
		wg.Wait()
		for _, p := range held {
			p.Release(&http.Response{StatusCode: 200, Header: http.Header{}}, nil)
		}
		require.Equal(t, 0, m.Waiting())
		waiting, _, busy, _ = statusTables(t, serveStatus(h, http.MethodGet, "/", nil).Body.String())
		require.Empty(t, keyCells(waiting))
		require.Contains(t, waiting, `<p class="none">No caller is waiting in Acquire.</p>`)
		require.ElementsMatch(t, []string{"queue.example", "running.example", "done.example"}, keyCells(busy))
		body := serveStatus(h, http.MethodGet, "/?format=json", nil).Body.Bytes()
		require.Contains(t, string(body), `"top_waiting":[]`)
		doc = statusJSON{}
		require.NoError(t, json.Unmarshal(body, &doc))
		require.Empty(t, doc.TopWaiting)
		require.Len(t, doc.TopBusy, 3)
	})
}

// TestStatusLegend: under the tables, a legend explains every column of
// the scope tables, and says what a signal is.
func TestStatusLegend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m, stop := statusScene(t)
		defer stop()
		_, _, busy, legend := statusTables(t, serveStatus(Handler(m), http.MethodGet, "/", nil).Body.String())
		explained := map[string]bool{}
		for _, dt := range regexp.MustCompile(`<dt>([^<]*)</dt>`).FindAllStringSubmatch(legend, -1) {
			explained[dt[1]] = true
			for name := range strings.SplitSeq(dt[1], ", ") {
				explained[name] = true
			}
		}
		headers := regexp.MustCompile(`<th[^>]*>([^<]*)</th>`).FindAllStringSubmatch(busy, -1)
		require.Len(t, headers, 16)
		for _, th := range headers {
			require.True(t, explained[th[1]], "the legend explains the column %q", th[1])
		}
		for _, name := range []string{"signals", "pace: starts/s allowed (rule that binds)", "why it waits now", "ready",
			"backoff delay", "AutoThrottle delay", "in flight / concurrency", "delay"} {
			require.Contains(t, legend, "<dt>"+name+"</dt>\n<dd>", name)
		}
		_, signals, ok := strings.Cut(legend, "<dt>signals</dt>")
		require.True(t, ok)
		signals, _, _ = strings.Cut(signals, "</dd>")
		for _, word := range []string{"Backoff signals", "429", "503", "transport errors", "timeouts", "slowed the scope down"} {
			require.Contains(t, signals, word)
		}
	})
}

// TestStatusMethods: over a real server, GET is served; HEAD and every
// other method get 405 with Allow: GET.
func TestStatusMethods(t *testing.T) {
	m, err := throttle.New(throttle.DefaultConfig())
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(m))
	defer srv.Close()
	for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
		http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		req, err := http.NewRequest(method, srv.URL+"/?format=json", nil)
		require.NoError(t, err)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		if method == http.MethodGet {
			require.Equal(t, http.StatusOK, resp.StatusCode)
			continue
		}
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, method)
		require.Equal(t, "GET", resp.Header.Get("Allow"), method)
	}
	srv.Client().CloseIdleConnections()
}

// TestStatusTopN: the partial selection gives what a full sort gives.
func TestStatusTopN(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		count, n := r.IntN(200), 1+r.IntN(60)
		vals := make([]int, count)
		for i := range vals {
			vals[i] = r.IntN(20)
		}
		keep := func(i int) bool { return vals[i]%3 != 0 }
		better := func(a, b int) bool {
			if vals[a] != vals[b] {
				return vals[a] > vals[b]
			}
			return a < b
		}
		var want []int
		for i := range count {
			if keep(i) {
				want = append(want, i)
			}
		}
		slices.SortFunc(want, func(a, b int) int {
			if better(a, b) {
				return -1
			}
			return 1
		})
		want = want[:min(n, len(want))]
		got := statusTopN(nil, n, count, keep, better)
		require.Equal(t, fmt.Sprint(want), fmt.Sprint(got), "count %d n %d", count, n)
	}
}

// TestStatusAllocs: with pooled memory, a request's allocations depend on
// n, not on how many scopes the manager holds.
func TestStatusAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	allocs := func(scopes int, target string) float64 {
		cfg := throttle.DefaultConfig()
		cfg.Robots.Enabled = false
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m, err := throttle.New(cfg)
		require.NoError(t, err)
		for i := range scopes {
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://s%d.example/", i), nil)
			p, err := m.Acquire(context.Background(), req)
			require.NoError(t, err)
			p.Release(&http.Response{StatusCode: 200, Header: http.Header{}}, nil)
		}
		h := Handler(m)
		req := httptest.NewRequest(http.MethodGet, target, nil)
		w := &discardWriter{h: http.Header{}}
		h.ServeHTTP(w, req) // fill the pool
		return testing.AllocsPerRun(20, func() {
			clear(w.h)
			h.ServeHTTP(w, req)
		})
	}
	for _, target := range []string{"/?n=10", "/?n=10&format=json"} {
		few, many := allocs(100, target), allocs(5000, target)
		t.Logf("%s: %.0f allocations with 100 scopes, %.0f with 5000", target, few, many)
		require.LessOrEqual(t, many, few+2, target)
	}
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(int)             {}

// chromium finds a Chromium binary for the browser test: $THROTTLE_CHROMIUM,
// else chromium or chromium-browser on the PATH. Without one the test is
// skipped, unless THROTTLE_BROWSER=1 asks for it.
func chromium(t *testing.T) string {
	t.Helper()
	if os.Getenv("THROTTLE_BROWSER") == "0" {
		t.Skip("THROTTLE_BROWSER=0")
	}
	if p := os.Getenv("THROTTLE_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("THROTTLE_BROWSER") == "1" {
		t.Fatal("THROTTLE_BROWSER=1 but no chromium found (apt-get install chromium, or set THROTTLE_CHROMIUM)")
	}
	t.Skip("no chromium on the PATH (apt-get install chromium; THROTTLE_BROWSER=1 makes this an error)")
	return ""
}

// runChromium runs headless Chromium with its own throwaway profile and
// returns its standard output.
func runChromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	profile, err := os.MkdirTemp("", "throttle-chromium-")
	require.NoError(t, err)
	defer os.RemoveAll(profile)
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
		"--user-data-dir=" + profile}
	cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
	cmd.WaitDelay = 10 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "chromium %v:\n%s", args, stderr.String())
	return out
}

// readPNG decodes the screenshot at path, which must be w by h.
func readPNG(t *testing.T, path string, w, h int) image.Image {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, w, h), img.Bounds())
	return img
}

// TestStatusPageInBrowser loads the page in headless Chromium: the
// screenshot is a 1200x800 PNG with text in the table area, and the DOM
// has the rows, the attacker's key as text and no script element.
func TestStatusPageInBrowser(t *testing.T) {
	bin := chromium(t)
	m, stop := statusScene(t)
	defer stop()
	srv := httptest.NewServer(Handler(m))
	defer srv.Close()
	url := srv.URL + "/status"

	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1200,800", url)
	dom := string(runChromium(t, bin, "--dump-dom", url))
	require.Contains(t, dom, "throttle status")
	require.Contains(t, dom, `<meta http-equiv="refresh" content="5">`)
	waiting, backoff, busy, legend := statusTables(t, dom)
	require.Equal(t, []string{"busy.example"}, keyCells(waiting))
	require.Equal(t, "busy.example", keyCells(busy)[0])
	require.Len(t, keyCells(busy), 6)
	require.Equal(t, []string{"limited.example", "slow.example"}, keyCells(backoff))
	require.Contains(t, busy, `<td class="key">&lt;script&gt;alert(1)&lt;/script&gt;</td>`)
	require.Contains(t, legend, "<dt>signals</dt>")
	require.NotContains(t, strings.ToLower(dom), "<script")

	img := readPNG(t, shot, 1200, 800)
	// Dark pixels (text, borders) in the tables' area, below the title
	// and the totals, and in the header; a blank page has none.
	dark := func(r image.Rectangle) int {
		n := 0
		for y := r.Min.Y; y < r.Max.Y; y++ {
			for x := r.Min.X; x < r.Max.X; x++ {
				cr, cg, cb, _ := img.At(x, y).RGBA()
				if (299*cr+587*cg+114*cb)/1000 < 0x6000 {
					n++
				}
			}
		}
		return n
	}
	head, tables := dark(image.Rect(0, 0, 1200, 60)), dark(image.Rect(0, 200, 1200, 500))
	t.Logf("dark pixels: %d in the header, %d in the tables' area", head, tables)
	require.Greater(t, head, 100, "title text")
	require.Greater(t, tables, 2000, "table text")
	require.Less(t, tables, 1200*300/2, "mostly background")
}

// TestStatusChartsInBrowser loads the page of a realistic crawl
// (crawlScene) in headless Chromium: the DOM has one inline SVG per busy
// scope, each with its two lines, and the screenshot shows them: pixels
// of the 2xx lines' green and of the signals' red in the charts' area.
// Set THROTTLE_SCREENSHOT=path to keep the screenshot (docs/status.png).
func TestStatusChartsInBrowser(t *testing.T) {
	bin := chromium(t)
	h, m, stop := crawlScene(t)
	defer stop()
	srv := httptest.NewServer(h)
	defer srv.Close()
	url := srv.URL + "/status?refresh=0"
	charts := len(m.Stats().Series)

	shot := filepath.Join(t.TempDir(), "status.png")
	runChromium(t, bin, "--screenshot="+shot, "--window-size=1200,1500", url)
	dom := string(runChromium(t, bin, "--dump-dom", url))
	require.Equal(t, charts, strings.Count(dom, "<svg "), "one chart per busy scope")
	require.Equal(t, charts, strings.Count(dom, `<polyline class="ok" points="4`), "each with its 2xx line")
	require.Equal(t, charts, strings.Count(dom, `<polyline class="sig" points="4`), "and its signals' line")
	require.Contains(t, dom, "frontier: 1898 requests in 3 groups")
	require.NotContains(t, strings.ToLower(dom), "<script")

	img := readPNG(t, shot, 1200, 1500)
	// The lines' colours (#1a7f37, #cf222e), give or take antialiasing.
	near := func(c color.Color, r, g, b uint32) bool {
		cr, cg, cb, _ := c.RGBA()
		d := func(x, y uint32) uint32 { return max(x>>8, y) - min(x>>8, y) }
		return d(cr, r) < 40 && d(cg, g) < 40 && d(cb, b) < 40
	}
	var green, red int
	for y := range 1500 {
		for x := range 1200 {
			c := img.At(x, y)
			switch {
			case near(c, 0x1a, 0x7f, 0x37):
				green++
			case near(c, 0xcf, 0x22, 0x2e):
				red++
			}
		}
	}
	t.Logf("pixels: %d green (2xx lines), %d red (signals' lines)", green, red)
	require.Greater(t, green, 300*charts, "a 2xx line across each chart")
	require.Greater(t, red, 30*charts, "the signals' lines, along the bottom and up at the 429s and 503s")
	if p := os.Getenv("THROTTLE_SCREENSHOT"); p != "" {
		b, err := os.ReadFile(shot)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
}
