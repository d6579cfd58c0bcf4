package throttle

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// robotsSite is a fake site: it serves robotsTxt (or robotsStatus) at
// /robots.txt and 200 elsewhere, counting robots.txt fetches.
type robotsSite struct {
	robotsTxt    string
	robotsStatus int           // 0: 200
	hang         bool          // robots.txt never answers
	latency      time.Duration // time robots.txt takes to answer
	panics       bool          // robots.txt panics (after latency)
	fetches      atomic.Int32  // robots.txt fetches
	pages        atomic.Int32  // other requests
	lastUA       atomic.Value  // User-Agent of the last robots.txt fetch
	pageLatency  time.Duration // time a page takes
}

func (s *robotsSite) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/robots.txt" {
		s.fetches.Add(1)
		s.lastUA.Store(req.Header.Get("User-Agent"))
		if err := answerAfter(req, s.latency, s.hang); err != nil {
			return nil, err
		}
		if s.panics {
			panic("robots.txt boom")
		}
		st := s.robotsStatus
		if st == 0 {
			st = 200
		}
		return respond(req, st, s.robotsTxt), nil
	}
	s.pages.Add(1)
	time.Sleep(s.pageLatency)
	return respond(req, 200, "page"), nil
}

// answerAfter waits latency, or until req's context ends if hang, and
// returns the context's error if it ended first.
func answerAfter(req *http.Request, latency time.Duration, hang bool) error {
	if hang {
		<-req.Context().Done()
		return req.Context().Err()
	}
	if latency > 0 {
		t := time.NewTimer(latency)
		defer t.Stop()
		select {
		case <-t.C:
		case <-req.Context().Done():
			return req.Context().Err()
		}
	}
	return nil
}

func robotsManager(t *testing.T, mutate func(*Config)) *ThrottlingManager {
	t.Helper()
	cfg := plainConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 4
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := New(cfg)
	require.NoError(t, err)
	return m
}

// fetchPage GETs url through client with the given User-Agent.
func fetchPage(t *testing.T, client *http.Client, url, ua string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if ua != "" {
		req.Header.Set("User-Agent", ua)
	}
	resp, err := client.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func (m *ThrottlingManager) scopeDelay(t *testing.T, key string) (time.Duration, Reason, int) {
	s := m.mustScope(t, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	ds := s.pol.(*defaultScope)
	d, why := ds.delay()
	return d, why, ds.concurrency()
}

func TestRobotsCrawlDelayApplied(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsTxt: "User-agent: mybot\nCrawl-delay: 2.5\n\nUser-agent: *\nCrawl-delay: 1\n"}
		m := robotsManager(t, nil)
		client := &http.Client{Transport: m.Transport(site)}
		t0 := time.Now()
		var starts []time.Duration
		for range 3 {
			fetchPage(t, client, "http://shop.example/p", "MyBot/1.0 (+http://bot.example)")
			starts = append(starts, time.Since(t0))
		}
		assert.Equal(t, int32(1), site.fetches.Load(), "fetched once")
		assert.Equal(t, "MyBot/1.0 (+http://bot.example)", site.lastUA.Load())
		d, why, conc := m.scopeDelay(t, "shop.example")
		assert.Equal(t, 2500*ms, d, "the mybot group, matched by product token")
		assert.Equal(t, ReasonRobots, why)
		assert.Equal(t, 1, conc, "Crawl-delay sets concurrency 1")
		// robots.txt itself was a request in the scope: pages start 2.5 s
		// after it and after each other.
		assert.Equal(t, []time.Duration{2500 * ms, 5000 * ms, 7500 * ms}, starts)
	})
}

