package throttle

// A robots.txt delay is a floor: jitter only lengthens the gaps it asks
// for, on every path that admits requests.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// startsSite is a fake site that records when each request reached it,
// robots.txt included; its answers take no time.
type startsSite struct {
	robotsTxt string
	mu        sync.Mutex
	at        []time.Time
	paths     []string
}

func (s *startsSite) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.at = append(s.at, time.Now())
	s.paths = append(s.paths, req.URL.Path)
	s.mu.Unlock()
	if req.URL.Path == "/robots.txt" {
		return respond(req, 200, s.robotsTxt), nil
	}
	return respond(req, 200, "page"), nil
}

// gaps returns the times between consecutive requests the site saw.
func (s *startsSite) gaps() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var g []time.Duration
	for i := 1; i < len(s.at); i++ {
		g = append(g, s.at[i].Sub(s.at[i-1]))
	}
	return g
}

// crawlPaths are the ways a request is admitted; each sends n pages of
// one host, from 4 workers, to site.
var crawlPaths = map[string]func(t *testing.T, m *ThrottlingManager, site http.RoundTripper, n int){
	"Acquire": func(t *testing.T, m *ThrottlingManager, site http.RoundTripper, n int) {
		workers(4, n, func(i int) {
			req := get(t, fmt.Sprintf("http://shop.example/p%d", i))
			p, err := m.Acquire(context.Background(), req)
			if !assert.NoError(t, err) {
				return
			}
			resp, err := site.RoundTrip(req)
			p.Release(resp, err)
		})
	},
	"Transport": func(t *testing.T, m *ThrottlingManager, site http.RoundTripper, n int) {
		client := &http.Client{Transport: m.Transport(site)}
		workers(4, n, func(i int) { fetchPage(t, client, fmt.Sprintf("http://shop.example/p%d", i), "") })
	},
	"ReadyQueue": func(t *testing.T, m *ThrottlingManager, site http.RoundTripper, n int) {
		q := NewReadyQueue(m)
		for i := range n {
			require.NoError(t, q.Push(get(t, fmt.Sprintf("http://shop.example/p%d", i)), 0))
		}
		workers(4, n, func(int) {
			req, p, err := q.Pop(context.Background())
			if !assert.NoError(t, err) {
				return
			}
			resp, err := site.RoundTrip(req)
			p.Release(resp, err)
		})
	},
}

// workers runs do(0) ... do(n-1) on k goroutines.
func workers(k, n int, do func(i int)) {
	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				do(i)
			}
		})
	}
	wg.Wait()
}

// TestRobotsDelayIsAFloor: with DefaultConfig's ±50 % jitter, no two
// requests of a host whose robots.txt says "Crawl-delay: 2" start less
// than 2 s apart (robots.txt itself included), through Acquire, the
// Transport, a ReadyQueue and a Store (from the first page on), over
// 1,000 starts for each of three seeds; jitter still lengthens gaps. The same holds when the
// configured Delay (3 s) is above the Crawl-delay, whose jitter would
// reach down to 1.5 s. Before the floor, gaps came as short as 1 s.
func TestRobotsDelayIsAFloor(t *testing.T) {
	const n = 1000
	for _, tc := range []struct {
		name  string
		delay time.Duration
	}{{"Delay under Crawl-delay", time.Second}, {"Delay over Crawl-delay", 3 * time.Second}} {
		for _, path := range []string{"Acquire", "Transport", "ReadyQueue", "Store"} {
			for _, seed := range []uint64{1, 2, 3} {
				t.Run(fmt.Sprintf("%s/%s/seed%d", tc.name, path, seed), func(t *testing.T) {
					synctest.Test(t, func(t *testing.T) {
						site := &startsSite{robotsTxt: "User-agent: *\nCrawl-delay: 2\n"}
						cfg := DefaultConfig()
						cfg.Default.Delay = tc.delay
						cfg.JitterSeed = seed
						crawl := crawlPaths[path]
						if path == "Store" {
							cfg.Store = store.NewMemory(nil)
							crawl = crawlPaths["Acquire"]
						}
						m, err := New(cfg)
						require.NoError(t, err)
						m.robotsTxt.client = &http.Client{Transport: m.Transport(site), CheckRedirect: limitRedirects}
						crawl(t, m, site, n)

						gaps := site.gaps()
						require.Equal(t, n, len(gaps), "robots.txt and n pages")
						assert.Equal(t, "/robots.txt", site.paths[0])
						if path == "Store" {
							// With a Store the robots.txt fetch is a start
							// like any, whose gap the store drew before the
							// Crawl-delay was known: the floor holds from
							// the first page on.
							gaps = gaps[1:]
						}
						short := 0
						var sum time.Duration
						for _, g := range gaps {
							if g < 2*time.Second {
								short++
							}
							sum += g
						}
						assert.Zero(t, short, "gaps under the Crawl-delay (the shortest %v)", slices.Min(gaps))
						assert.Greater(t, slices.Max(gaps), 2*time.Second+time.Second/4, "jitter lengthens gaps")
						mean := sum / time.Duration(len(gaps))
						want := max(2*time.Second, tc.delay)
						assert.InDelta(t, float64(want), float64(mean), float64(want)/2, "no wild gaps either")
					})
				})
			}
		}
	}
}

// TestRobotsRefetchHonoursTheFloor: robots.txt fetched again after its
// TTL, of a site that asked "Crawl-delay: 2" before, is a request of the
// site like any: the next start waits 2 s after the fetch started, even
// when the fetch ended (freeing its slot) before robots.txt's answer was
// applied. The fetch used to leave a gap of zero after it until then, so
// a request of the host admitted in between (another origin of the host,
// a TryAcquire) started right behind it.
func TestRobotsRefetchHonoursTheFloor(t *testing.T) {
	cfg := DefaultConfig().Default
	cfg.Jitter, cfg.SlotDelay, cfg.Concurrency = Jitter{}, 0, 4
	s := NewDefaultScopeManager(ScopeParams{Key: "shop.example", Config: cfg, GlobalConcurrency: 16}).(*defaultScope)
	s.setRobotsDelay(2 * time.Second)
	t0 := time.Unix(1e9, 0)
	page := s.Start(t0, 1)
	s.Finish(t0.Add(10*ms), page, &Feedback{Status: 200, Size: -1})

	at := t0.Add(2 * time.Second)
	require.Equal(t, Admission{}, s.Admit(at, 1), "the robots.txt fetch, Crawl-delay after the page")
	var fetch Ticket
	s.startRobots(&fetch, at, 1)
	s.finishRobots(at.Add(100*ms), fetch, &Feedback{Status: 200, Size: -1})
	adm := s.Admit(at.Add(100*ms), 1)
	assert.Equal(t, Admission{At: at.Add(2 * time.Second), Reason: ReasonRobots}, adm,
		"the next page waits the Crawl-delay after the fetch")
}
