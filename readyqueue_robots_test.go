package throttle

// A ReadyQueue is as polite as Acquire: it fetches an origin's robots.txt
// before handing out the origin's first request, holding no other host up
// and starting no goroutine per request, applies its delay, and under
// Robots.Enforce never admits what it disallows.

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostsSite is a fake site for many hosts: each host's robots.txt answer
// (hostRobots) takes its latency, or never comes; pages answer at once.
// It records every request, and how many robots.txt fetches ran at once.
type hostsSite struct {
	robots map[string]hostRobots // by host; missing: the default
	def    hostRobots

	mu          sync.Mutex
	seen        []string // host + path
	running     int      // robots.txt fetches in progress
	maxRunning  int
	robotsOrder []string // hosts, in the order their robots.txt was asked
}

type hostRobots struct {
	txt     string
	status  int // 0: 200
	latency time.Duration
	hang    bool // no answer until the request's context ends
}

func (s *hostsSite) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.seen = append(s.seen, req.URL.Host+req.URL.Path)
	if req.URL.Path != "/robots.txt" {
		s.mu.Unlock()
		return respond(req, 200, "page"), nil
	}
	r, ok := s.robots[req.URL.Host]
	if !ok {
		r = s.def
	}
	s.running++
	s.maxRunning = max(s.maxRunning, s.running)
	s.robotsOrder = append(s.robotsOrder, req.URL.Host)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.mu.Unlock()
	}()
	if err := answerAfter(req, r.latency, r.hang); err != nil {
		return nil, err
	}
	st := r.status
	if st == 0 {
		st = 200
	}
	return respond(req, st, r.txt), nil
}

func (s *hostsSite) saw() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.seen)
}

// robotsQueue makes a manager with robots.txt on whose fetches go to site
// through its Transport, and a queue on it.
func robotsQueue(t *testing.T, site http.RoundTripper, mutate func(*Config)) (*ThrottlingManager, *ReadyQueue) {
	t.Helper()
	m := robotsManager(t, mutate)
	m.robotsTxt.client = &http.Client{Transport: m.Transport(site), CheckRedirect: limitRedirects}
	return m, NewReadyQueue(m)
}

// popTimed pops one request and releases its permit at once; it returns
// the URL and the time since t0, or the error.
func popTimed(t *testing.T, q *ReadyQueue, t0 time.Time) (string, time.Duration, error) {
	t.Helper()
	req, p, err := q.Pop(context.Background())
	if p != nil {
		p.Release(ok200, nil)
	}
	u := ""
	if req != nil {
		u = req.URL.String()
	}
	return u, time.Since(t0), err
}