func TestRobotsConcurrentFirstRequestsShareOneFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsTxt: "User-agent: *\nDisallow: /private\n"}
		m := robotsManager(t, nil)
		client := &http.Client{Transport: m.Transport(site)}
		var wg sync.WaitGroup
		for range 10 {
			wg.Go(func() { fetchPage(t, client, "http://shop.example/p", "") })
		}
		wg.Wait()
		assert.Equal(t, int32(1), site.fetches.Load())
		assert.Equal(t, int32(10), site.pages.Load())
		r, err := m.RobotsFor(context.Background(), get(t, "http://shop.example/"))
		require.NoError(t, err)
		assert.False(t, r.Allowed("", "/private/x"))
		assert.True(t, r.Allowed("", "/public"))
		// Another origin of the same host (https, a port) has its own file.
		fetchPage(t, client, "https://shop.example/p", "")
		fetchPage(t, client, "http://shop.example:8080/p", "")
		assert.Equal(t, int32(3), site.fetches.Load())
	})
}

// TestRobotsFetchedThroughTheRequestsTransport: an origin's robots.txt is
// fetched through the Transport whose request needs it, so through its
// base RoundTripper; Acquire's callers fetch with RobotsConfig.Client,
// which, when set, fetches for the Transports' requests too.
func TestRobotsFetchedThroughTheRequestsTransport(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, c := &robotsSite{}, &robotsSite{}, &robotsSite{}
		m := robotsManager(t, nil)
		m.robotsTxt.client = &http.Client{Transport: m.Transport(c), CheckRedirect: limitRedirects}
		fetchPage(t, &http.Client{Transport: m.Transport(a)}, "http://a.example/", "")
		fetchPage(t, &http.Client{Transport: m.Transport(b)}, "http://b.example/", "")
		p, err := m.Acquire(context.Background(), get(t, "http://c.example/"))
		require.NoError(t, err)
		p.Release(ok200, nil)
		assert.Equal(t, [3]int32{1, 1, 1}, [3]int32{a.fetches.Load(), b.fetches.Load(), c.fetches.Load()})

		client, d := &robotsSite{}, &robotsSite{}
		m2 := robotsManager(t, func(cfg *Config) {
			cfg.Robots.Client = &http.Client{Transport: client}
		})
		fetchPage(t, &http.Client{Transport: m2.Transport(d)}, "http://d.example/", "")
		assert.Equal(t, int32(1), client.fetches.Load(), "Robots.Client fetches for the Transport")
		assert.Equal(t, int32(0), d.fetches.Load())
		assert.Equal(t, int32(1), d.pages.Load())
	})
}

func TestRobotsDelayCappedAndNeverLowers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsTxt: "User-agent: *\nCrawl-delay: 3600\n"}
		m := robotsManager(t, nil)
		fetchPage(t, &http.Client{Transport: m.Transport(site)}, "http://a.example/", "")
		d, _, _ := m.scopeDelay(t, "a.example")
		assert.Equal(t, time.Minute, d, "capped at Robots.MaxDelay")

		site2 := &robotsSite{robotsTxt: "User-agent: *\nRequest-rate: 1/2s\n"}
		m2 := robotsManager(t, func(c *Config) { c.Default.Delay = 5 * time.Second })
		fetchPage(t, &http.Client{Transport: m2.Transport(site2)}, "http://b.example/", "")
		d, why, _ := m2.scopeDelay(t, "b.example")
		assert.Equal(t, 5*time.Second, d, "a configured delay is never lowered")
		assert.Equal(t, ReasonDelay, why)
	})
}

