package throttle

// Hostile servers (issue 9, item 3): each test ends in a figure it logs.
//
// The servers are real httptest.Servers (net/http's server, HTTP/1.1 on
// the wire, parsed by a real http.Transport) reached over in-memory pipes
// (net.Pipe) instead of TCP sockets, so that they run inside a synctest
// bubble in fake time: a goroutine waiting on a real socket is not durably
// blocked, so synctest could not advance its clock past a server that
// stalls, and a 300 s gate or a 10 s FetchTimeout would take real time.
// net.Pipe is also unbuffered, so the bytes a server managed to write are
// exactly the bytes the client read: no kernel buffer hides how much a
// fetch took in. Nothing leaves the process.
//
// The link farm (a million distinct hosts, memory bounded by MaxScopes) is
// TestMemoryLinkFarm in memory_test.go.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/robots"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pipeServer is an httptest.Server whose connections are net.Pipes, with
// an http.Transport that dials it for every host. read counts the bytes
// the client side read off the wire, written those the server side wrote.
type pipeServer struct {
	*httptest.Server
	tr      *http.Transport
	conns   chan net.Conn
	done    chan struct{}
	close   sync.Once
	read    atomic.Int64
	written atomic.Int64
}

// newPipeServer starts h; stop it with Close before the bubble ends.
func newPipeServer(h http.Handler) *pipeServer {
	ps := &pipeServer{conns: make(chan net.Conn), done: make(chan struct{})}
	ps.Server = &httptest.Server{Listener: (*pipeListener)(ps), Config: &http.Server{Handler: h}}
	ps.tr = &http.Transport{DialContext: ps.dial}
	ps.Start()
	return ps
}

func (ps *pipeServer) Close() {
	ps.tr.CloseIdleConnections()
	ps.Server.Close()
}

