package sim

import (
	"math"
	"math/rand/v2"
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
// host, and 429 above it, with a Retry-After (whole seconds, at least 1:
// the time until a token is back, rounded up) when RetryAfter is set. Both
// answers take Service.
type RateLimitServer struct {
	Limit      float64 // req/s; the bucket's burst is the same number
	Service    time.Duration
	RetryAfter bool
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
	r := Response{Status: 429, Latency: svc}
	if s.RetryAfter {
		r.RetryAfter = time.Duration(math.Max(1, math.Ceil(wait.Seconds()))) * time.Second
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
