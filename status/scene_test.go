package status

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/stretchr/testify/require"
)

// crawlSite is one made-up site of crawlScene: how it answers a request
// started at a time.
type crawlSite struct {
	host    string
	robots  string        // its robots.txt; "": a 404
	latency time.Duration // how long it takes to answer
	// answer returns the status and the Retry-After (seconds, 0: none)
	// of a request started at t (since the crawl's start).
	answer func(t time.Duration) (status, retryAfter int)
}

// limiter is a server's token bucket: rate per second, burst 1.
type limiter struct {
	rate float64
	next time.Duration
}

func (l *limiter) take(t time.Duration) bool {
	if t < l.next {
		return false
	}
	l.next = max(l.next, t-time.Duration(float64(time.Second)/l.rate)) + time.Duration(float64(time.Second)/l.rate)
	return true
}

// crawlScene is a realistic crawl for the page's picture, in fake time:
// 20 minutes over several sites at their own paces, through TryAcquire
// at 100 ms ticks, so the charts have 15 minutes of history:
//
//	shop.example   fast, every answer a 200
//	api.example    a limiter of 2/s (0.7/s from minute 13 to 16) that answers 429 with Retry-After: 1
//	flaky.example  an outage (503) from minute 9 to minute 12, ongoing at the end in part
//	news.example, blog.example (Crawl-delay: 3), slow.example (AutoThrottle, 1.5s answers)
//	30 small sites, once a minute each
//
// and a ReadyQueue, "frontier", holding 1,898 requests of three sites,
// one of which is gated by a 429's Retry-After, and a caller waiting in
// Acquire for flaky.example's backoff. The handler is made
// before the crawl, with the queue. stop releases everything.
func crawlScene(t testing.TB) (h http.Handler, m *throttle.ThrottlingManager, stop func()) {
	t.Helper()
	start := time.Date(2026, 11, 27, 9, 0, 0, 0, time.UTC)
	clock := throttletest.NewClock(start)
	api := &limiter{rate: 2}
	sites := []crawlSite{
		{host: "shop.example", robots: "User-agent: *\nDisallow: /cart\n", latency: 120 * time.Millisecond},
		{host: "api.example", latency: 80 * time.Millisecond, answer: func(t time.Duration) (int, int) {
			api.rate = 2
			if t >= 13*time.Minute && t < 16*time.Minute {
				api.rate = 0.7 // the API lowers its limit for a while
			}
			if api.take(t) {
				return 200, 0
			}
			return 429, 1
		}},
		{host: "flaky.example", latency: 300 * time.Millisecond, answer: func(t time.Duration) (int, int) {
			if t >= 9*time.Minute && t < 12*time.Minute || t >= 18*time.Minute && t%(20*time.Second) < 8*time.Second {
				return 503, 0
			}
			return 200, 0
		}},
		{host: "news.example", robots: "User-agent: *\nAllow: /\n", latency: 200 * time.Millisecond},
		{host: "blog.example", robots: "User-agent: *\nCrawl-delay: 3\n", latency: 250 * time.Millisecond},
		{host: "slow.example", latency: 1500 * time.Millisecond},
	}
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Default.Jitter = throttle.Jitter{}
	shop := cfg.Default
	shop.Delay = 250 * time.Millisecond
	apiCfg := cfg.Default
	apiCfg.Delay = 200 * time.Millisecond
	slow := cfg.Default
	slow.AutoThrottle.Enabled = true
	cfg.Scopes = map[string]throttle.ScopeConfig{"shop.example": shop, "api.example": apiCfg, "slow.example": slow}
	byHost := map[string]*crawlSite{}
	for i := range sites {
		byHost[sites[i].host] = &sites[i]
	}
	site := throttletest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		s := byHost[req.URL.Hostname()]
		if req.URL.Path == "/robots.txt" && s != nil && s.robots != "" {
			return throttletest.Response(req, 200, s.robots), nil
		}
		return throttletest.Response(req, 404, ""), nil
	})
	var transport http.RoundTripper
	cfg.Robots.Client = &http.Client{Transport: throttletest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		return transport.RoundTrip(req)
	})}
	m, err := throttle.New(cfg)
	require.NoError(t, err)
	transport = m.Transport(site)
	q := throttle.NewReadyQueue(m)
	h = Handler(m, WithQueue("frontier", q))

	ctx, cancel := context.WithCancel(context.Background())
	for _, s := range sites[:5] { // their robots.txt first, through the throttle
		_, err := m.RobotsFor(ctx, get(t, "http://"+s.host+"/"))
		require.NoError(t, err)
	}
	for i := range 30 {
		sites = append(sites, crawlSite{host: fmt.Sprintf("site%02d.example", i), latency: 400 * time.Millisecond})
	}
	reqs := make([]*http.Request, len(sites))
	for i, s := range sites {
		reqs[i] = get(t, "http://"+s.host+"/page")
	}
	const tick = 100 * time.Millisecond
	for el := time.Duration(0); el < 20*time.Minute; el += tick {
		for i := range sites {
			s := &sites[i]
			if i >= 6 && (el/tick)%600 != time.Duration(i*17%600) {
				continue // a small site: once a minute
			}
			p, _, err := m.TryAcquire(reqs[i])
			require.NoError(t, err)
			if p == nil {
				continue
			}
			status, retry := 200, 0
			if s.answer != nil {
				status, retry = s.answer(el)
			}
			resp := &http.Response{StatusCode: status, Header: http.Header{}}
			if retry > 0 {
				resp.Header.Set("Retry-After", strconv.Itoa(retry))
			}
			fb := throttle.DefaultFeedback(clock.Now(), resp, nil)
			fb.Latency = s.latency
			p.ReleaseFeedback(fb)
		}
		clock.Advance(tick)
	}

	// A backlog: 1,900 requests, and one caller waiting in Acquire.
	gate := get(t, "http://gated.example/")
	p, _, err := m.TryAcquire(gate)
	require.NoError(t, err)
	p.Release(&http.Response{StatusCode: 429, Header: http.Header{"Retry-After": {"120"}}}, nil)
	for host, n := range map[string]int{"news.example": 1200, "blog.example": 500, "gated.example": 200} {
		for i := range n {
			require.NoError(t, q.Push(get(t, fmt.Sprintf("http://%s/p%d", host, i)), 0))
		}
	}
	for { // one request of each site goes: the groups wait for their times
		req, p, _, err := q.TryPop()
		require.NoError(t, err)
		if req == nil {
			break
		}
		p.Release(&http.Response{StatusCode: 200, Header: http.Header{}}, nil)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if p, err := m.Acquire(ctx, get(t, "http://flaky.example/")); err == nil {
			p.Release(nil, context.Canceled)
		}
	}()
	for m.Waiting() < 1 {
		time.Sleep(time.Millisecond)
	}
	return h, m, func() {
		cancel()
		<-done
	}
}

// get is a GET request of url.
func get(t testing.TB, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	return req
}

// TestStatusCrawlScene: the realistic crawl has what the picture must
// show: charts with 2xx and signals, scopes in backoff, a queue's
// backlog, robots.txt fetched.
func TestStatusCrawlScene(t *testing.T) {
	h, m, stop := crawlScene(t)
	defer stop()
	st := m.Stats()
	require.GreaterOrEqual(t, len(st.Series), 6, "the six sites with pages every few seconds")
	require.GreaterOrEqual(t, st.InBackoff, 2)
	require.Equal(t, uint64(5), st.Totals.Robots)
	page := serveStatus(h, http.MethodGet, "/", nil).Body.String()
	require.Contains(t, page, "frontier: 1898 requests in 3 groups")
	require.Contains(t, page, "3 waiting for a time")
	require.Contains(t, page, `<polyline class="sig" points="`)
}
