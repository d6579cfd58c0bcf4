package status

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
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
	cfg.Default.Jitter, cfg.Default.Backoff.Jitter = throttle.Jitter{}, throttle.Jitter{} // the same crawl each run
	shop := cfg.Default
	shop.Delay = 250 * time.Millisecond
	apiCfg := cfg.Default
	apiCfg.Delay = 200 * time.Millisecond
	slow := cfg.Default
	slow.AutoThrottle.Enabled, slow.Delay = true, 0 // AutoThrottle's recipe: Delay would floor it
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
	// gated.example's robots.txt was never fetched: the queue fetches it
	// (through the throttle, behind the server's 120 s gate) and holds the
	// group until then.
	require.Contains(t, page, "2 waiting for a time")
	require.Contains(t, page, "1 waiting for robots.txt")
	require.Contains(t, page, `<polyline class="sig" points="`)
}

// TestStatusSeriesJSON: the JSON carries what the page draws: the busy
// scopes' 2xx and signals by step, the queues' backlogs, the scopes in
// backoff, robots.txt's state.
func TestStatusSeriesJSON(t *testing.T) {
	h, m, stop := crawlScene(t)
	defer stop()
	st := m.Stats()
	var doc statusJSON
	require.NoError(t, json.Unmarshal(serveStatus(h, http.MethodGet, "/?format=json", nil).Body.Bytes(), &doc))
	require.Equal(t, st.InBackoff, doc.InBackoff)
	require.Len(t, doc.Series, len(st.Series))
	for i, s := range doc.Series {
		want := &st.Series[i]
		require.Equal(t, want.Key, s.Key)
		require.True(t, want.Start.Equal(s.Start) && want.Since.Equal(s.Since), s.Key)
		require.Equal(t, 10.0, s.StepS)
		for k, b := range want.Buckets {
			require.Equal(t, b.OK, s.OK[k], "%s step %d", s.Key, k)
			require.Equal(t, b.Signals, s.Signals[k], "%s step %d", s.Key, k)
		}
	}
	flaky := doc.Series[slices.IndexFunc(doc.Series, func(s seriesJSON) bool { return s.Key == "flaky.example" })]
	var signals uint32
	for _, n := range flaky.Signals {
		signals += n
	}
	require.Equal(t, uint32(scopeCounts(st, "flaky.example").Signals), signals, "the outage's 503s, all in the 15 minutes")
	require.NotZero(t, signals)
	require.Equal(t, robotsJSON{Enabled: true, Client: true, Origins: 6, Fetching: 1, Rules: 3, NoRules: 2, Delays: 1,
		Note: robotsNote(&st.Robots, st.Totals.Robots)}, doc.Robots)
	require.Len(t, doc.Queues, 1)
	q := doc.Queues[0]
	require.Equal(t, "frontier", q.Name)
	require.Equal(t, 1898, q.Len)
	require.Equal(t, 2, q.Waiting)
	require.Equal(t, 1, q.Robots)
	require.Equal(t, []string{"news.example"}, q.Top[0].Keys)
	require.Equal(t, "waiting", q.Top[0].State)
	require.False(t, q.Top[0].ReadyAt.IsZero())
}

// scopeCounts returns the counts of the scope key in st.
func scopeCounts(st throttle.Stats, key string) throttle.Counts {
	for _, s := range st.Scopes {
		if s.Key == key {
			return s.Counts
		}
	}
	return throttle.Counts{}
}

// TestStatusRobotsNote: why the robots.txt count is what it is, zero
// above all, in words.
func TestStatusRobotsNote(t *testing.T) {
	for _, c := range []struct {
		r       throttle.RobotsStats
		fetched uint64
		want    string
	}{
		{throttle.RobotsStats{}, 0, "off (Config.Robots.Enabled is false)"},
		{throttle.RobotsStats{Enabled: true}, 0, "no robots.txt fetched yet"},
		{throttle.RobotsStats{Enabled: true, Client: true, Origins: 2, Rules: 2}, 0, "fetched with Config.Robots.Client"},
		{throttle.RobotsStats{Enabled: true, Origins: 2, Fetching: 2}, 0, "the first fetches are under way"},
		{throttle.RobotsStats{Enabled: true, Origins: 3, NoRules: 2, Failed: 1}, 3, "None asks for a delay"},
		{throttle.RobotsStats{Enabled: true, Origins: 3, Failed: 3}, 3, "3 failed (a 5xx, a network error or a timeout"},
		{throttle.RobotsStats{Enabled: true, Origins: 1, Rules: 1, Delays: 1}, 1, "1 host has a robots.txt delay"},
		{throttle.RobotsStats{Enabled: true, Enforce: true}, 0, "Enforced"},
	} {
		require.Contains(t, robotsNote(&c.r, c.fetched), c.want, "%+v", c.r)
	}
}