func TestRobotsExplicitScopeWinsWithOneWarning(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs bytes.Buffer
		site := &robotsSite{robotsTxt: "User-agent: *\nCrawl-delay: 7\n"}
		m := robotsManager(t, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			explicit := c.Default
			explicit.Concurrency = 3
			ignoring := c.Default
			ignoring.IgnoreRobotsTxt = true
			c.Scopes = map[string]ScopeConfig{"a.example": explicit, "b.example": ignoring}
		})
		client := &http.Client{Transport: m.Transport(site)}
		for range 3 {
			fetchPage(t, client, "http://a.example/", "")
			fetchPage(t, client, "http://b.example/", "")
		}
		d, _, conc := m.scopeDelay(t, "a.example")
		assert.Zero(t, d, "the configuration wins")
		assert.Equal(t, 3, conc)
		assert.Equal(t, 1, strings.Count(logs.String(), "robots.txt asks for a delay"), logs.String())
		assert.Contains(t, logs.String(), "robots_delay=7s")
		assert.Contains(t, logs.String(), "configured_delay=0s")
		assert.NotContains(t, logs.String(), "b.example", "IgnoreRobotsTxt: silent")
		d, _, conc = m.scopeDelay(t, "b.example")
		assert.Zero(t, d)
		assert.Equal(t, 4, conc)
	})
}

func TestRobotsUserAgentConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsTxt: "User-agent: otherbot\nCrawl-delay: 9\n\nUser-agent: *\nCrawl-delay: 2\n"}
		m := robotsManager(t, func(c *Config) { c.Robots.UserAgent = "OtherBot" })
		fetchPage(t, &http.Client{Transport: m.Transport(site)}, "http://a.example/", "MyBot/1.0")
		d, _, _ := m.scopeDelay(t, "a.example")
		assert.Equal(t, 9*time.Second, d)
		// No configured agent and no User-Agent header: only the * group.
		m2 := robotsManager(t, nil)
		fetchPage(t, &http.Client{Transport: m2.Transport(site)}, "http://a.example/", "")
		d, _, _ = m2.scopeDelay(t, "a.example")
		assert.Equal(t, 2*time.Second, d)
	})
}

func TestRobotsFailuresAndRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsStatus: 404, robotsTxt: "User-agent: *\nCrawl-delay: 5\n"}
		m := robotsManager(t, nil)
		client := &http.Client{Transport: m.Transport(site)}
		fetchPage(t, client, "http://a.example/", "")
		d, _, _ := m.scopeDelay(t, "a.example")
		assert.Zero(t, d, "4xx: no rules")
		time.Sleep(time.Hour)
		fetchPage(t, client, "http://a.example/", "")
		assert.Equal(t, int32(1), site.fetches.Load(), "4xx is cached for TTL")

		// 5xx: no rules this time (the 503 is a backoff signal for the
		// host, as any 503), retried after 1 min, then 2 min.
		site5 := &robotsSite{robotsStatus: 503, robotsTxt: "User-agent: *\nCrawl-delay: 5\n"}
		m5 := robotsManager(t, nil)
		client5 := &http.Client{Transport: m5.Transport(site5)}
		key := origin{host: "a.example"}
		expiry := func() (time.Duration, int) {
			m5.robotsTxt.mu.RLock()
			defer m5.robotsTxt.mu.RUnlock()
			e := m5.robotsTxt.origins[key]
			return time.Until(e.expires), e.failures
		}
		fetchPage(t, client5, "http://a.example/", "")
		_, why, _ := m5.scopeDelay(t, "a.example")
		assert.NotEqual(t, ReasonRobots, why)
		left, failures := expiry()
		assert.Equal(t, 1, failures)
		assert.InDelta(t, float64(time.Minute), float64(left), float64(2*time.Second), "retry in a minute")
		time.Sleep(left - time.Second)
		fetchPage(t, client5, "http://a.example/", "")
		assert.Equal(t, int32(1), site5.fetches.Load(), "not before")
		left, _ = expiry()
		time.Sleep(left)
		fetchPage(t, client5, "http://a.example/", "")
		assert.Equal(t, int32(2), site5.fetches.Load(), "retried after a minute")
		left, failures = expiry()
		assert.Equal(t, 2, failures)
		assert.InDelta(t, float64(2*time.Minute), float64(left), float64(5*time.Second), "then after two")
		r, err := m5.RobotsFor(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.False(t, r.Allowed("anybot", "/page"), "unreachable: complete disallow (RFC 9309 2.3.1.4)")
		site5.robotsStatus = 200
		time.Sleep(left)
		fetchPage(t, client5, "http://a.example/", "")
		assert.Equal(t, int32(3), site5.fetches.Load())
		d, why, _ = m5.scopeDelay(t, "a.example")
		assert.Equal(t, 5*time.Second, d, "rules once the server answers")
		r, err = m5.RobotsFor(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.True(t, r.Allowed("anybot", "/page"), "its rules once it answers")
		assert.Equal(t, ReasonRobots, why)
		// Cached for TTL, then fetched again.
		left, _ = expiry()
		assert.InDelta(t, float64(24*time.Hour), float64(left), float64(10*time.Second))
		time.Sleep(left - time.Minute)
		fetchPage(t, client5, "http://a.example/", "")
		assert.Equal(t, int32(3), site5.fetches.Load())
		time.Sleep(2 * time.Minute)
		fetchPage(t, client5, "http://a.example/", "")
		assert.Equal(t, int32(4), site5.fetches.Load(), "refetched after 24 h")
	})
}

