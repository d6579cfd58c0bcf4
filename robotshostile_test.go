package throttle

// A hostile pass over robots.txt fetching: what a hostile site, or a
// link farm, can send in a robots.txt or around it.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/robots"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// robotsBytes returns what the cache counts (c.bytes) and the sum of its
// entries' sizes, which must agree.
func robotsBytes(c *robotsCache) (counted, sum int64) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for _, e := range c.origins {
		sum += e.size
	}
	return c.bytes, sum
}

// fetchesOf counts the robots.txt fetches site got for host.
func (s *hostsSite) fetchesOf(host string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, h := range s.robotsOrder {
		if h == host {
			n++
		}
	}
	return n
}

// TestHostileRobotsRefetchKeepsTheBudget: an origin's robots.txt fetched
// again after its TTL kept its old rules' size counted in the cache's
// budget (Robots.MaxBytes) and counted the new rules on top: each refetch
// leaked the file's size, until the budget looked spent and every new
// fetch dropped every other origin's rules (fetched again when next
// met). Here 5 refetches of a, then b and c: with MaxBytes room for 3
// files, b must stay cached.
func TestHostileRobotsRefetchKeepsTheBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sb strings.Builder
		sb.WriteString("User-agent: *\n")
		for i := range 200 {
			fmt.Fprintf(&sb, "Disallow: /private/%d/\n", i)
		}
		txt := sb.String()
		size := robots.ParseBytes([]byte(txt)).HeapSize()
		site := &hostsSite{def: hostRobots{txt: txt}}
		m := robotsManager(t, func(c *Config) {
			c.Robots.TTL = time.Hour
			c.Robots.MaxBytes = 3*size + size/2
		})
		client := &http.Client{Transport: m.Transport(site)}
		fetchPage(t, client, "http://a.example/", "")
		for range 5 {
			time.Sleep(time.Hour + time.Minute)
			fetchPage(t, client, "http://a.example/", "")
		}
		assert.Equal(t, 6, site.fetchesOf("a.example"))
		fetchPage(t, client, "http://b.example/", "")
		fetchPage(t, client, "http://c.example/", "")
		fetchPage(t, client, "http://b.example/again", "")
		assert.Equal(t, 1, site.fetchesOf("b.example"), "b's rules were kept: the budget has room for them")
		counted, sum := robotsBytes(m.robotsTxt)
		assert.Equal(t, sum, counted, "the budget counts each cached file once")
		assert.Equal(t, 3*size, counted)
	})
}

// TestHostileRobots429: a robots.txt answered 429 (Too Many Requests) was
// taken as "no robots.txt" (a 4xx: everything allowed, no Crawl-delay)
// and cached for the whole TTL, a day: a site that rate-limits its
// robots.txt lost its Disallow rules and its Crawl-delay for a day. A 429
// is a failure now, as a 5xx (Google reads it so too): rules fetched
// before are kept, none means unreachable (under Enforce, nothing is
// sent), and it is fetched again after a minute.
func TestHostileRobots429(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := &hostsSite{def: hostRobots{status: 429}}
		m := robotsManager(t, func(c *Config) { c.Robots.Enforce = true })
		client := &http.Client{Transport: m.Transport(site)}
		_, err := client.Get("http://busy.example/private/x")
		var de *DisallowedError
		require.ErrorAs(t, err, &de)
		assert.True(t, de.Unreachable, "a 429 is no answer")
		assert.Equal(t, time.Now().Add(time.Minute), de.RetryAt)
		r, err := m.RobotsFor(context.Background(), get(t, "http://busy.example/"))
		require.NoError(t, err)
		assert.Same(t, disallowAll, r)

		site.mu.Lock()
		site.def = hostRobots{txt: "User-agent: *\nDisallow: /private\nCrawl-delay: 4\n"}
		site.mu.Unlock()
		time.Sleep(time.Minute)
		_, err = client.Get("http://busy.example/private/x")
		require.ErrorAs(t, err, &de)
		assert.False(t, de.Unreachable, "its rules, fetched again after a minute")
		fetchPage(t, client, "http://busy.example/public", "")
		d, why, _ := m.scopeDelay(t, "busy.example")
		assert.Equal(t, ReasonRobots, why)
		assert.Equal(t, 4*time.Second, d)
		for _, s := range site.saw() {
			assert.NotContains(t, s, "/private")
		}
		assert.Equal(t, 2, site.fetchesOf("busy.example"))
	})
}