// TestReadyQueueRobotsOverLoopback: a ReadyQueue under Robots.Enforce,
// with DefaultConfig's jitter, against a real server whose robots.txt
// disallows /private and asks for "Crawl-delay: 0.2": the server never
// sees a disallowed URL; each of them comes out of Pop with a
// *DisallowedError naming it, the request itself beside it, and the queue
// goes on; robots.txt is fetched once per host, before its pages; and
// starts in a host (robots.txt included) are at least 0.2 s apart.
func TestReadyQueueRobotsOverLoopback(t *testing.T) {
	site := newLoopbackSite(t, "User-agent: *\nDisallow: /private\nCrawl-delay: 0.2\n")
	var log hookLog
	cfg := DefaultConfig()
	cfg.Default.Delay = 100 * time.Millisecond // the Crawl-delay binds
	cfg.Robots.Enforce = true
	cfg.Hooks = log.hooks()
	m, err := New(cfg)
	require.NoError(t, err)
	m.robotsTxt.client = &http.Client{Transport: m.Transport(site.base), CheckRedirect: limitRedirects}
	q := NewReadyQueue(m)
	client := &http.Client{Transport: site.base}

	var private []string
	for i := range 6 {
		for _, h := range []string{"a.test", "b.test"} {
			u := fmt.Sprintf("http://%s/page%d", h, i)
			if i%2 == 1 {
				u = fmt.Sprintf("http://%s/private/%d", h, i)
				private = append(private, u)
			}
			require.NoError(t, q.Push(get(t, u), 0))
		}
	}
	var (
		mu      sync.Mutex
		refused []string
		sent    int
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	workers(3, 12, func(int) {
		req, p, err := q.Pop(ctx)
		if err != nil {
			var de *DisallowedError
			if assert.ErrorAs(t, err, &de) && assert.NotNil(t, req) {
				assert.ErrorIs(t, err, ErrDisallowed)
				assert.Nil(t, p)
				assert.Same(t, req.URL, de.URL, "the error names the request Pop returned")
				mu.Lock()
				refused = append(refused, req.URL.String())
				mu.Unlock()
			}
			return
		}
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		p.Release(resp, err)
		mu.Lock()
		sent++
		mu.Unlock()
	})
	assert.ElementsMatch(t, private, refused)
	assert.Equal(t, 6, sent)
	assert.Equal(t, 0, q.Len())

	seen := site.saw()
	for _, s := range seen {
		assert.NotContains(t, s, "/private", "the server never sees a disallowed URL")
	}
	for _, h := range []string{"a.test", "b.test"} {
		var paths []string
		for _, s := range seen {
			if p, ok := strings.CutPrefix(s, h); ok {
				paths = append(paths, p)
			}
		}
		assert.Equal(t, []string{"/robots.txt", "/page0", "/page2", "/page4"}, sortedAfterFirst(paths), h)
		var starts []time.Time
		log.mu.Lock()
		for _, e := range log.admitted {
			if e.URL.Host == h {
				starts = append(starts, e.At)
			}
		}
		log.mu.Unlock()
		require.Len(t, starts, 4, h)
		for i := 1; i < len(starts); i++ {
			assert.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 200*time.Millisecond, "%s: start %d", h, i)
		}
	}
}

// sortedAfterFirst returns s with all but its first element sorted.
func sortedAfterFirst(s []string) []string {
	if len(s) > 1 {
		slices.Sort(s[1:])
	}
	return s
}

// TestReadyQueueRobotsFirst: a host's first request comes out only once
// its robots.txt is in (2 s), and the Crawl-delay counts from the fetch;
// a host whose robots.txt hangs holds no other host up: the fast host's
// pages come out meanwhile, and the hanging host's after FetchTimeout (no
// rules: without Enforce its pages go). Each robots.txt is fetched once.
func TestReadyQueueRobotsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{robots: map[string]hostRobots{
			"slow.example": {txt: "User-agent: *\nCrawl-delay: 3\n", latency: 2 * time.Second},
			"hang.example": {hang: true},
			"fast.example": {txt: "User-agent: *\nDisallow: /x\n"},
		}}
		_, q := robotsQueue(t, site, func(c *Config) {
			c.Default.Delay = time.Second
			c.Robots.FetchTimeout = 10 * time.Second
		})
		t0 := time.Now()
		for i := range 2 {
			for _, h := range []string{"hang.example", "slow.example", "fast.example"} {
				require.NoError(t, q.Push(get(t, fmt.Sprintf("http://%s/%d", h, i)), 0))
			}
		}
		type pop struct {
			url string
			at  time.Duration
		}
		var got []pop
		for range 6 {
			u, at, err := popTimed(t, q, t0)
			require.NoError(t, err)
			got = append(got, pop{u, at})
		}
		s := time.Second
		assert.Equal(t, []pop{
			{"http://fast.example/0", 0}, {"http://fast.example/1", s},
			{"http://slow.example/0", 3 * s}, {"http://slow.example/1", 6 * s},
			{"http://hang.example/0", 10 * s}, {"http://hang.example/1", 11 * s},
		}, got)
		assert.ElementsMatch(t, []string{"hang.example", "slow.example", "fast.example"}, site.robotsOrder, "one fetch each")
	})
}