// TestRobotsHangingServerBoundsTheWait: a robots.txt that never comes
// holds the host's first requests at most FetchTimeout.
func TestRobotsHangingServerBoundsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{hang: true}
		m := robotsManager(t, func(c *Config) { c.Robots.FetchTimeout = 3 * time.Second })
		client := &http.Client{Transport: m.Transport(site)}
		t0 := time.Now()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var done []time.Duration
		for range 4 {
			wg.Go(func() {
				fetchPage(t, client, "http://slow.example/", "")
				mu.Lock()
				done = append(done, time.Since(t0))
				mu.Unlock()
			})
		}
		wg.Wait()
		for _, d := range done {
			assert.LessOrEqual(t, d, 3*time.Second, "waited at most FetchTimeout")
		}
		assert.Equal(t, int32(4), site.pages.Load())
		assert.Equal(t, int32(1), site.fetches.Load())
	})
}

// TestRobotsFetchUsesHostScopesNotContextScopes: the robots.txt request of
// a request with context scopes is throttled by the host, costs nothing.
func TestRobotsFetchUsesHostScopesNotContextScopes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsTxt: "User-agent: *\nAllow: /\n"}
		m := robotsManager(t, func(c *Config) {
			credits := c.Default
			credits.Quota = 5
			c.Scopes = map[string]ScopeConfig{"credits": credits}
		})
		ctx := WithScopes(context.Background(), Scope{Key: "credits", Cost: 5})
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://api.example/x", nil)
		resp, err := (&http.Client{Transport: m.Transport(site)}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		s := m.mustScope(t, "credits")
		s.mu.Lock()
		assert.Equal(t, int64(5), s.pol.(*defaultScope).adm.Quota.Used, "only the page's cost")
		s.mu.Unlock()
	})
}