func (ps *pipeServer) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	srv, cli := net.Pipe()
	select {
	case ps.conns <- &countingConn{Conn: srv, n: &ps.written, writes: true}:
		return &countingConn{Conn: cli, n: &ps.read}, nil
	case <-ps.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// pipeListener is the pipeServer seen as a net.Listener.
type pipeListener pipeServer

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.close.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// countingConn counts the bytes read from (or, with writes, written to) a
// connection.
type countingConn struct {
	net.Conn
	n      *atomic.Int64
	writes bool
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if !c.writes {
		c.n.Add(int64(n))
	}
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if c.writes {
		c.n.Add(int64(n))
	}
	return n, err
}

// getBody GETs url with client and reads and closes the body.
func getBody(t *testing.T, client *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// TestHostileRetryAfter: absurd and malformed server-given waits, sent on
// a 429 (or on a 200 that reports its quota spent) by a real server
// through the Transport. A valid wait gates the scope for at most
// Backoff.MaxDelay (300 s), however far it points; an invalid one is
// ignored, leaving the 429's one backoff step (1 s doubled: 2 s ±10 %).
// Either way the next request is admitted within the cap.
func TestHostileRetryAfter(t *testing.T) {
	const maxDelay = 300 * time.Second
	cases := []struct {
		name   string
		header []string // name, value, ...
		status int      // 0: 429
		gated  bool     // a valid wait: gated at the cap
		broken bool     // net/http rejects the response itself
	}{
		{name: "10 years", header: []string{"Retry-After", "315360000"}, gated: true},
		{name: "40 digits", header: []string{"Retry-After", strings.Repeat("9", 40)}, gated: true},
		{name: "year 9999", header: []string{"Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT"}, gated: true},
		{name: "negative", header: []string{"Retry-After", "-5"}},
		{name: "1e400", header: []string{"Retry-After", "1e400"}},
		{name: "fraction", header: []string{"Retry-After", "1.5"}},
		{name: "hex", header: []string{"Retry-After", "0x7fffffffffffffff"}},
		{name: "NaN", header: []string{"Retry-After", "NaN"}},
		{name: "garbage", header: []string{"Retry-After", "soon, maybe \xff\xfe ☃ ;q=1"}},
		{name: "DEL byte", header: []string{"Retry-After", "30\x7f"}, broken: true},
		{name: "empty", header: []string{"Retry-After", ""}},
		{name: "year 0", header: []string{"Retry-After", "Sat, 01 Jan 0000 00:00:00 GMT"}},
		{name: "RateLimit t 15 digits", header: []string{"RateLimit", `"d";r=0;t=999999999999999`}, gated: true},
		{name: "RateLimit t 16 digits", header: []string{"RateLimit", `"d";r=0;t=9999999999999999`}},
		// A first spent answer is tested, not believed (spentQuota): no
		// gate yet; TestSpentQuotaHostileReset caps the gate once the
		// quota is known to be of fixed windows.
		{name: "X-RateLimit-Reset 20 digits, 200", header: []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", strings.Repeat("9", 20)}, status: 200},
		{name: "X-RateLimit-Reset 1e400, 200", header: []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "1e400"}, status: 200},
	}
	synctest.Test(t, func(t *testing.T) {
		srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/moved" {
				w.Header().Set("Retry-After", "315360000")
				http.Redirect(w, r, "/there", http.StatusFound)
				return
			}
			if r.URL.Path != "/hostile" {
				io.WriteString(w, "ok")
				return
			}
			c := cases[atoiHost(r.Host)]
			for i := 0; i+1 < len(c.header); i += 2 {
				w.Header()[c.header[i]] = []string{c.header[i+1]}
			}
			st := c.status
			if st == 0 {
				st = http.StatusTooManyRequests
			}
			w.WriteHeader(st)
		}))
		defer srv.Close()
		cfg := plainConfig()
		require.Equal(t, maxDelay, cfg.Default.Backoff.MaxDelay, "the default cap")
		m := newManager(t, cfg)
		client := &http.Client{Transport: m.Transport(srv.tr)}
		for i, c := range cases {
			host := fmt.Sprintf("c%d.test", i)
			if c.broken {
				_, err := client.Get("http://" + host + "/hostile")
				require.Error(t, err, c.name)
				t.Logf("%-34s %q: the transport refuses the response: %v", c.name, c.header[1], err)
			} else {
				resp := getBody(t, client, "http://"+host+"/hostile")
				require.Equal(t, c.header[len(c.header)-1], resp.Header.Get(c.header[len(c.header)-2]), "%s: sent as is", c.name)
			}

			p, adm, err := m.TryAcquire(get(t, "http://"+host+"/"))
			require.NoError(t, err)
			require.Nil(t, p, "%s: not admitted at once", c.name)
			gate := time.Until(adm.At)
			t0 := time.Now()
			getBody(t, client, "http://"+host+"/next")
			waited := time.Since(t0)
			t.Logf("%-34s %q: %-11v next request admitted after %v (cap %v)", c.name, trimmed(c.header[len(c.header)-1]), adm.Reason, waited, maxDelay)
			assert.LessOrEqual(t, waited, maxDelay, c.name)
			assert.Equal(t, waited, gate, "%s: admitted when TryAcquire said", c.name)
			if c.gated {
				assert.Equal(t, ReasonGate, adm.Reason, c.name)
				assert.Equal(t, maxDelay, waited, "%s: capped at Backoff.MaxDelay", c.name)
			} else {
				assert.NotEqual(t, ReasonGate, adm.Reason, "%s: ignored", c.name)
				assert.LessOrEqual(t, waited, 2200*time.Millisecond, "%s: at most one backoff step", c.name)
			}
		}

		// A 3xx's Retry-After delays the hop to its Location, capped at
		// Backoff.RedirectMaxDelay (60 s).
		t0 := time.Now()
		getBody(t, client, "http://redirect.test/moved")
		hop := time.Since(t0)
		t.Logf("302 with Retry-After 10 years: next hop after %v (cap %v)", hop, cfg.Default.Backoff.RedirectMaxDelay)
		assert.Equal(t, cfg.Default.Backoff.RedirectMaxDelay, hop)
	})
}

// atoiHost returns the number in a host "c<n>.test".
func atoiHost(host string) int {
	var n int
	fmt.Sscanf(host, "c%d.test", &n)
	return n
}

// trimmed shortens long values for the log.
func trimmed(s string) string {
	if len(s) > 32 {
		return s[:29] + "..."
	}
	return s
}

// allocsPerCall returns the allocations and the bytes f makes per call,
// averaged over runs calls after a warm-up, on one P as
// testing.AllocsPerRun does.
func allocsPerCall(runs int, f func()) (n, bytes float64) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs), float64(after.TotalAlloc-before.TotalAlloc) / float64(runs)
}

