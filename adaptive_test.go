package throttle

import (
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// This file runs whole crawls against model servers in fake time
// (testing/synctest): the figures the adaptive rules promise.

// modelServer answers requests from a model of a server.
type modelServer struct {
	mu     sync.Mutex
	answer func(now time.Time) (status int, header http.Header, latency time.Duration)
	starts []time.Time // when each request reached the server
	status []int
	// The last Retry-After the server gave, from when the client had the
	// response in hand until it ends: no request should start inside.
	gatedFrom, gated time.Time
	inGate           int // requests that started inside such a gate
	inFly            int
	flyArea          float64 // integral of in-flight over time, for the mean
	lastAt           time.Time
}

func (s *modelServer) RoundTrip(req *http.Request) (*http.Response, error) {
	now := time.Now()
	s.mu.Lock()
	s.account(now)
	if !now.Before(s.gatedFrom) && now.Before(s.gated) {
		s.inGate++
	}
	status, h, lat := s.answer(now)
	if h == nil {
		h = http.Header{}
	}
	if ra := h.Get("Retry-After"); ra != "" {
		// Requests sent while this 429 is on its way were sent before
		// the client could know: the gate starts when it arrives.
		n, _ := strconv.Atoi(ra)
		s.gatedFrom, s.gated = now.Add(lat), now.Add(lat+time.Duration(n)*time.Second)
	}
	s.starts = append(s.starts, now)
	s.status = append(s.status, status)
	s.inFly++
	s.mu.Unlock()
	time.Sleep(lat)
	s.mu.Lock()
	s.account(time.Now())
	s.inFly--
	s.mu.Unlock()
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func (s *modelServer) account(now time.Time) {
	if !s.lastAt.IsZero() {
		s.flyArea += float64(s.inFly) * now.Sub(s.lastAt).Seconds()
	}
	s.lastAt = now
}

// count returns the requests and the 2xx among them in [from, to).
func (s *modelServer) count(from, to time.Time) (all, good int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, t := range s.starts {
		if !t.Before(from) && t.Before(to) {
			all++
			if s.status[i] < 300 {
				good++
			}
		}
	}
	return all, good
}

// tokenBucket is a hidden rate limit: rate per second, burst.
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func (b *tokenBucket) take(now time.Time) (bool, time.Duration) {
	if !b.last.IsZero() {
		b.tokens = math.Min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	} else {
		b.tokens = b.burst
	}
	b.last = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / b.rate * float64(time.Second))
}

// crawl runs workers that fetch url through m's Transport until end.
func crawl(t *testing.T, m *ThrottlingManager, srv http.RoundTripper, url string, workers int, end time.Time) {
	client := &http.Client{Transport: m.Transport(srv)}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
				resp, err := client.Do(req)
				if err != nil {
					return // the deadline can't be met: the crawl is over
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
}

func hiddenLimit(limit float64, latency time.Duration, retryAfter bool) *modelServer {
	b := &tokenBucket{rate: limit, burst: limit}
	return &modelServer{answer: func(now time.Time) (int, http.Header, time.Duration) {
		ok, wait := b.take(now)
		if ok {
			return 200, nil, latency
		}
		h := http.Header{}
		if retryAfter {
			h.Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		}
		return 429, h, latency
	}}
}

// TestRampupReachesHiddenLimit: with rampup on a 4 req/s hidden limit,
// the steady 2xx rate is >= 95 % of the limit with <= 2 backoff signals
// per minute, with and without Retry-After.
func TestRampupReachesHiddenLimit(t *testing.T) {
	for _, retryAfter := range []bool{false, true} {
		t.Run("retry-after="+strconv.FormatBool(retryAfter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := DefaultConfig()
				cfg.Default.Rampup.Enabled = true
				cfg.JitterSeed = 42
				m := newManager(t, cfg)
				srv := hiddenLimit(4, 50*time.Millisecond, retryAfter)
				t0 := time.Now()
				crawl(t, m, srv, "http://api.example/", 8, t0.Add(40*time.Minute))
				from, to := t0.Add(20*time.Minute), t0.Add(40*time.Minute)
				all, good := srv.count(from, to)
				minutes := to.Sub(from).Minutes()
				rate := float64(good) / to.Sub(from).Seconds()
				signalsPerMin := float64(all-good) / minutes
				t.Logf("steady 2xx rate %.2f req/s (%.1f %% of 4), %.2f signals/min, %d inside a gate",
					rate, 100*rate/4, signalsPerMin, srv.inGate)
				assert.GreaterOrEqual(t, rate, 0.95*4)
				assert.LessOrEqual(t, signalsPerMin, 2.0)
				assert.Zero(t, srv.inGate, "no request inside a Retry-After gate")
			})
		})
	}
}

