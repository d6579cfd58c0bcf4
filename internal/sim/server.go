package sim

import (
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Response is a model server's answer to one request.
type Response struct {
	// Status is the HTTP status.
	Status int
	// RetryAfter is the Retry-After the server sends, in whole seconds;
	// 0 means no header.
	RetryAfter time.Duration
	// Latency is how long after its arrival the response is delivered.
	Latency time.Duration
	// Header holds the response's other headers (X-RateLimit-*); nil
	// means none.
	Header http.Header
}

// A Server answers requests from a model. Handle is called once per
// request, at its arrival time, in time order: the model's state moves
// with the arrivals, never with a clock of its own.
type Server interface {
	Handle(now time.Time, host string) Response
}

// TokenBucket is a hidden rate limit: Rate tokens per second, at most
// Burst saved; a request takes one token. It starts full.
type TokenBucket struct {
	Rate, Burst float64
	tokens      float64
	last        time.Time
	started     bool
}

// Take takes a token at now. Without one it reports how long until one
// is there.
func (b *TokenBucket) Take(now time.Time) (bool, time.Duration) {
	if b.started {
		b.tokens = math.Min(b.Burst, b.tokens+now.Sub(b.last).Seconds()*b.Rate)
	} else {
		b.tokens, b.started = b.Burst, true
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.Rate * float64(time.Second))
}

// RateLimitServer answers 200 within its hidden token-bucket limit, per
// host, and 429 (or Status) above it, with a Retry-After (whole seconds,
// at least 1: the time until a token is back, rounded up) when RetryAfter
// is set. Both answers take Service.
type RateLimitServer struct {
	Limit      float64 // req/s; the bucket's burst is the same number
	Service    time.Duration
	RetryAfter bool
	// Status is the status answered above the limit; 0 means 429.
	Status int
	// Spread, with Rand, draws each service time uniformly from
	// Service ± Spread (a fraction); 0 keeps it fixed.
	Spread  float64
	Rand    *rand.Rand
	buckets map[string]*TokenBucket
}

// Handle implements Server.
func (s *RateLimitServer) Handle(now time.Time, host string) Response {
	if s.buckets == nil {
		s.buckets = make(map[string]*TokenBucket)
	}
	b := s.buckets[host]
	if b == nil {
		b = &TokenBucket{Rate: s.Limit, Burst: math.Max(1, s.Limit)}
		s.buckets[host] = b
	}
	ok, wait := b.Take(now)
	svc := s.Service
	if s.Spread > 0 && s.Rand != nil {
		svc = time.Duration(float64(svc) * (1 + s.Spread*(2*s.Rand.Float64()-1)))
	}
	if ok {
		return Response{Status: 200, Latency: svc}
	}
	r := Response{Status: limitStatus(s.Status), Latency: svc}
	if s.RetryAfter {
		r.RetryAfter = retryAfter(wait)
	}
	return r
}

// limitStatus is the status a rate-limit server answers above its limit:
// status, or 429 when it is 0.
func limitStatus(status int) int {
	if status == 0 {
		return 429
	}
	return status
}

// retryAfter is the Retry-After a server sends for a wait: whole seconds,
// rounded up, at least 1.
func retryAfter(wait time.Duration) time.Duration {
	return time.Duration(math.Max(1, math.Ceil(wait.Seconds()))) * time.Second
}

// BurstServer is a hidden token bucket per host with a burst separate from
// its rate, as nginx's limit_req with nodelay: Rate tokens per second, a
// request takes one, and the bucket holds 1 + Burst tokens (it starts
// full). Burst counts the requests accepted at once beyond the one the
// rate allows, as nginx's burst does: Burst 0, nginx's default, saves
// nothing, so only requests at least 1/Rate apart (since the last one
// accepted) get through; Burst 10 lets 11 through at once after a quiet
// spell. (golang.org/x/time/rate's burst b is Burst b-1 here.) Refused
// requests take no token. Above the limit it answers Status (0 means 429;
// nginx's limit_req_status defaults to 503), with a Retry-After (the time
// until a token is back, whole seconds rounded up, at least 1) when
// RetryAfter is set. Every answer takes Latency.
type BurstServer struct {
	Rate       float64
	Burst      int
	Status     int
	RetryAfter bool
	Latency    time.Duration

	buckets map[string]*TokenBucket
}

// Handle implements Server.
func (s *BurstServer) Handle(now time.Time, host string) Response {
	if s.buckets == nil {
		s.buckets = make(map[string]*TokenBucket)
	}
	b := s.buckets[host]
	if b == nil {
		b = &TokenBucket{Rate: s.Rate, Burst: 1 + float64(max(0, s.Burst))}
		s.buckets[host] = b
	}
	ok, wait := b.Take(now)
	if ok {
		return Response{Status: 200, Latency: s.Latency}
	}
	r := Response{Status: limitStatus(s.Status), Latency: s.Latency}
	if s.RetryAfter {
		r.RetryAfter = retryAfter(wait)
	}
	return r
}

// FixedWindowServer is a quota per host of Quota requests per Window, the
// windows aligned to multiples of Window since the zero time (for a
// minute or an hour, the wall clock's minutes or hours, UTC): the first
// Quota requests of a window are answered 200, the others Status (0 means
// 429), with a Retry-After to the window's end (whole seconds rounded up,
// at least 1) when RetryAfter is set. The count restarts at each window.
// Every answer takes Latency.
type FixedWindowServer struct {
	Quota      int
	Window     time.Duration
	Status     int
	RetryAfter bool
	Latency    time.Duration

	windows map[string]*fixedWindow
}

type fixedWindow struct {
	start time.Time
	n     int
}

// Handle implements Server.
func (s *FixedWindowServer) Handle(now time.Time, host string) Response {
	if s.windows == nil {
		s.windows = make(map[string]*fixedWindow)
	}
	w := s.windows[host]
	if w == nil {
		w = &fixedWindow{}
		s.windows[host] = w
	}
	if start := now.Truncate(s.Window); !start.Equal(w.start) {
		w.start, w.n = start, 0
	}
	if w.n < s.Quota {
		w.n++
		return Response{Status: 200, Latency: s.Latency}
	}
	r := Response{Status: limitStatus(s.Status), Latency: s.Latency}
	if s.RetryAfter {
		r.RetryAfter = retryAfter(w.start.Add(s.Window).Sub(now))
	}
	return r
}

// SlidingWindowServer is a quota per host of Quota requests in any
// trailing Window: a request at t is answered 200 when fewer than Quota
// requests were accepted in (t-Window, t], otherwise Status (0 means 429);
// refused requests don't count, unless CountRefused. With RetryAfter, a
// refusal carries the time until the oldest counted request of the window
// leaves it (whole seconds rounded up, at least 1). Every answer takes
// Latency.
type SlidingWindowServer struct {
	Quota      int
	Window     time.Duration
	Status     int
	RetryAfter bool
	Latency    time.Duration
	// CountRefused counts refused requests too, as HAProxy's stick table
	// on http_req_rate does: a client that keeps knocking above the
	// limit stays refused.
	CountRefused bool

	windows map[string]*slidingWindow
}

// slidingWindow is one host's accepted requests, in order; those before
// head have left the window.
type slidingWindow struct {
	accepted []time.Time
	head     int
}

// Handle implements Server.
func (s *SlidingWindowServer) Handle(now time.Time, host string) Response {
	if s.windows == nil {
		s.windows = make(map[string]*slidingWindow)
	}
	w := s.windows[host]
	if w == nil {
		w = &slidingWindow{}
		s.windows[host] = w
	}
	cut := now.Add(-s.Window)
	for w.head < len(w.accepted) && !w.accepted[w.head].After(cut) {
		w.head++
	}
	if w.head > 64 && w.head > len(w.accepted)/2 {
		// Compact, so the slice stays near Quota long over a long run.
		w.accepted = w.accepted[:copy(w.accepted, w.accepted[w.head:])]
		w.head = 0
	}
	if len(w.accepted)-w.head < s.Quota {
		w.accepted = append(w.accepted, now)
		return Response{Status: 200, Latency: s.Latency}
	}
	r := Response{Status: limitStatus(s.Status), Latency: s.Latency}
	if s.RetryAfter {
		r.RetryAfter = retryAfter(w.accepted[w.head].Add(s.Window).Sub(now))
	}
	if s.CountRefused {
		w.accepted = append(w.accepted, now)
	}
	return r
}

// CapacityServer is a server bound by its capacity: Workers requests are
// served in parallel, each for a service time drawn uniformly from
// Service ± Spread (a fraction), the others wait in one FIFO queue; a
// request that finds QueueLimit requests already waiting is answered 503
// after RejectLatency. Latency is the wait in the queue plus the service
// time, so it grows with load. One model serves every host.
type CapacityServer struct {
	Workers       int
	Service       time.Duration
	Spread        float64
	QueueLimit    int
	RejectLatency time.Duration
	Rand          *rand.Rand

	free   []time.Time // when each worker is next free
	queued []time.Time // service starts of the requests still waiting, in order
}

// Capacity returns the requests per second the server completes at most.
func (s *CapacityServer) Capacity() float64 {
	return float64(s.Workers) / s.Service.Seconds()
}

// Handle implements Server.
func (s *CapacityServer) Handle(now time.Time, _ string) Response {
	if s.free == nil {
		s.free = make([]time.Time, s.Workers)
	}
	i := 0
	for i < len(s.queued) && !s.queued[i].After(now) {
		i++
	}
	s.queued = s.queued[i:]
	if len(s.queued) >= s.QueueLimit {
		return Response{Status: 503, Latency: s.RejectLatency}
	}
	w := 0
	for j := range s.free {
		if s.free[j].Before(s.free[w]) {
			w = j
		}
	}
	start := now
	if s.free[w].After(now) {
		start = s.free[w]
		s.queued = append(s.queued, start)
	}
	svc := s.Service
	if s.Spread > 0 && s.Rand != nil {
		svc = time.Duration(float64(svc) * (1 + s.Spread*(2*s.Rand.Float64()-1)))
	}
	s.free[w] = start.Add(svc)
	return Response{Status: 200, Latency: s.free[w].Sub(now)}
}

// StormServer answers every request 503 in [From, To), 200 otherwise,
// both after Latency.
type StormServer struct {
	From, To time.Time
	Latency  time.Duration
}

// Handle implements Server.
func (s *StormServer) Handle(now time.Time, _ string) Response {
	if !now.Before(s.From) && now.Before(s.To) {
		return Response{Status: 503, Latency: s.Latency}
	}
	return Response{Status: 200, Latency: s.Latency}
}

// PlainServer answers every request 200 after Latency: a server with no
// limit of its own, where only the crawler's politeness bounds the rate.
type PlainServer struct {
	Latency time.Duration
}

// Handle implements Server.
func (s *PlainServer) Handle(time.Time, string) Response {
	return Response{Status: 200, Latency: s.Latency}
}

// CounterServer is go-chi/httprate's limiter (v0.16, LocalCounter): a
// sliding-window counter of Quota requests per Window. Windows are aligned
// to the Window since the Unix epoch; the count at t is the previous
// window's accepted requests, weighted by the share of it still inside
// the trailing Window, plus the current window's. A request is refused
// (429, Retry-After: Window) when that count rounded to a whole number
// leaves no room for it; every answer carries X-RateLimit-Limit,
// X-RateLimit-Remaining (what is left after it) and X-RateLimit-Reset (the
// current window's end, Unix seconds). So a client at 8.5-9.5 req/s of a
// 10 per 1 s limit is told "0 remaining" on its successes, and the most
// it can get is about 9.5 req/s. Every answer takes Latency.
type CounterServer struct {
	Quota   int
	Window  time.Duration
	Latency time.Duration

	counts map[string]*counterWindows
}

// counterWindows is one host's counts: the current window's start and
// its count, and the previous window's count.
type counterWindows struct {
	start      time.Time
	curr, prev int
}

// Handle implements Server.
func (s *CounterServer) Handle(now time.Time, host string) Response {
	if s.counts == nil {
		s.counts = make(map[string]*counterWindows)
	}
	w := s.counts[host]
	if w == nil {
		w = &counterWindows{}
		s.counts[host] = w
	}
	cur := now.Truncate(s.Window)
	if !cur.Equal(w.start) {
		if cur.Equal(w.start.Add(s.Window)) {
			w.prev = w.curr
		} else {
			w.prev = 0
		}
		w.start, w.curr = cur, 0
	}
	diff := now.Sub(cur)
	rate := int(math.Round(float64(w.prev)*float64(s.Window-diff)/float64(s.Window) + float64(w.curr)))
	h := http.Header{}
	h.Set("X-RateLimit-Limit", strconv.Itoa(s.Quota))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(cur.Add(s.Window).Unix(), 10))
	if rate+1 > s.Quota {
		h.Set("X-RateLimit-Remaining", strconv.Itoa(s.Quota-rate))
		return Response{Status: http.StatusTooManyRequests, RetryAfter: s.Window.Truncate(time.Second), Latency: s.Latency, Header: h}
	}
	w.curr++
	h.Set("X-RateLimit-Remaining", strconv.Itoa(s.Quota-rate-1))
	return Response{Status: http.StatusOK, Latency: s.Latency, Header: h}
}