// TestHostileRateLimitHeaders: 10,000 Retry-After lines, 10,000 other
// header lines and a 1 MB RateLimit value on a 429, through a real server
// and the Transport. The parsers' own bounds (64 items or 64 parameters,
// values over 4 KiB ignored) are TestHostileRateLimitHeaders in package
// ratelimit; here the work of DefaultFeedback on that header is measured in
// allocations, not wall time.
func TestHostileRateLimitHeaders(t *testing.T) {
	const n = 10_000
	// Through a real server and the Transport: a 429 with 10,000
	// Retry-After lines (the first says 7 s, the others 10 years), 10,000
	// other header lines and a 1 MB RateLimit value. Only the first
	// Retry-After counts; the 1 MB value is ignored.
	synctest.Test(t, func(t *testing.T) {
		var hostile http.Header
		srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/hostile" {
				io.WriteString(w, "ok")
				return
			}
			h := w.Header()
			ra := make([]string, n)
			ra[0] = "7"
			for i := 1; i < n; i++ {
				ra[i] = "315360000"
			}
			h["Retry-After"] = ra
			for i := range n {
				h[fmt.Sprintf("X-Junk-%d", i)] = []string{"x"}
			}
			h["Ratelimit"] = []string{`"burst";r=0;t=300` + strings.Repeat(";x=1", (1<<20)/4)}
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		defer srv.Close()
		m := newManager(t, plainConfig())
		client := &http.Client{Transport: m.Transport(srv.tr)}
		resp := getBody(t, client, "http://many.test/hostile")
		hostile = resp.Header
		require.Len(t, hostile["Retry-After"], n, "all the lines arrived")
		require.Greater(t, len(hostile.Get("Ratelimit")), 1<<20)
		t0 := time.Now()
		getBody(t, client, "http://many.test/next")
		waited := time.Since(t0)
		t.Logf("%d header lines, %d B of header on the wire: next request admitted after %v",
			len(hostile), srv.read.Load(), waited)
		assert.Equal(t, 7*time.Second, waited, "the first Retry-After, not the 1 MB RateLimit")

		now := time.Now()
		small := &http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"7"}}}
		big := &http.Response{StatusCode: 429, Header: hostile}
		benign := testing.AllocsPerRun(100, func() { DefaultFeedback(now, small, nil) })
		allocs := testing.AllocsPerRun(100, func() { DefaultFeedback(now, big, nil) })
		_, benignB := allocsPerCall(100, func() { DefaultFeedback(now, small, nil) })
		_, bytes := allocsPerCall(100, func() { DefaultFeedback(now, big, nil) })
		fb := DefaultFeedback(now, big, nil)
		t.Logf("DefaultFeedback on that header: wait %v, %.0f allocs, %.0f B (on Retry-After: 7 alone: %.0f allocs, %.0f B)",
			fb.Wait, allocs, bytes, benign, benignB)
		assert.Equal(t, 7*time.Second, fb.Wait)
		assert.Equal(t, benign, allocs, "no more work than a one-line header")
		assert.LessOrEqual(t, bytes, benignB+64)
	})
}

// TestHostileRobotsHuge: a server streams a 100 MB robots.txt (a
// Crawl-delay in its first lines, a Disallow after 1 MB). The fetch reads
// at most robots.MaxSize of it and closes the connection; the first 500 KiB
// count and the host is throttled by their Crawl-delay.
func TestHostileRobotsHuge(t *testing.T) {
	const size = 100 << 20
	synctest.Test(t, func(t *testing.T) {
		var body atomic.Int64 // robots.txt bytes the handler got written
		srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/robots.txt" {
				io.WriteString(w, "page")
				return
			}
			w.Header().Set("Content-Length", fmt.Sprint(size))
			line := strings.Repeat("#", 1023) + "\n"
			for body.Load() < size {
				s := line
				switch {
				case body.Load() == 0:
					s = "User-agent: *\nCrawl-delay: 2\n" + line[len("User-agent: *\nCrawl-delay: 2\n"):]
				case body.Load() == 1<<20:
					s = "Disallow: /late\n" + line[len("Disallow: /late\n"):]
				}
				n, err := io.WriteString(w, s)
				body.Add(int64(n))
				if err != nil {
					return // the client hung up
				}
			}
		}))
		defer srv.Close()
		m := robotsManager(t, func(c *Config) {
			c.Default.Delay, c.Default.Concurrency = 0, 1
		})
		client := &http.Client{Transport: m.Transport(srv.tr)}
		t0 := time.Now()
		var starts []time.Duration
		for range 3 {
			getBody(t, client, "http://huge.test/page")
			starts = append(starts, time.Since(t0))
		}
		synctest.Wait() // the handler returns once its write fails
		wire := srv.read.Load()
		r, err := m.RobotsFor(context.Background(), get(t, "http://huge.test/"))
		require.NoError(t, err)
		d, why, conc := m.scopeDelay(t, "huge.test")
		t.Logf("robots.txt of %d MB: the server wrote %d B of it, the client read %d B off the wire in all (robots.MaxSize %d); Crawl-delay %v (%v, concurrency %d); pages started at %v",
			size>>20, body.Load(), wire, robots.MaxSize, d, why, conc, starts)
		assert.LessOrEqual(t, body.Load(), int64(robots.MaxSize+64<<10), "the server could write little past the cap")
		assert.LessOrEqual(t, wire, int64(robots.MaxSize+64<<10), "read at most the cap and a buffer")
		assert.Equal(t, 2*time.Second, d, "the Crawl-delay in the first 500 KiB counts")
		assert.Equal(t, ReasonRobots, why)
		assert.Equal(t, 1, conc)
		assert.True(t, r.Allowed("", "/late"), "nothing past the cap is read")
		// robots.txt was a request in the scope: pages 2 s after it and
		// after each other.
		assert.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second, 6 * time.Second}, starts)
	})
}

