package status

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/crawlerkit/throttle"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/html"
)

// hostileKeys are scope keys a crawled site (a link, a host name, a
// Scoper reading the URL) or a careless neighbour could make a crawler
// see: markup for each context the page writes in (text, attributes,
// SVG, style), control characters, invisible and direction-changing
// characters, invalid UTF-8, and a megabyte.
var hostileKeys = []string{
	`<script>alert(1)</script>`,
	`"><svg onload=alert(1)>`,
	`'><img src=x onerror=alert(1)>`,
	`</style><script>alert(1)</script>`,
	`</svg></figure><script>alert(1)</script>`,
	`javascript:alert(1)`,
	`<!--`, `]]>`, `&amp;&lt;`,
	"esc\x1b[2Jcleared",
	"nul\x00byte",
	"line\r\nbreak",
	"sep\u2028arator",
	"rtl\u202egnp.exe",
	"bad\xff\xfeutf8<",
	strings.Repeat("<", 1<<20),
}

// hostileManager has one scope per hostile key, each answered with a 200
// and a 429 (so it is charted, counted and in backoff), with the page
// made first so that the series record them, and a ReadyQueue with a
// hostile name holding requests of those scopes.
func hostileManager(t *testing.T) (*throttle.ThrottlingManager, http.Handler) {
	t.Helper()
	cfg := throttle.DefaultConfig()
	cfg.Robots.Enabled = false
	cfg.Default.Delay, cfg.Default.Jitter = 0, throttle.Jitter{}
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	q := throttle.NewReadyQueue(m)
	h := Handler(m, WithQueue(`<script>alert("queue")</script>`, q))
	for _, key := range hostileKeys {
		ctx := throttle.WithScopeKeys(context.Background(), key)
		for _, status := range []int{200, 429} {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://evil.example/", nil)
			p, _, err := m.TryAcquire(req)
			require.NoError(t, err)
			require.NotNil(t, p, "%q", key)
			p.Release(&http.Response{StatusCode: status, Header: http.Header{}}, nil)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://evil.example/q", nil)
		require.NoError(t, q.Push(req, 0))
	}
	return m, h
}

// TestStatusHostileKeys: whatever the keys, the HTML page has no element
// or attribute but the page's own (no script, no event handler, no
// element from a key), every key shows as text, the page is valid UTF-8
// without control characters, and the JSON is valid and carries every
// key (cut at maxKeyJSON bytes, with its length).
func TestStatusHostileKeys(t *testing.T) {
	_, h := hostileManager(t)
	rec := serveStatus(h, http.MethodGet, "/?n=1000", nil)
	require.Equal(t, http.StatusOK, rec.Code)
	page := rec.Body.String()

	doc, err := html.Parse(strings.NewReader(page))
	require.NoError(t, err)
	allowed := map[string]bool{"html": true, "head": true, "meta": true, "title": true, "style": true, "body": true,
		"h1": true, "h2": true, "h3": true, "p": true, "a": true, "span": true, "table": true, "tbody": true, "tr": true,
		"th": true, "td": true, "div": true, "figure": true, "figcaption": true, "svg": true, "rect": true, "line": true,
		"text": true, "polyline": true, "dl": true, "dt": true, "dd": true}
	var elements, svgs int
	for n := range doc.Descendants() {
		if n.Type != html.ElementNode {
			continue
		}
		elements++
		require.True(t, allowed[n.Data], "element <%s> is not the page's", n.Data)
		for _, a := range n.Attr {
			require.False(t, strings.HasPrefix(strings.ToLower(a.Key), "on"), "<%s %s=%q>", n.Data, a.Key, a.Val)
			if a.Key == "href" {
				require.True(t, strings.HasPrefix(a.Val, "?"), "a link of the page's own: %q", a.Val)
			}
		}
		if n.Data == "svg" {
			svgs++
		}
	}
	require.Equal(t, min(len(hostileKeys), throttle.SeriesScopes), svgs, "one chart per busy key, and no svg from a key")
	require.True(t, utf8.ValidString(page), "the page is valid UTF-8")
	for _, r := range page {
		require.False(t, r < 0x20 && r != '\n' && r != '\t' || r == 0x7f || r == '\u2028' || r == '\u202e',
			"a control or direction-changing character %U in the page", r)
	}
	require.Contains(t, page, `&lt;script&gt;alert(1)&lt;/script&gt;`)
	require.Contains(t, page, `&#34;esc\x1b[2Jcleared&#34;`, "a control character is spelled out")
	require.Contains(t, page, `&#34;bad\xff\xfeutf8&lt;&#34;`, "an invalid byte too")
	require.Contains(t, page, `&#34;rtl\u202egnp.exe&#34;`, "and a direction change")
	require.Contains(t, page, "… (1048576 bytes)", "a huge key is cut, with its length")
	require.Less(t, len(page), 1<<20, "a megabyte key is not a megabyte per table")

	body := serveStatus(h, http.MethodGet, "/?format=json&n=1000", nil).Body.Bytes()
	require.True(t, json.Valid(body))
	require.NotContains(t, string(body), "<", "encoding/json escapes <, > and &")
	require.Less(t, len(body), 1<<20)
	var got struct {
		TopBusy []scopeJSON  `json:"top_busy"`
		Series  []seriesJSON `json:"series"`
		Queues  []queueJSON  `json:"queues"`
	}
	require.NoError(t, json.Unmarshal(body, &got))
	require.Len(t, got.TopBusy, len(hostileKeys))
	require.Len(t, got.Series, min(len(hostileKeys), throttle.SeriesScopes))
	for _, s := range got.TopBusy {
		require.LessOrEqual(t, len(s.Key), maxKeyJSON)
		if s.KeyBytes > 0 {
			require.Equal(t, 1<<20, s.KeyBytes)
			require.Equal(t, strings.Repeat("<", maxKeyJSON), s.Key)
		}
	}
	require.Equal(t, `<script>alert("queue")</script>`, got.Queues[0].Name)
	require.Equal(t, len(hostileKeys), got.Queues[0].Len)
}

// TestStatusKeyShown: displayKey leaves printable keys alone, spells out
// what cannot be seen, and cuts long keys on a character's boundary.
func TestStatusKeyShown(t *testing.T) {
	for _, c := range []struct{ key, want string }{
		{"example.com", "example.com"},
		{"bücher.example", "bücher.example"},
		{"a b", "a b"},
		{"tab\there", `"tab\there"`},
		{"\u00ad", `"\u00ad"`},   // a soft hyphen, invisible
		{"\ufffd", "\"\ufffd\""}, // reads as an invalid byte: quoted
		{strings.Repeat("é", 200), strings.Repeat("é", 128) + "… (400 bytes)"},
		{strings.Repeat("a", 300), strings.Repeat("a", 256) + "… (300 bytes)"},
	} {
		got := displayKey(c.key)
		require.Equal(t, c.want, got, "%q", c.key)
		require.True(t, utf8.ValidString(got))
	}
}

// TestStatusHostileNumbers: numbers at their limits make neither a
// failure nor a page that says nonsense: a latency of 292 years, a
// Retry-After of a century (capped by MaxDelay), a rate that is not a
// number (JSON has none: finite), the most rows.
func TestStatusHostileNumbers(t *testing.T) {
	cfg := throttle.DefaultConfig()
	cfg.Robots.Enabled = false
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	h := Handler(m)
	req, _ := http.NewRequest(http.MethodGet, "http://huge.example/", nil)
	p, err := m.Acquire(context.Background(), req)
	require.NoError(t, err)
	fb := throttle.DefaultFeedback(p.Acquired(), &http.Response{StatusCode: 429,
		Header: http.Header{"Retry-After": {"3153600000"}, "X-Ratelimit-Reset": {"99999999999999999999"}}}, nil)
	fb.Latency = math.MaxInt64
	p.ReleaseFeedback(fb)
	for _, target := range []string{"/", "/?format=json", "/?n=1000&refresh=3600"} {
		rec := serveStatus(h, http.MethodGet, target, nil)
		require.Equal(t, http.StatusOK, rec.Code, target)
		require.Contains(t, rec.Body.String(), "huge.example", target)
	}
	body := serveStatus(h, http.MethodGet, "/?format=json", nil).Body.Bytes()
	var got struct{ Series []seriesJSON }
	require.NoError(t, json.Unmarshal(body, &got))
	require.Len(t, got.Series, 1, "a latency past the series' span counts at the request's start")
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		require.Equal(t, 0.0, finite(f))
	}
	require.Equal(t, 2.5, finite(2.5))
}

