package throttle

// Issue 16 item 2: what a new user of robots.txt handling met. robots.txt
// fetches counted as pages in Stats and the hooks, with no way to tell
// them apart; the first page of each origin waited a whole Delay behind
// its robots.txt. (Enforcing Disallow: robotsenforce_test.go.)

import (
	"net/http"
	"net/url"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hookLog records the Admitted, Released and Backoff events of a manager.
type hookLog struct {
	mu       sync.Mutex
	admitted []hooks.Admitted
	released []hooks.Released
	backoff  []hooks.Backoff
}

func (l *hookLog) hooks() hooks.Hooks {
	return hooks.Hooks{
		Admitted: func(e hooks.Admitted) { l.mu.Lock(); l.admitted = append(l.admitted, e); l.mu.Unlock() },
		Released: func(e hooks.Released) { l.mu.Lock(); l.released = append(l.released, e); l.mu.Unlock() },
		Backoff:  func(e hooks.Backoff) { l.mu.Lock(); l.backoff = append(l.backoff, e); l.mu.Unlock() },
	}
}

// urlOf is u as a string, "" for nil.
func urlOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.String()
}

// TestRobotsCountedApart: the user's crawl. An origin whose robots.txt is
// a 404 and two pages: Stats shows 2 page requests answered 2xx and 1
// robots.txt fetch, no 4xx, in the scope and in the totals, also once the
// scope is forgotten; the hooks see the fetch marked, with its URL, so a
// metric of pages can skip it.
func TestRobotsCountedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsStatus: 404}
		var log hookLog
		m := robotsManager(t, func(c *Config) { c.Hooks = log.hooks() })
		client := &http.Client{Transport: m.Transport(site)}
		fetchPage(t, client, "http://shop.example/a", "")
		fetchPage(t, client, "http://shop.example/b?q=1", "")

		want := Counts{Requests: 2, Responses: [6]uint64{2: 2}, Robots: 1}
		st := m.Stats()
		assert.Equal(t, want, st.Totals)
		require.Len(t, st.Scopes, 1)
		assert.Equal(t, "shop.example", st.Scopes[0].Key)
		assert.Equal(t, want, st.Scopes[0].Counts)

		log.mu.Lock()
		type ev struct {
			URL    string
			Robots bool
			Status int
		}
		var released []ev
		for _, e := range log.released {
			released = append(released, ev{urlOf(e.URL), e.Robots, e.Status})
		}
		var admitted []ev
		for _, e := range log.admitted {
			admitted = append(admitted, ev{urlOf(e.URL), e.Robots, 0})
		}
		log.mu.Unlock()
		assert.Equal(t, []ev{
			{"http://shop.example/robots.txt", true, 404},
			{"http://shop.example/a", false, 200},
			{"http://shop.example/b?q=1", false, 200},
		}, released)
		assert.Equal(t, []ev{
			{"http://shop.example/robots.txt", true, 0},
			{"http://shop.example/a", false, 0},
			{"http://shop.example/b?q=1", false, 0},
		}, admitted)

		// Forgotten for idleness, the scope's counts stay in the totals,
		// the robots.txt fetch apart.
		time.Sleep(2 * time.Hour)
		for i := range m.shards {
			sh := &m.shards[i]
			sh.mu.Lock()
			m.sweep(sh, time.Now())
			sh.mu.Unlock()
		}
		st = m.Stats()
		assert.Empty(t, st.Scopes, "shop.example forgotten")
		assert.Equal(t, want, st.Totals)
	})
}

// TestRobotsSignalCountedApart: a 503 on robots.txt backs the host off (the
// policy learns from it, the Backoff hook says so, marked), but it is no
// signal of the pages in Stats.
func TestRobotsSignalCountedApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &robotsSite{robotsStatus: 503}
		var log hookLog
		m := robotsManager(t, func(c *Config) { c.Hooks = log.hooks() })
		fetchPage(t, &http.Client{Transport: m.Transport(site)}, "http://shop.example/a", "")
		a := scopeStat(m.Stats(), "shop.example")
		require.NotNil(t, a)
		assert.Equal(t, Counts{Requests: 1, Responses: [6]uint64{2: 1}, Robots: 1}, a.Counts)
		assert.Positive(t, a.BackoffDelay, "the scope learned from the 503 on robots.txt")
		log.mu.Lock()
		defer log.mu.Unlock()
		require.Len(t, log.backoff, 1)
		assert.True(t, log.backoff[0].Robots)
		assert.Equal(t, 503, log.backoff[0].Status)
	})
}

// timedSite answers robots.txt (after latency) with robotsTxt or
// robotsStatus, and pages with 200 at once, recording when each page
// request came.
type timedSite struct {
	robotsTxt    string
	robotsStatus int
	latency      time.Duration
	t0           time.Time
	failPages    int // the first failPages pages answer 503
	mu           sync.Mutex
	pages        []time.Duration
	robotsAt     []time.Duration
}

func (s *timedSite) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	if req.URL.Path == "/robots.txt" {
		s.robotsAt = append(s.robotsAt, time.Since(s.t0))
		s.mu.Unlock()
		time.Sleep(s.latency)
		st := s.robotsStatus
		if st == 0 {
			st = 200
		}
		return respond(req, st, s.robotsTxt), nil
	}
	s.pages = append(s.pages, time.Since(s.t0))
	fail := len(s.pages) <= s.failPages
	s.mu.Unlock()
	if fail {
		return respond(req, 503, "busy"), nil
	}
	return respond(req, 200, "page"), nil
}