// TestReadyQueueRobotsBoundedFetches: 40 new hosts whose robots.txt takes
// 1 s each, GlobalConcurrency 4: the queue runs at most 2 fetches at once
// (GlobalConcurrency/2), in the order the hosts were met, and so at most
// 2 goroutines beyond the callers'; the hosts whose robots.txt is in are
// handed out meanwhile, one pop per host per fetch pair.
func TestReadyQueueRobotsBoundedFetches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{def: hostRobots{status: 404, latency: time.Second}}
		_, q := robotsQueue(t, site, func(c *Config) { c.GlobalConcurrency = 4 })
		const hosts = 40
		var want []string
		for h := range hosts {
			host := fmt.Sprintf("h%02d.example", h)
			want = append(want, host)
			require.NoError(t, q.Push(get(t, "http://"+host+"/"), 0))
		}
		t0 := time.Now()
		var maxG int
		var got []string
		for range hosts {
			req, p, err := q.Pop(context.Background())
			require.NoError(t, err)
			// Counted at rest (a fetch's goroutine that has handed its
			// origin over may still be on its way out when Pop returns),
			// and only the fetches': runtime.NumGoroutine counts the
			// whole process, where a goroutine of an earlier test may
			// come or go meanwhile (3 once in a full run).
			synctest.Wait()
			maxG = max(maxG, robotsFetchGoroutines())
			got = append(got, req.URL.Host)
			p.Release(ok200, nil)
		}
		// Two fetches start, and end, at one instant: either may come first.
		assert.Equal(t, want, sortedPairs(got), "hosts come out in the order they were met")
		assert.Equal(t, 20*time.Second, time.Since(t0), "two fetches at a time, 1 s each")
		assert.Equal(t, 2, site.maxRunning)
		assert.Equal(t, want, sortedPairs(site.robotsOrder))
		assert.Equal(t, 2, maxG, "goroutines the queue added: its two fetches at once, no more")
	})
}

// sortedPairs returns s with each pair (s[0], s[1]), (s[2], s[3]) ...
// sorted.
func sortedPairs(s []string) []string {
	s = slices.Clone(s)
	for i := 0; i+1 < len(s); i += 2 {
		slices.Sort(s[i : i+2])
	}
	return s
}

// TestReadyQueueRobotsEnforce: under Enforce a disallowed request comes
// out of Pop and TryPop with a *DisallowedError and the request, and no
// permit; an origin whose robots.txt is unreachable (503) has every
// request refused so, with Unreachable and RetryAt; the others go on.
// The site never sees a refused URL.
func TestReadyQueueRobotsEnforce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{robots: map[string]hostRobots{
			"shop.example": {txt: "User-agent: *\nDisallow: /cart\n"},
			"down.example": {status: 503},
		}}
		m, q := robotsQueue(t, site, func(c *Config) { c.Robots.Enforce = true })
		reqs := map[string]*http.Request{}
		for _, u := range []string{"http://shop.example/cart/1", "http://down.example/a", "http://shop.example/a", "http://shop.example/cart/2"} {
			reqs[u] = get(t, u)
			require.NoError(t, q.Push(reqs[u], 0))
		}
		var ok []string
		refused := map[string]*DisallowedError{}
		for range 4 {
			req, p, err := q.Pop(context.Background())
			if err != nil {
				var de *DisallowedError
				require.ErrorAs(t, err, &de)
				assert.Same(t, reqs[req.URL.String()], req)
				assert.Nil(t, p)
				refused[req.URL.String()] = de
				continue
			}
			ok = append(ok, req.URL.String())
			resp, err := site.RoundTrip(req)
			p.Release(resp, err)
		}
		assert.Equal(t, []string{"http://shop.example/a"}, ok)
		require.Len(t, refused, 3)
		assert.False(t, refused["http://shop.example/cart/1"].Unreachable)
		assert.True(t, refused["http://down.example/a"].Unreachable)
		assert.Equal(t, time.Now().Add(time.Minute), refused["http://down.example/a"].RetryAt)
		for _, s := range site.saw() {
			assert.NotContains(t, s, "/cart")
			assert.NotEqual(t, "down.example/a", s)
		}
		assert.Zero(t, m.Stats().InFlight)

		// TryPop refuses the same way.
		req := get(t, "http://shop.example/cart/3")
		require.NoError(t, q.Push(req, 0))
		got, p, _, err := q.TryPop()
		assert.Same(t, req, got)
		assert.Nil(t, p)
		assert.ErrorIs(t, err, ErrDisallowed)
		assert.Equal(t, 0, q.Len())
	})
}

