package main

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// site is one local test server and what it saw: arrivals, statuses,
// requests in flight, time spent answering.
type site struct {
	name   string
	about  string  // what the server does, for the header
	limit  float64 // the hidden rate limit in req/s; 0 when none
	handle func(ctx context.Context, w http.ResponseWriter, inflight int) int

	mu          sync.Mutex
	arrivals    []time.Time
	inflight    int
	maxInflight int
	ok, tooMany int
	other, cut  int
	busy        time.Duration // total time spent answering
	answers     []answerRec   // every answer, in the order they ended
}

// answerRec is one answered request: when it arrived and its status.
type answerRec struct {
	at     time.Time
	status int
}

func (s *site) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	s.mu.Lock()
	s.arrivals = append(s.arrivals, start)
	s.inflight++
	s.maxInflight = max(s.maxInflight, s.inflight)
	n := s.inflight
	s.mu.Unlock()

	status := s.handle(r.Context(), w, n)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	switch {
	case status == 0:
		s.cut++ // the client went away before the answer
	case status >= 200 && status < 300:
		s.ok++
	case status == http.StatusTooManyRequests:
		s.tooMany++
	default:
		s.other++
	}
	if status != 0 {
		s.busy += time.Since(start)
		s.answers = append(s.answers, answerRec{start, status})
	}
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func answer(w http.ResponseWriter, status int) int {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	w.Write([]byte(http.StatusText(status) + "\n"))
	return status
}

// newFast answers 200 in about 5 ms.
func newFast() *site {
	return &site{name: "fast", about: "200 in 5 ms",
		handle: func(ctx context.Context, w http.ResponseWriter, _ int) int {
			if !sleep(ctx, 5*time.Millisecond) {
				return 0
			}
			return answer(w, http.StatusOK)
		}}
}

// newSlow answers 200 after 300 ms plus 100 ms per other request in flight.
func newSlow() *site {
	return &site{name: "slow", about: "200 in 300 ms + 100 ms per other request in flight",
		handle: func(ctx context.Context, w http.ResponseWriter, inflight int) int {
			if !sleep(ctx, 300*time.Millisecond+time.Duration(inflight-1)*100*time.Millisecond) {
				return 0
			}
			return answer(w, http.StatusOK)
		}}
}

// newLimited answers 200 in 20 ms within a hidden token bucket of rate
// req/s and the given burst, and 429 with Retry-After: 1 above it.
func newLimited(rate float64, burst int) *site {
	b := &bucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: time.Now()}
	return &site{name: "limited", limit: rate,
		about: "hidden limit " + strconv.FormatFloat(rate, 'g', -1, 64) + " req/s (burst " + strconv.Itoa(burst) + "), else 429 + Retry-After: 1",
		handle: func(ctx context.Context, w http.ResponseWriter, _ int) int {
			if !b.take(time.Now()) {
				w.Header().Set("Retry-After", "1")
				return answer(w, http.StatusTooManyRequests)
			}
			if !sleep(ctx, 20*time.Millisecond) {
				return 0
			}
			return answer(w, http.StatusOK)
		}}
}

// bucket is a token bucket: rate tokens a second, at most burst saved.
type bucket struct {
	mu          sync.Mutex
	rate, burst float64
	tokens      float64
	last        time.Time
}

func (b *bucket) take(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// host is the site's simulated host name, fast.example say.
func (s *site) host() string { return s.name + ".example" }

// hosts serves each site at its host name.
type hosts []*site

func (hs hosts) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	for _, s := range hs {
		if r.Host == s.host() {
			s.ServeHTTP(w, r)
			return
		}
	}
	http.NotFound(w, r)
}

// counts returns the requests that arrived, those that arrived in
// (now-d, now], and the 429s answered so far.
func (s *site) counts(now time.Time, d time.Duration) (total, recent, tooMany int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	total = len(s.arrivals)
	for i := total - 1; i >= 0 && now.Sub(s.arrivals[i]) < d; i-- {
		recent++
	}
	return total, recent, s.tooMany
}