// TestRobotsFirstPageTiming: the robots.txt fetch takes a slot but is no
// start for the scope's Delay: with Delay 1 s the first page starts as
// soon as robots.txt is in (100 ms), the next one Delay after the first.
// When robots.txt asks for a delay (Crawl-delay: 5) the fetch counts as a
// start, the polite reading: the first page 5 s after it, the second 5 s
// after the first. A 503 on robots.txt backs the scope off from the
// fetch's start (a 429 under rampup too, by rampup's halved pace), and
// so does a scope already backing off when robots.txt is fetched again.
// Under rampup the fetch is a start whatever its answer: rampup paces at
// the server's limit, which counts the fetch.
func TestRobotsFirstPageTiming(t *testing.T) {
	crawl := func(t *testing.T, site *timedSite, mutate func(*Config)) *ThrottlingManager {
		m := robotsManager(t, func(c *Config) {
			c.Default.Delay, c.Default.Concurrency = time.Second, 1
			c.Default.Backoff.Jitter = Jitter{}
			if mutate != nil {
				mutate(c)
			}
		})
		client := &http.Client{Transport: m.Transport(site)}
		site.t0 = time.Now()
		for _, p := range []string{"/a", "/b", "/c"} {
			fetchPage(t, client, "http://shop.example"+p, "")
		}
		return m
	}
	t.Run("no Crawl-delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			site := &timedSite{robotsTxt: "User-agent: *\nDisallow: /private\n", latency: 100 * time.Millisecond}
			crawl(t, site, nil)
			assert.Equal(t, []time.Duration{0}, site.robotsAt)
			assert.Equal(t, []time.Duration{100 * ms, 1100 * ms, 2100 * ms}, site.pages,
				"the first page right after robots.txt, then Delay apart")
		})
	})
	t.Run("404", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			site := &timedSite{robotsStatus: 404, latency: 100 * time.Millisecond}
			crawl(t, site, nil)
			assert.Equal(t, []time.Duration{100 * ms, 1100 * ms, 2100 * ms}, site.pages)
		})
	})
	t.Run("404 under rampup", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The first page a gap of the pace (Delay 1 s) after the
			// fetch's start: right behind it, nginx without a burst
			// refused it, and the refusal was taken for the limit's.
			site := &timedSite{robotsStatus: 404, latency: 100 * time.Millisecond}
			crawl(t, site, func(c *Config) { c.Default.Rampup.Enabled = true })
			require.Len(t, site.pages, 3)
			assert.Equal(t, time.Second, site.pages[0])
		})
	})
	t.Run("SlotDelay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			site := &timedSite{robotsStatus: 404, latency: 100 * time.Millisecond}
			crawl(t, site, func(c *Config) { c.Default.Delay, c.Default.SlotDelay = 0, 2*time.Second })
			assert.Equal(t, []time.Duration{100 * ms, 2100 * ms, 4100 * ms}, site.pages,
				"no slot delay behind robots.txt either")
		})
	})
	t.Run("Crawl-delay 5", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			site := &timedSite{robotsTxt: "User-agent: *\nCrawl-delay: 5\n", latency: 100 * time.Millisecond}
			crawl(t, site, nil)
			assert.Equal(t, []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second}, site.pages,
				"5 s after the robots.txt request, then 5 s apart")
		})
	})
	t.Run("Request-rate under Delay", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// Request-rate 1/500ms asks less than Delay: the configured
			// Delay rules, from the robots.txt fetch's start.
			site := &timedSite{robotsTxt: "User-agent: *\nRequest-rate: 2/1s\n", latency: 100 * time.Millisecond}
			crawl(t, site, nil)
			assert.Equal(t, []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}, site.pages)
		})
	})
	t.Run("503", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			site := &timedSite{robotsStatus: 503, latency: 100 * time.Millisecond}
			m := crawl(t, site, nil)
			b := scopeStat(m.Stats(), "shop.example")
			require.NotNil(t, b)
			require.Greater(t, b.BackoffDelay, time.Second)
			assert.Equal(t, b.BackoffDelay, site.pages[0], "the first page waits the backoff delay after robots.txt")
		})
	})
	t.Run("refetch while backing off", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// The page's 503 raised the delay; robots.txt, fetched again
			// after its TTL, counts as a start then: the next page waits
			// the backoff delay after it, not right after it.
			site := &timedSite{robotsStatus: 404, failPages: 1}
			m := robotsManager(t, func(c *Config) {
				c.Default.Delay, c.Default.Concurrency = time.Second, 1
				c.Default.Backoff.Jitter = Jitter{}
				c.Robots.TTL = 10 * time.Second
			})
			client := &http.Client{Transport: m.Transport(site)}
			site.t0 = time.Now()
			fetchPage(t, client, "http://shop.example/a", "")
			time.Sleep(20 * time.Second)
			fetchPage(t, client, "http://shop.example/b", "")
			b := scopeStat(m.Stats(), "shop.example")
			require.NotNil(t, b)
			require.Greater(t, b.BackoffDelay, time.Second)
			require.Len(t, site.robotsAt, 2)
			assert.Equal(t, b.BackoffDelay, site.pages[1]-site.robotsAt[1])
		})
	})
	t.Run("429 under rampup", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			// With rampup on, rampup takes a 429, not backoff: refused
			// before any rate was proven, it halves the configured pace
			// (1 s to 2 s); the signal makes the fetch a start, so the
			// first page waits that delay after robots.txt, not 100 ms.
			site := &timedSite{robotsStatus: 429, latency: 100 * time.Millisecond}
			m := crawl(t, site, func(c *Config) { c.Default.Rampup.Enabled = true })
			assert.Equal(t, 2*time.Second, site.pages[0])
			b := scopeStat(m.Stats(), "shop.example")
			require.NotNil(t, b)
			assert.Zero(t, b.BackoffDelay, "rampup's, not backoff's")
		})
	})
}