// TestStormThenRecovery: a 5-minute 503 storm. At most ~10 requests
// reach the server during it, and the rate is back within 2 minutes after.
func TestStormThenRecovery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.JitterSeed = 7
		m := newManager(t, cfg)
		t0 := time.Now()
		stormFrom, stormTo := t0.Add(10*time.Minute), t0.Add(15*time.Minute)
		srv := &modelServer{answer: func(now time.Time) (int, http.Header, time.Duration) {
			if !now.Before(stormFrom) && now.Before(stormTo) {
				return 503, nil, 20 * time.Millisecond
			}
			return 200, nil, 20 * time.Millisecond
		}}
		crawl(t, m, srv, "http://site.example/", 4, t0.Add(25*time.Minute))
		before, _ := srv.count(t0.Add(5*time.Minute), stormFrom)
		during, _ := srv.count(stormFrom, stormTo)
		after, _ := srv.count(stormTo.Add(2*time.Minute), stormTo.Add(7*time.Minute))
		rateBefore := float64(before) / (5 * 60)
		rateAfter := float64(after) / (5 * 60)
		t.Logf("rate before %.2f/s, %d requests during the storm, rate from 2 min after %.2f/s", rateBefore, during, rateAfter)
		assert.LessOrEqual(t, during, 10)
		assert.GreaterOrEqual(t, rateAfter, 0.9*rateBefore)
	})
}

// TestRetryAfterGateHonoured: a server that sometimes answers 429 with
// Retry-After: no request ever starts inside the gate it gave.
func TestRetryAfterGateHonoured(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Default.Concurrency = 4
		cfg.Default.Delay = 100 * time.Millisecond
		cfg.JitterSeed = 3
		m := newManager(t, cfg)
		n := 0
		srv := &modelServer{answer: func(now time.Time) (int, http.Header, time.Duration) {
			n++
			if n%25 == 0 {
				return 429, http.Header{"Retry-After": {"10"}}, 50 * time.Millisecond
			}
			return 200, nil, 50 * time.Millisecond
		}}
		t0 := time.Now()
		crawl(t, m, srv, "http://site.example/", 8, t0.Add(30*time.Minute))
		all, good := srv.count(t0, t0.Add(30*time.Minute))
		t.Logf("%d requests, %d 429s, %d inside a gate", all, all-good, srv.inGate)
		assert.Greater(t, all-good, 5)
		// Requests already in flight when the 429 came may still arrive
		// inside the gate; none started after the 429 was seen may. With
		// four slots, at most three are in flight at that moment.
		assert.LessOrEqual(t, srv.inGate, 3*(all-good))
	})
}

// TestAutoThrottleFollowsSlowServer: a server taking 2 s per request.
// AutoThrottle (target concurrency 1) brings the delay to ~2 s and keeps
// about one request in flight.
func TestAutoThrottleFollowsSlowServer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.Default.AutoThrottle.Enabled = true
		cfg.Default.Concurrency = 8
		cfg.Default.Delay = 0
		cfg.Default.SlotDelay = 0
		cfg.JitterSeed = 5
		m := newManager(t, cfg)
		srv := &modelServer{answer: func(time.Time) (int, http.Header, time.Duration) {
			return 200, nil, 2 * time.Second
		}}
		t0 := time.Now()
		crawl(t, m, srv, "http://slow.example/", 8, t0.Add(20*time.Minute))
		s := m.mustScope(t, "slow.example")
		s.mu.Lock()
		d, _ := s.pol.(*defaultScope).delay()
		s.mu.Unlock()
		meanInFlight := srv.flyArea / 20 / 60
		t.Logf("AutoThrottle delay %v, mean in flight %.2f", d, meanInFlight)
		assert.InDelta(t, 2.0, d.Seconds(), 0.1)
		assert.InDelta(t, 1.0, meanInFlight, 0.1)
	})
}