// TestHostileRobotsAbsurdDelays: Crawl-delay and Request-rate values a
// hostile or careless site may write: negative, NaN, infinite, 1e308,
// 10^6 s, hex, huge integers, a rate of 1/0. The fetched delay is either
// ignored (the configured Delay rules) or capped at Robots.MaxDelay (60 s);
// none panics, none overflows.
func TestHostileRobotsAbsurdDelays(t *testing.T) {
	for _, tc := range []struct {
		line string
		want time.Duration // 0: ignored
	}{
		{"Crawl-delay: -1", 0},
		{"Crawl-delay: -0.5", 0},
		{"Crawl-delay: NaN", 0},
		{"Crawl-delay: Inf", 0},
		{"Crawl-delay: +Inf", 0},
		{"Crawl-delay: 0x10", 0},
		{"Crawl-delay: 1e308", 0},
		{"Crawl-delay: 1000000", time.Minute},
		{"Crawl-delay: 99999999999999999999999999999999999", time.Minute},
		{"Crawl-delay: 0.0000000001", 0},
		{"Crawl-delay: 2.5", 2500 * time.Millisecond},
		{"Request-rate: 1/0", 0},
		{"Request-rate: 0/1", 0},
		{"Request-rate: -1/5", 0},
		{"Request-rate: 1/1e308", 0},
		{"Request-rate: 1/99999999999999999999999", time.Minute},
		{"Request-rate: 1/5", 5 * time.Second},
	} {
		t.Run(tc.line, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				site := &hostsSite{def: hostRobots{txt: "User-agent: *\n" + tc.line + "\n"}}
				m := robotsManager(t, func(c *Config) { c.Default.Delay = 100 * time.Millisecond })
				client := &http.Client{Transport: m.Transport(site)}
				t0 := time.Now()
				fetchPage(t, client, "http://odd.example/1", "")
				fetchPage(t, client, "http://odd.example/2", "")
				d, why, _ := m.scopeDelay(t, "odd.example")
				if tc.want == 0 {
					assert.NotEqual(t, ReasonRobots, why, "ignored: %v", d)
					assert.Equal(t, 100*time.Millisecond, d)
					return
				}
				assert.Equal(t, ReasonRobots, why)
				assert.Equal(t, tc.want, d)
				assert.Equal(t, 2*tc.want, time.Since(t0), "robots.txt, then two pages that far apart")
			})
		})
	}
}

// TestHostileRobotsManyGroupsBadUTF8: a robots.txt of 500 KiB, nearly all
// of it user-agent groups for other crawlers, with invalid UTF-8 in agent
// names, paths and comments, and a "*" group at its end: the "*" group
// counts (its Disallow rules, its Crawl-delay), the cache counts the file
// at its parsed size, and nothing panics.
func TestHostileRobotsManyGroupsBadUTF8(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var sb strings.Builder
		tail := "User-agent: *\nDisallow: /priv\xffate\nDisallow: /x\nCrawl-delay: 3\n"
		for i := 0; sb.Len() < robots.MaxSize-len(tail)-200; i++ {
			fmt.Fprintf(&sb, "User-agent: bot\xc3\x28%d\nDisallow: /\xe2\x82%d # \xf0\x28\x8c\x28\n", i, i)
		}
		sb.WriteString(tail)
		txt := sb.String()
		require.Less(t, len(txt), robots.MaxSize)
		site := &hostsSite{def: hostRobots{txt: txt}}
		m := robotsManager(t, func(c *Config) { c.Robots.Enforce = true })
		client := &http.Client{Transport: m.Transport(site)}
		fetchPage(t, client, "http://groups.example/page", "")
		_, err := client.Get("http://groups.example/x/1")
		assert.ErrorIs(t, err, ErrDisallowed)
		_, err = client.Get("http://groups.example/priv%FFate")
		assert.ErrorIs(t, err, ErrDisallowed, "a rule with an invalid byte matches it, percent-encoded")
		d, why, _ := m.scopeDelay(t, "groups.example")
		assert.Equal(t, ReasonRobots, why)
		assert.Equal(t, 3*time.Second, d)
		counted, sum := robotsBytes(m.robotsTxt)
		assert.Equal(t, sum, counted)
		assert.Equal(t, robots.ParseBytes([]byte(txt)).HeapSize(), counted)
		t.Logf("%d B of robots.txt, %d groups: %d B cached", len(txt), strings.Count(txt, "User-agent"), counted)
	})
}