// TestHostileRobotsNeverEnds: a robots.txt that never ends, either
// trickling a line a second forever after its headers or never answering
// at all. The fetch gives up at FetchTimeout (10 s, in fake time); the
// throttle goes on without a Crawl-delay, while RobotsFor answers
// "disallow everything" (RFC 9309: unreachable means complete disallow) for
// crawlers that check Allowed: a timeout is a failure, retried after a
// minute, and (like any timeout) a backoff signal for the host.
func TestHostileRobotsNeverEnds(t *testing.T) {
	for _, mode := range []string{"trickle", "silent"} {
		t.Run(mode, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var body atomic.Int64
				srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/robots.txt" {
						io.WriteString(w, "page")
						return
					}
					if mode == "silent" {
						<-r.Context().Done() // holds the connection, says nothing
						return
					}
					io.WriteString(w, "User-agent: *\nCrawl-delay: 5\n")
					for {
						w.(http.Flusher).Flush()
						select {
						case <-r.Context().Done():
							return
						case <-time.After(time.Second):
						}
						n, err := io.WriteString(w, "# still going\n")
						body.Add(int64(n))
						if err != nil {
							return
						}
					}
				}))
				defer srv.Close()
				m := robotsManager(t, func(c *Config) { c.Default = plainConfig().Default }) // 1 s, 1 slot
				timeout := m.cfg.Robots.FetchTimeout
				require.Equal(t, 10*time.Second, timeout, "the default")
				client := &http.Client{Transport: m.Transport(srv.tr)}
				t0 := time.Now()
				getBody(t, client, "http://endless.test/page")
				first := time.Since(t0)
				getBody(t, client, "http://endless.test/other")
				second := time.Since(t0)
				r, err := m.RobotsFor(context.Background(), get(t, "http://endless.test/"))
				require.NoError(t, err)
				d, why, _ := m.scopeDelay(t, "endless.test")
				t.Logf("%s robots.txt: first page after %v (FetchTimeout %v), second after %v; %d B trickled; rules: %v; delay %v (%v)",
					mode, first, timeout, second, body.Load(), r, d, why)
				assert.Equal(t, timeout, first, "the fetch ends at FetchTimeout")
				assert.False(t, r.Allowed("anybot", "/page"), "unreachable: complete disallow for Allowed checks (RFC 9309 2.3.1.4)")
				assert.NotEqual(t, ReasonRobots, why, "the Crawl-delay of an unfinished file does not count")
				assert.Equal(t, ReasonBackoff, why, "the timeout is a backoff signal")
				assert.LessOrEqual(t, second-first, d+d/10, "then throttled as any host in backoff")
				m.robotsTxt.mu.RLock()
				e := m.robotsTxt.origins[origin{host: "endless.test"}]
				retry := e.expires.Sub(t0)
				m.robotsTxt.mu.RUnlock()
				assert.Equal(t, timeout+robotsFailureRetry, retry, "retried a minute after the failure")
			})
		})
	}
}

