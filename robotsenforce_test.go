package throttle

// Issue 16 item 2: RobotsConfig.Enforce, the opt-in switch that makes
// Acquire and the Transport refuse what robots.txt disallows.

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loopbackSite is a real server for every host, behind a Transport that
// dials it: it serves robotsTxt and 200 for every other path, recording
// the paths it saw.
type loopbackSite struct {
	robotsTxt string
	mu        sync.Mutex
	seen      []string // host + path of every request
	srv       *httptest.Server
	base      *http.Transport
}

func newLoopbackSite(t *testing.T, robotsTxt string) *loopbackSite {
	s := &loopbackSite{robotsTxt: robotsTxt}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.seen = append(s.seen, r.Host+r.URL.RequestURI())
		s.mu.Unlock()
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, s.robotsTxt)
			return
		}
		io.WriteString(w, "page")
	}))
	t.Cleanup(s.srv.Close)
	addr := s.srv.Listener.Addr().String()
	var d net.Dialer
	s.base = &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, addr)
	}}
	t.Cleanup(s.base.CloseIdleConnections)
	return s
}

func (s *loopbackSite) saw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.seen...)
}

// closeCounter is a request body that counts its Close calls.
type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestRobotsEnforce: with Robots.Enforce, a URL that robots.txt disallows
// for the user agent fails through an http.Client with a *DisallowedError
// (errors.Is ErrDisallowed), the server never sees it, no slot is held
// and its body is closed; allowed URLs and robots.txt itself go through;
// Acquire refuses the same way. Without Enforce the rules are not applied.
func TestRobotsEnforce(t *testing.T) {
	site := newLoopbackSite(t, "User-agent: *\nDisallow: /private\nDisallow: /robots.txt\n\nUser-agent: mybot\nDisallow: /mine\n")
	cfg := plainConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 4
	cfg.Robots.Enforce = true
	m, err := New(cfg)
	require.NoError(t, err)
	client := &http.Client{Transport: m.Transport(site.base)}

	fetchPage(t, client, "http://shop.test/public", "")
	body := &closeCounter{Reader: strings.NewReader("form")}
	req, _ := http.NewRequest(http.MethodPost, "http://shop.test/private/x?id=1", body)
	resp, err := client.Do(req)
	if resp != nil {
		resp.Body.Close()
	}
	require.ErrorIs(t, err, ErrDisallowed)
	var de *DisallowedError
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "http://shop.test/private/x?id=1", urlOf(de.URL))
	assert.Equal(t, "http://shop.test", de.Origin)
	assert.Equal(t, "", de.UserAgent)
	assert.False(t, de.Unreachable)
	assert.Equal(t, `throttle: robots.txt of http://shop.test disallows http://shop.test/private/x?id=1 for user agent "*"`, de.Error())
	assert.Equal(t, int32(1), body.closed.Load(), "the request body is closed")

	// robots.txt itself is never refused, even when it disallows itself.
	fetchPage(t, client, "http://shop.test/robots.txt", "")
	// The mybot group replaces the * group for MyBot.
	fetchPage(t, client, "http://shop.test/private/y", "MyBot/2.0")
	req, _ = http.NewRequest(http.MethodGet, "http://shop.test/mine", nil)
	req.Header.Set("User-Agent", "MyBot/2.0")
	_, err = client.Do(req)
	require.ErrorAs(t, err, &de)
	assert.Equal(t, "MyBot", de.UserAgent)

	// Acquire refuses too, holding nothing.
	p, err := m.Acquire(context.Background(), get(t, "http://shop.test/private/z"))
	require.ErrorIs(t, err, ErrDisallowed)
	assert.Nil(t, p)

	assert.Equal(t, []string{"shop.test/robots.txt", "shop.test/public", "shop.test/robots.txt", "shop.test/private/y"}, site.saw(),
		"the server never saw a disallowed URL")
	st := m.Stats()
	assert.Zero(t, st.InFlight)
	assert.Equal(t, Counts{Requests: 3, Responses: [6]uint64{2: 3}, Robots: 1}, st.Totals, "refused requests are no requests")

	// Without Enforce (the default), the rules are for RobotsFor only.
	cfg.Robots.Enforce = false
	m2, err := New(cfg)
	require.NoError(t, err)
	fetchPage(t, &http.Client{Transport: m2.Transport(site.base)}, "http://other.test/private/x", "")
	assert.Contains(t, site.saw(), "other.test/private/x")
}

// TestRobotsEnforceUnreachable: under Enforce, an origin whose robots.txt
// is unreachable (a 5xx, or no answer within FetchTimeout) disallows every
// URL, as RFC 9309 2.3.1.4 says and RobotsFor answers, with Unreachable
// and the time of the next fetch, until a fetch succeeds; a 4xx
// robots.txt allows everything.
func TestRobotsEnforceUnreachable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsStatus: 503}
		m := robotsManager(t, func(c *Config) { c.Robots.Enforce = true })
		client := &http.Client{Transport: m.Transport(site)}
		_, err := client.Get("http://down.example/page")
		var de *DisallowedError
		require.ErrorAs(t, err, &de)
		require.ErrorIs(t, err, ErrDisallowed)
		assert.True(t, de.Unreachable)
		assert.Equal(t, time.Now().Add(time.Minute), de.RetryAt, "fetched again in a minute")
		assert.Contains(t, de.Error(), "robots.txt of http://down.example is unreachable")
		assert.Zero(t, site.pages.Load(), "no page was sent")
		assert.Zero(t, m.Stats().InFlight)

		// Fetched again after RetryAt: the origin answers, its pages go.
		site.robotsStatus = 200
		time.Sleep(time.Until(de.RetryAt))
		fetchPage(t, client, "http://down.example/page", "")
		assert.Equal(t, int32(1), site.pages.Load())
		assert.Equal(t, int32(2), site.fetches.Load())

		// 404: no rules, every URL allowed.
		site404 := &robotsSite{robotsStatus: 404}
		fetchPage(t, &http.Client{Transport: m.Transport(site404)}, "http://gone.example/page", "")
		assert.Equal(t, int32(1), site404.pages.Load())

		// No answer within FetchTimeout: unreachable.
		hang := &robotsSite{hang: true}
		m3 := robotsManager(t, func(c *Config) { c.Robots.Enforce, c.Robots.FetchTimeout = true, 3*time.Second })
		_, err = (&http.Client{Transport: m3.Transport(hang)}).Get("http://slow.example/page")
		require.ErrorAs(t, err, &de)
		assert.True(t, de.Unreachable)
		assert.Zero(t, hang.pages.Load())
	})
}

// TestDisallowedErrorMessages: the error names what a log reader needs.
func TestDisallowedErrorMessages(t *testing.T) {
	u, _ := url.Parse("https://user:secret@a.example/x")
	e := &DisallowedError{URL: u, Origin: "https://a.example", UserAgent: "MyBot"}
	assert.Equal(t, `throttle: robots.txt of https://a.example disallows https://user:xxxxx@a.example/x for user agent "MyBot"`, e.Error())
	e = &DisallowedError{URL: u, Origin: "https://a.example", Unreachable: true, RetryAt: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	assert.Equal(t, "throttle: robots.txt of https://a.example is unreachable, which disallows every URL (RFC 9309), "+
		"https://user:xxxxx@a.example/x included; fetched again after 2030-01-02T03:04:05Z", e.Error())
	assert.True(t, errors.Is(e, ErrDisallowed))
	assert.False(t, errors.Is(e, ErrNoHost))
}