// TestHostileRobotsRedirects: a robots.txt that redirects to another host
// is followed (RFC 9309 allows it, up to 5 hops), each hop a request of
// the host it goes to, and the rules found apply to the origin that asked;
// one that redirects to a scheme that is not HTTP (file:, ftp:) fetches
// nothing there and counts as unreachable. (The ftp: URL reached the base
// RoundTripper, which may be one that serves file: URLs.)
func TestHostileRobotsRedirects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		site := fakeRT(func(req *http.Request) (*http.Response, error) {
			if req.URL.Scheme != "http" {
				t.Errorf("a request to %s", req.URL)
				return nil, errors.New("not http")
			}
			switch req.URL.Host + req.URL.Path {
			case "a.example/robots.txt":
				return respond(req, 301, "", "Location", "http://rules.example/robots.txt"), nil
			case "rules.example/robots.txt":
				return respond(req, 200, "User-agent: *\nCrawl-delay: 2\nDisallow: /no\n"), nil
			case "b.example/robots.txt":
				return respond(req, 302, "", "Location", "file:///etc/passwd"), nil
			case "c.example/robots.txt":
				return respond(req, 302, "", "Location", "ftp://c.example/robots.txt"), nil
			}
			return respond(req, 200, "page"), nil
		})
		m := robotsManager(t, func(c *Config) { c.Robots.Enforce = true })
		client := &http.Client{Transport: m.Transport(site)}
		fetchPage(t, client, "http://a.example/page", "")
		_, err := client.Get("http://a.example/no")
		assert.ErrorIs(t, err, ErrDisallowed)
		d, why, _ := m.scopeDelay(t, "a.example")
		assert.Equal(t, ReasonRobots, why, "the rules it was redirected to")
		assert.Equal(t, 2*time.Second, d)
		st := scopeStat(m.Stats(), "rules.example")
		require.NotNil(t, st)
		assert.Equal(t, uint64(1), st.Counts.Robots, "the hop is a request of the host it goes to")

		for _, host := range []string{"b.example", "c.example"} {
			_, err = client.Get("http://" + host + "/page")
			var de *DisallowedError
			require.ErrorAs(t, err, &de, host)
			assert.True(t, de.Unreachable, host)
		}
	})
}

// TestHostileRobotsManyOrigins: a burst of 500 new origins at once, their
// robots.txt taking 1 s each, with Robots.MaxOrigins 50. Entries being
// fetched cannot be dropped, so the cache holds all 500 meanwhile; once
// the fetches end it is back within MaxOrigins, and so are the recorded
// host delays (it used to stay at 500, one dropped per new origin, and
// the delays were dropped at random, even a cached origin's). The callers
// all get their pages, each origin's robots.txt fetched once.
func TestHostileRobotsManyOrigins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, maxOrigins = 500, 50
		site := &hostsSite{def: hostRobots{txt: "User-agent: *\nCrawl-delay: 1\nDisallow: /x\n", latency: time.Second}}
		m := robotsManager(t, func(c *Config) {
			c.Robots.MaxOrigins = maxOrigins
			// Not the global cap's test: behind GlobalConcurrency 16 most
			// fetches would time out waiting their turn (FetchTimeout
			// counts the wait in the throttle).
			c.GlobalConcurrency = 2 * n
		})
		client := &http.Client{Transport: m.Transport(site)}
		workers(n, n, func(i int) { fetchPage(t, client, fmt.Sprintf("http://h%03d.example/", i), "") })
		c := m.robotsTxt
		c.mu.RLock()
		origins, hosts := len(c.origins), len(c.hosts)
		c.mu.RUnlock()
		assert.LessOrEqual(t, origins, maxOrigins, "origins cached once the burst is over")
		assert.LessOrEqual(t, hosts, origins, "host delays recorded")
		counted, sum := robotsBytes(c)
		assert.Equal(t, sum, counted)
		assert.Equal(t, n, len(site.robotsOrder), "one fetch per origin")
		assert.Equal(t, 2*n, len(site.saw()))

		// The delays kept are those of the origins kept.
		c.mu.RLock()
		for k := range c.origins {
			assert.Equal(t, time.Second, c.hostDelayLocked(k.host), k.host)
		}
		c.mu.RUnlock()
	})
}

// BenchmarkRobotsCacheNewOrigin: the cost of meeting a new origin when the
// cache is full (Robots.MaxOrigins origins cached), at 2,000 and at
// 100,000: the oldest is dropped, whatever the size.
func BenchmarkRobotsCacheNewOrigin(b *testing.B) {
	for _, size := range []int{2000, 100000} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			cfg := DefaultConfig()
			cfg.Robots.MaxOrigins = size
			m, err := New(cfg)
			require.NoError(b, err)
			c := m.robotsTxt
			now := time.Unix(1e9, 0)
			add := func(i int) {
				h := fmt.Sprintf("h%d.example", i)
				c.mu.Lock()
				e := c.newEntryLocked(origin{host: h}, h, nil)
				e.ready, e.expires = true, now.Add(time.Hour)
				c.mu.Unlock()
			}
			for i := range size {
				add(i)
			}
			b.ResetTimer()
			for i := range b.N {
				add(size + i)
			}
		})
	}
}