// TestStatusHostileQuery: query parameters are parsed strictly, never
// echoed, and bounded.
func TestStatusHostileQuery(t *testing.T) {
	_, h := hostileManager(t)
	for _, target := range []string{
		"/?n=0", "/?n=-1", "/?n=1e3", "/?n=99999999999999999999", "/?n=%00", "/?n=%3Cscript%3E",
		"/?refresh=-1", "/?refresh=1.5", "/?refresh=%3Cscript%3E", "/?format=xml", "/?format=JSON",
		"/?format=%3Cscript%3Ealert(1)%3C/script%3E",
	} {
		rec := serveStatus(h, http.MethodGet, target, nil)
		require.Equal(t, http.StatusBadRequest, rec.Code, target)
		require.NotContains(t, rec.Body.String(), "<", target)
		require.NotContains(t, rec.Body.String(), "script", target)
	}
	for target, n := range map[string]int{"/?format=json&n=9223372036854775807": 1000, "/?format=json&n=3&n=1000": 3} {
		rec := serveStatus(h, http.MethodGet, target, nil)
		require.Equal(t, http.StatusOK, rec.Code, target)
		var got struct{ N int }
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &got))
		require.Equal(t, n, got.N, target)
	}
	rec := serveStatus(h, http.MethodGet, "/?refresh=99999999", nil)
	require.Contains(t, rec.Body.String(), fmt.Sprintf(`content="%d"`, statusMaxRefresh))
	rec = serveStatus(h, http.MethodGet, "/?n=1000&x=%3Cecho-me%3E"+strings.Repeat("z", 1000), nil)
	require.Equal(t, http.StatusOK, rec.Code, "unknown parameters are ignored")
	require.NotContains(t, rec.Body.String(), "echo-me", "and never echoed")
}