// Real loopback servers: redirects, a redirect loop, a 10 MB body.
func TestRobotsOverRealServers(t *testing.T) {
	var loops, bigWritten atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Host == "loop.test" && r.URL.Path == "/robots.txt":
			loops.Add(1)
			http.Redirect(w, r, "/robots.txt", http.StatusFound)
		case r.Host == "moved.test" && r.URL.Path == "/robots.txt":
			http.Redirect(w, r, "/real-robots.txt", http.StatusMovedPermanently)
		case r.Host == "moved.test" && r.URL.Path == "/real-robots.txt":
			io.WriteString(w, "User-agent: *\nCrawl-delay: 0.2\n")
		case r.Host == "big.test" && r.URL.Path == "/robots.txt":
			// 10 MB: a rule within the first 500 KiB, one after.
			chunk := strings.Repeat("# padding padding padding padding padding padding\n", 1024)
			io.WriteString(w, "User-agent: *\nDisallow: /early\n")
			for bigWritten.Load() < 10<<20 {
				n, err := io.WriteString(w, chunk)
				bigWritten.Add(int64(n))
				if err != nil {
					return
				}
				if bigWritten.Load() > 600<<10 && bigWritten.Load() < 700<<10 {
					io.WriteString(w, "Crawl-delay: 30\n")
				}
			}
		default:
			io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()
	// Route every host to the local server.
	var dialer net.Dialer
	base := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, srv.Listener.Addr().String())
	}}
	defer base.CloseIdleConnections()
	cfg := plainConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 4
	m, err := New(cfg)
	require.NoError(t, err)
	client := &http.Client{Transport: m.Transport(base)}

	fetchPage(t, client, "http://loop.test/", "")
	assert.LessOrEqual(t, loops.Load(), int64(maxRobotsRedirects+1), "redirect loop: at most 6 fetches")
	d, _, _ := m.scopeDelay(t, "loop.test")
	assert.Zero(t, d)

	fetchPage(t, client, "http://moved.test/", "")
	d, _, _ = m.scopeDelay(t, "moved.test")
	assert.Equal(t, 200*time.Millisecond, d, "redirects followed")

	fetchPage(t, client, "http://big.test/", "")
	r, err := m.RobotsFor(context.Background(), get(t, "http://big.test/"))
	require.NoError(t, err)
	assert.False(t, r.Allowed("", "/early/x"), "the rule in the first 500 KiB counts")
	d, _, _ = m.scopeDelay(t, "big.test")
	assert.Zero(t, d, "nothing past 500 KiB is read")
	assert.Less(t, bigWritten.Load(), int64(10<<20), "the body was not read to its end")
}

// TestRobotsCancelledCallerDuringFetch (issue 14 item 7): a caller whose
// context ends while its host's robots.txt is being fetched gets its
// context's error and holds no slot. The fetch is not that caller's: it
// goes on, once, and the callers waiting on it or coming after get the
// host's rules (its Crawl-delay), not the "unreachable" answer.
func TestRobotsCancelledCallerDuringFetch(t *testing.T) {
	for _, via := range []string{"Acquire", "Transport"} {
		t.Run(via, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				site := &robotsSite{robotsTxt: "User-agent: *\nCrawl-delay: 3\n", latency: 2 * time.Second}
				m := robotsManager(t, nil)
				// Acquire's callers fetch with the default client, over
				// http.DefaultTransport: send its fetches to the fake site.
				m.robotsTxt.client = &http.Client{Transport: m.Transport(site), CheckRedirect: limitRedirects}
				client := &http.Client{Transport: m.Transport(site)}
				t0 := time.Now()
				// do sends one request of the host and returns when it
				// started (its latency is zero).
				do := func(ctx context.Context) (time.Duration, error) {
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://shop.example/p", nil)
					if via == "Acquire" {
						p, err := m.Acquire(ctx, req)
						if err != nil {
							return 0, err
						}
						p.Release(ok200, nil)
						return time.Since(t0), nil
					}
					resp, err := client.Do(req)
					if err != nil {
						return 0, err
					}
					resp.Body.Close()
					return time.Since(t0), nil
				}
				type result struct {
					at  time.Duration
					err error
				}
				ctxA, cancelA := context.WithCancel(context.Background())
				a, b := make(chan result, 1), make(chan result, 1)
				go func() { at, err := do(ctxA); a <- result{at, err} }()
				time.Sleep(500 * time.Millisecond)
				go func() { at, err := do(context.Background()); b <- result{at, err} }()
				time.Sleep(500 * time.Millisecond)
				cancelA() // mid-fetch: robots.txt answers at 2 s
				ra := <-a
				assert.ErrorIs(t, ra.err, context.Canceled, "A: its context's error, not a permit")
				assert.Equal(t, time.Second, time.Since(t0), "A returned when cancelled")
				synctest.Wait()
				assert.Equal(t, 1, m.Stats().InFlight, "A holds nothing: only the robots.txt request is in flight")

				rb := <-b
				require.NoError(t, rb.err)
				assert.Equal(t, 3*time.Second, rb.at, "B waited for the fetch and got its Crawl-delay (3 s after the robots.txt request)")
				at, err := do(context.Background()) // A again
				require.NoError(t, err)
				assert.Equal(t, 6*time.Second, at, "the host's pace is its Crawl-delay")
				assert.Equal(t, int32(1), site.fetches.Load(), "robots.txt fetched once")
				d, why, conc := m.scopeDelay(t, "shop.example")
				assert.Equal(t, 3*time.Second, d)
				assert.Equal(t, ReasonRobots, why)
				assert.Equal(t, 1, conc)
				r, err := m.RobotsFor(context.Background(), get(t, "http://shop.example/"))
				require.NoError(t, err)
				assert.True(t, r.Allowed("", "/p"), "the host's rules, not an unreachable host's disallow-all")
				st := m.Stats()
				assert.Zero(t, st.InFlight, "no slot left held")
				assert.Zero(t, st.Waiting)
			})
		})
	}
}