// TestHostileBodyNeverEnds: through the Transport, a server sends its
// headers and then trickles the body, a few bytes every 10 s, forever. The
// permit's slot stays held for as long as the caller keeps the body: an
// hour here, in fake time. It is free again the moment the caller gives
// up, by closing the body ("close") or by cancelling the request's context
// while it reads ("cancel": the Read fails). A caller that cancels while
// not reading ("cancel, idle") keeps the slot until its next Read or its
// Close, as the Transport documents.
func TestHostileBodyNeverEnds(t *testing.T) {
	for _, giveUp := range []string{"close", "cancel", "cancel, idle"} {
		t.Run(giveUp, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var body atomic.Int64
				srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path != "/endless" {
						io.WriteString(w, "ok")
						return
					}
					for {
						w.(http.Flusher).Flush()
						select {
						case <-r.Context().Done():
							return
						case <-time.After(10 * time.Second):
						}
						n, err := io.WriteString(w, "more ")
						body.Add(int64(n))
						if err != nil {
							return
						}
					}
				}))
				defer srv.Close()
				cfg := plainConfig()
				cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
				m := newManager(t, cfg)
				client := &http.Client{Transport: m.Transport(srv.tr)}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://slow.test/endless", nil)
				require.NoError(t, err)
				resp, err := client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				t0 := time.Now()
				read := make(chan error, 1)
				if giveUp != "cancel, idle" {
					go func() {
						_, err := io.Copy(io.Discard, resp.Body)
						read <- err
					}()
				}
				held := func() (scope, global int) { return m.inFlight(t, "slow.test"), m.Stats().InFlight }

				time.Sleep(time.Hour)
				synctest.Wait()
				scope, global := held()
				p, adm, err := m.TryAcquire(get(t, "http://slow.test/next"))
				require.NoError(t, err)
				require.Nil(t, p)
				assert.Equal(t, 1, scope, "the slot is held while the body goes on")
				assert.Equal(t, 1, global, "and the global one")
				assert.Equal(t, ReasonConcurrency, adm.Reason)

				switch giveUp {
				case "close":
					resp.Body.Close()
				case "cancel":
					cancel()
				case "cancel, idle":
					cancel()
					time.Sleep(time.Minute)
					synctest.Wait()
					scope, global = held()
					t.Logf("%s: a minute after the cancel, not reading: %d in flight (scope), %d (global)", giveUp, scope, global)
					assert.Equal(t, 1, scope, "held until the body is read or closed")
					resp.Body.Close()
				}
				synctest.Wait()
				heldFor := time.Since(t0)
				scope, global = held()
				t.Logf("%s: slot held %v while %d B trickled in; then %d in flight (scope), %d (global)",
					giveUp, heldFor, body.Load(), scope, global)
				if giveUp != "cancel, idle" {
					err := <-read
					t.Logf("%s: the reader got %v", giveUp, err)
					assert.Error(t, err, "the reader is stopped")
				}
				assert.Equal(t, 0, scope, "the slot is free")
				assert.Equal(t, 0, global)
				t1 := time.Now()
				getBody(t, client, "http://slow.test/next")
				assert.Equal(t, t1, time.Now(), "the next request is admitted at once")
			})
		})
	}
}

// TestHostileLinkFarmRobotsBudget: a link farm whose every host serves a
// 500 KiB robots.txt of rules: Robots.MaxBytes bounds what the cache keeps,
// oldest origins dropped first, whatever MaxOrigins allows.
func TestHostileLinkFarmRobotsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		body := "User-agent: *\nCrawl-delay: 1\n" + strings.Repeat("Disallow: /"+strings.Repeat("x", 40)+"\n", robots.MaxSize/52)
		srv := newPipeServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/robots.txt" {
				io.WriteString(w, body)
				return
			}
			io.WriteString(w, "ok")
		}))
		defer srv.Close()
		const budget = 8 << 20
		m := robotsManager(t, func(c *Config) { c.Robots.MaxBytes = budget })
		client := &http.Client{Transport: m.Transport(srv.tr)}
		before := liveHeap()
		peak := int64(0)
		for i := range 40 {
			getBody(t, client, fmt.Sprintf("http://farm%d.test/page", i))
			m.robotsTxt.mu.RLock()
			peak = max(peak, m.robotsTxt.bytes)
			m.robotsTxt.mu.RUnlock()
		}
		grown := int64(liveHeap()) - int64(before)
		m.robotsTxt.mu.RLock()
		n := len(m.robotsTxt.origins)
		m.robotsTxt.mu.RUnlock()
		t.Logf("40 origins with %d B robots.txt files: %d cached, %.1f MB estimated at most (budget %d MB), live heap +%.1f MB",
			len(body), n, float64(peak)/1e6, budget>>20, float64(grown)/1e6)
		require.LessOrEqual(t, peak, int64(budget))
		require.Less(t, n, 40)
		require.Less(t, grown, int64(2*budget), "the estimate keeps the real heap near the budget")
	})
}
