package main

import (
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
)

// The two simulated sites, on one local HTTP server, told apart by the
// Host header.
const (
	shopHost = "shop.test"
	apiHost  = "api.test"

	// shop.test accepts anything; the crawl's own limits for it are
	// Concurrency 2 and Delay 100ms (10 req/s, with the default ±50 %
	// jitter).
	shopConcurrency = 2
	shopDelay       = 100 * time.Millisecond

	// api.test allows 5 req/s (a token bucket of 5 tokens refilled at 5
	// per second) and answers 429 with Retry-After beyond. The crawl
	// knows it and spaces requests 200ms..220ms (Delay 200ms, jitter
	// 0..+10 %: never faster than the limit).
	apiRate  = 5.0
	apiDelay = 200 * time.Millisecond
	apiConc  = 2
)

// hosts are the sites, in display order.
var hosts = []string{shopHost, apiHost}

// limitRate is the rate each site should see from the whole fleet, in
// requests per second.
func limitRate(host string) float64 {
	if host == shopHost {
		return float64(time.Second) / float64(shopDelay)
	}
	return apiRate
}

// scopeConfigs are the workers' throttle settings for the two sites.
func scopeConfigs() map[string]throttle.ScopeConfig {
	shop := throttle.DefaultConfig().Default
	shop.Concurrency, shop.Delay = shopConcurrency, shopDelay
	api := throttle.DefaultConfig().Default
	api.Concurrency, api.Delay = apiConc, apiDelay
	api.Jitter = throttle.Jitter{Min: 0, Max: 0.1}
	return map[string]throttle.ScopeConfig{shopHost: shop, apiHost: api}
}

// event is one request a site received: when, and the status it got.
type event struct {
	at     time.Time
	status int
}

// siteLog is what one site saw.
type siteLog struct {
	mu       sync.Mutex
	events   []event // in arrival order
	inFlight int
	peak     int // most requests in flight at once
	tickPeak int // the same since the last tick
}

func (l *siteLog) arrive(now time.Time, status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event{now, status})
	if status != http.StatusOK {
		return
	}
	l.inFlight++
	l.peak = max(l.peak, l.inFlight)
	l.tickPeak = max(l.tickPeak, l.inFlight)
}

func (l *siteLog) leave() {
	l.mu.Lock()
	l.inFlight--
	l.mu.Unlock()
}

// tick returns the events since index from and the peak in flight since
// the previous tick.
func (l *siteLog) tick(from int) ([]event, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	peak := l.tickPeak
	l.tickPeak = l.inFlight
	return append([]event(nil), l.events[from:]...), peak
}

// siteServer is the local web server of both sites for one phase.
type siteServer struct {
	logs map[string]*siteLog

	mu     sync.Mutex
	tokens float64 // api.test's bucket
	filled time.Time
}

func newSiteServer() *siteServer {
	s := &siteServer{logs: map[string]*siteLog{}, tokens: apiRate}
	for _, h := range hosts {
		s.logs[h] = &siteLog{}
	}
	return s
}

// take takes a token from api.test's bucket at now, or says how long
// until there is one.
func (s *siteServer) take(now time.Time) (bool, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.filled.IsZero() {
		s.tokens = min(apiRate, s.tokens+now.Sub(s.filled).Seconds()*apiRate)
	}
	s.filled = now
	if s.tokens >= 1 {
		s.tokens--
		return true, 0
	}
	return false, time.Duration((1 - s.tokens) / apiRate * float64(time.Second))
}

func (s *siteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	log := s.logs[host]
	if log == nil {
		http.NotFound(w, r)
		return
	}
	work := 20 * time.Millisecond
	if host == apiHost {
		if ok, wait := s.take(now); !ok {
			log.arrive(now, http.StatusTooManyRequests)
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
	} else {
		work = 50*time.Millisecond + rand.N(100*time.Millisecond) // 50..150ms
	}
	log.arrive(now, http.StatusOK)
	t := time.NewTimer(work) // the site's work on the page
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	// Out of flight before the response is sent (when the handler
	// returns), so the count never includes a request whose permit the
	// crawler has released.
	log.leave()
	w.Header().Set("Content-Type", "text/html")
	_, _ = w.Write([]byte("<html><body>a page</body></html>\n"))
}