// TestRobotsFetchPanic: the robots.txt fetch runs apart from its callers,
// so a panic in it (user code: a base RoundTripper, a Scoper, a hook)
// reaches the caller that started it while that caller waits, as it would
// on the caller's goroutine; after that caller left it is logged. Either
// way no slot stays taken, and the origin counts as unreachable rather
// than being fetched forever.
func TestRobotsFetchPanic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{panics: true, latency: time.Second}
		var logs lockedBuffer
		m := robotsManager(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
		client := &http.Client{Transport: m.Transport(site)}
		req, _ := http.NewRequest(http.MethodGet, "http://a.example/", nil)
		v := mustPanic(t, func() { _, _ = client.Do(req) })
		assert.Equal(t, "robots.txt boom", v)
		assert.Zero(t, m.Stats().InFlight)
		r, err := m.RobotsFor(context.Background(), req)
		require.NoError(t, err)
		assert.Same(t, disallowAll, r, "a failed fetch")

		// The starter leaves before the panic: logged, nothing crashes.
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://b.example/", nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			errc <- err
		}()
		time.Sleep(500 * time.Millisecond)
		cancel()
		assert.ErrorIs(t, <-errc, context.Canceled)
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Contains(t, logs.String(), "robots.txt fetch panicked")
		assert.Contains(t, logs.String(), "robots.txt boom")
		assert.Zero(t, m.Stats().InFlight)
		assert.Equal(t, int32(2), site.fetches.Load())
	})
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestRobotsTTLZeroRefused (issue 14 item 7): TTL 0 would fetch robots.txt
// before every request; with robots.txt off it is valid.
func TestRobotsTTLZeroRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Robots.TTL = 0
	_, err := New(cfg)
	var ce *ConfigError
	require.ErrorAs(t, err, &ce)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Equal(t, "Robots.TTL", ce.Field)
	assert.Equal(t, "must be > 0 when Robots.Enabled", ce.Reason)
	cfg.Robots.Enabled = false
	_, err = New(cfg)
	assert.NoError(t, err)
}

// TestRobotsForCancelled: RobotsFor whose context ends mid-fetch says so
// (it used to answer "disallow everything", the fetch failing with it);
// the fetch goes on and the next call gets the rules.
func TestRobotsForCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsTxt: "User-agent: *\nDisallow: /private\n", latency: 2 * time.Second}
		m := robotsManager(t, nil)
		m.robotsTxt.client = &http.Client{Transport: m.Transport(site), CheckRedirect: limitRedirects}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		r, err := m.RobotsFor(ctx, get(t, "http://a.example/"))
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, r)
		r, err = m.RobotsFor(context.Background(), get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.True(t, r.Allowed("", "/public"))
		assert.False(t, r.Allowed("", "/private"))
		assert.Equal(t, int32(1), site.fetches.Load())
	})
}