// TestReadyQueueRobotsSharesAFetch: the queue waits for a fetch an
// Acquire caller started, and an Acquire caller for one the queue
// started: each robots.txt is fetched once.
func TestReadyQueueRobotsSharesAFetch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{def: hostRobots{txt: "User-agent: *\nAllow: /\n", latency: 2 * time.Second}}
		m, q := robotsQueue(t, site, nil)
		t0 := time.Now()
		acquired := make(chan time.Duration, 2)
		acquire := func(u string) {
			p, err := m.Acquire(context.Background(), get(t, u))
			if assert.NoError(t, err) {
				p.Release(ok200, nil)
			}
			acquired <- time.Since(t0)
		}
		go acquire("http://a.example/x") // starts a.example's fetch
		time.Sleep(500 * time.Millisecond)
		require.NoError(t, q.Push(get(t, "http://a.example/q"), 0))
		require.NoError(t, q.Push(get(t, "http://b.example/q"), 0))
		u, at, err := popTimed(t, q, t0)
		require.NoError(t, err)
		assert.Equal(t, "http://a.example/q", u)
		assert.Equal(t, 2*time.Second, at, "the Acquire caller's fetch")
		go acquire("http://b.example/x") // waits for the queue's fetch
		u, at, err = popTimed(t, q, t0)
		require.NoError(t, err)
		assert.Equal(t, "http://b.example/q", u)
		assert.Equal(t, 2500*time.Millisecond, at)
		assert.Equal(t, 2*time.Second, <-acquired)
		assert.Equal(t, 2500*time.Millisecond, <-acquired)
		assert.Equal(t, []string{"a.example", "b.example"}, site.robotsOrder)
	})
}

// TestReadyQueueRobotsPopContext: a Pop whose context ends while the only
// host's robots.txt hangs returns its context's error at once, and the
// request stays queued; it comes out once the fetch gives up
// (FetchTimeout). No goroutine is left behind.
func TestReadyQueueRobotsPopContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{def: hostRobots{hang: true}}
		_, q := robotsQueue(t, site, func(c *Config) { c.Robots.FetchTimeout = 5 * time.Second })
		require.NoError(t, q.Push(get(t, "http://hang.example/"), 0))
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		req, p, err := q.Pop(ctx)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Nil(t, req)
		assert.Nil(t, p)
		assert.Equal(t, time.Second, time.Since(t0))
		assert.Equal(t, 1, q.Len())
		u, at, err := popTimed(t, q, t0)
		require.NoError(t, err)
		assert.Equal(t, "http://hang.example/", u)
		assert.Equal(t, 5*time.Second, at)
	})
}

// TestReadyQueueRobotsOff: with robots.txt handling off the queue fetches
// nothing.
func TestReadyQueueRobotsOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{def: hostRobots{txt: "User-agent: *\nDisallow: /\n"}}
		cfg := plainConfig()
		cfg.Robots.Enabled = false
		m, err := New(cfg)
		require.NoError(t, err)
		q := NewReadyQueue(m)
		require.NoError(t, q.Push(get(t, "http://a.example/"), 0))
		req, p, err := q.Pop(context.Background())
		require.NoError(t, err)
		resp, err := site.RoundTrip(req)
		p.Release(resp, err)
		assert.Equal(t, []string{"a.example/"}, site.saw())
	})
}

// robotsFetchGoroutines counts the goroutines running a robots.txt fetch
// (started by robotsCache.start), from every goroutine's stack.
func robotsFetchGoroutines() int {
	buf := make([]byte, 1<<22)
	n := runtime.Stack(buf, true)
	return strings.Count(string(buf[:n]), "created by github.com/crawlerkit/throttle.(*robotsCache).start")
}
