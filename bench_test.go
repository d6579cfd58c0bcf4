package throttle

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/time/rate"
)

// benchConfig admits at once: the benchmarks measure the manager's own
// overhead, not waiting.
func benchConfig() Config {
	cfg := DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, Jitter{}
	cfg.GlobalConcurrency = 1 << 20
	cfg.Robots.Enabled = false // made-up hosts
	return cfg
}

func benchRequests(b *testing.B, n int) []*http.Request {
	reqs := make([]*http.Request, n)
	for i := range reqs {
		req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://host%d.example/page", i), nil)
		if err != nil {
			b.Fatal(err)
		}
		reqs[i] = req
	}
	return reqs
}

// BenchmarkAcquireRelease: one scope, no wait.
func BenchmarkAcquireRelease(b *testing.B) {
	m, err := New(benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequests(b, 1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		p, err := m.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		p.Release(ok200, nil)
	}
}

// TestAcquireReleaseAllocs pins BenchmarkAcquireRelease's budget: at most one
// allocation (a slab of Permits, every permitsPerSlab) per Acquire and
// Release of a ready scope.
func TestAcquireReleaseAllocs(t *testing.T) {
	m, err := New(benchConfig())
	require.NoError(t, err)
	req := get(t, "http://host0.example/page")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := m.Acquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		p.Release(ok200, nil)
	})
	assert.LessOrEqual(t, allocs, 1.0)
}

// BenchmarkAcquireReleaseParallel: b.RunParallel over 10,000 hosts, each
// goroutine on its own hosts.
func BenchmarkAcquireReleaseParallel(b *testing.B) {
	m, err := New(benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	reqs := benchRequests(b, 10000)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			p, err := m.Acquire(ctx, reqs[i%len(reqs)])
			if err != nil {
				b.Error(err)
				return
			}
			p.Release(ok200, nil)
		}
	})
}

// limiterMap is what a user writes by hand: a mutex-guarded map of
// per-host rate.Limiters, waited on before each request.
type limiterMap struct {
	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func (l *limiterMap) wait(ctx context.Context, req *http.Request) error {
	host := req.URL.Hostname()
	l.mu.Lock()
	lim := l.m[host]
	if lim == nil {
		lim = rate.NewLimiter(rate.Inf, 1)
		l.m[host] = lim
	}
	l.mu.Unlock()
	return lim.Wait(ctx)
}

// BenchmarkBaselineRateLimiterMap is the baseline of BenchmarkAcquireRelease.
func BenchmarkBaselineRateLimiterMap(b *testing.B) {
	l := &limiterMap{m: map[string]*rate.Limiter{}}
	req := benchRequests(b, 1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := l.wait(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBaselineRateLimiterMapParallel is the baseline of
// BenchmarkAcquireReleaseParallel.
func BenchmarkBaselineRateLimiterMapParallel(b *testing.B) {
	l := &limiterMap{m: map[string]*rate.Limiter{}}
	reqs := benchRequests(b, 10000)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1)) * 7919
		for pb.Next() {
			i++
			if err := l.wait(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAcquireReleaseMultiScope: three scopes per request.
func BenchmarkAcquireReleaseMultiScope(b *testing.B) {
	m, err := New(benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx := WithScopeKeys(context.Background(), "example.com", "books.example.com", "api")
	req := benchRequests(b, 1)[0].WithContext(ctx)
	b.ReportAllocs()
	for b.Loop() {
		p, err := m.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		p.Release(ok200, nil)
	}
}

// BenchmarkTransport: a request through the Transport to a fake
// RoundTripper, body closed.
func BenchmarkTransport(b *testing.B) {
	m, err := New(benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	benchRoundTrips(b, m.Transport(okRT()).RoundTrip)
}

// BenchmarkTryAcquireBusy: a scope that says "not yet".
func BenchmarkTryAcquireBusy(b *testing.B) {
	cfg := benchConfig()
	cfg.Default.Delay = time.Hour
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequests(b, 1)[0]
	p, _, err := m.TryAcquire(req)
	if err != nil || p == nil {
		b.Fatal("first TryAcquire", err)
	}
	p.Release(ok200, nil)
	b.ReportAllocs()
	for b.Loop() {
		if p, _, _ := m.TryAcquire(req); p != nil {
			b.Fatal("admitted")
		}
	}
}

// BenchmarkBaselineSemaphore: a buffered-channel semaphore per host in a
// mutex-guarded map, the other thing users write by hand.
func BenchmarkBaselineSemaphore(b *testing.B) {
	var mu sync.Mutex
	sems := map[string]chan struct{}{}
	req := benchRequests(b, 1)[0]
	b.ReportAllocs()
	for b.Loop() {
		host := req.URL.Hostname()
		mu.Lock()
		sem := sems[host]
		if sem == nil {
			sem = make(chan struct{}, 1)
			sems[host] = sem
		}
		mu.Unlock()
		sem <- struct{}{}
		<-sem
	}
}

var memSink *ThrottlingManager

// BenchmarkMemoryPerScope reports the live heap per scope while 100,000
// hosts are recent, each acquired and released once.
func BenchmarkMemoryPerScope(b *testing.B) {
	const hosts = 100_000
	reqs := benchRequests(b, hosts)
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		m, err := New(benchConfig())
		if err != nil {
			b.Fatal(err)
		}
		for _, req := range reqs {
			p, err := m.Acquire(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(ok200, nil)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		memSink = m
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/hosts, "B/scope")
		memSink = nil
	}
}

// BenchmarkStats: one StatsInto over 100,000 scopes, the snapshot a
// status page or a metrics exporter takes every second.
func BenchmarkStats(b *testing.B) {
	m, err := New(benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, req := range benchRequests(b, 100_000) {
		p, err := m.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		p.Release(ok200, nil)
	}
	var st Stats
	m.StatsInto(&st)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		m.StatsInto(&st)
	}
	if len(st.Scopes) != 100_000 {
		b.Fatalf("%d scopes", len(st.Scopes))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/1e6, "ms/snapshot")
}

// BenchmarkBaselineClient: an http.Client on an in-memory RoundTripper,
// body closed: the floor BenchmarkClientTransport is measured against.
func BenchmarkBaselineClient(b *testing.B) {
	benchClient(b, func(rt http.RoundTripper) http.RoundTripper { return rt })
}

// BenchmarkClientTransport: the same client with the throttle's Transport
// around the RoundTripper: what a crawler that wraps its client pays.
func BenchmarkClientTransport(b *testing.B) {
	m, err := New(benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	benchClient(b, func(rt http.RoundTripper) http.RoundTripper { return m.Transport(rt) })
}

// BenchmarkClientTransportRobots is BenchmarkClientTransport with
// robots.txt on, as DefaultConfig has it: the origin's robots.txt (a 404,
// allowing everything) is fetched once, then every request checks that
// it is still fresh. scripts/pathfiles.sh profiles this one.
func BenchmarkClientTransportRobots(b *testing.B) {
	cfg := benchConfig()
	cfg.Robots.Enabled = true
	m, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ok := okRT()
	rt := fakeRT(func(req *http.Request) (*http.Response, error) {
		if req.URL.Path == "/robots.txt" {
			return &http.Response{StatusCode: 404, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		}
		return ok.RoundTrip(req)
	})
	benchRoundTrips(b, (&http.Client{Transport: m.Transport(rt)}).Do)
}

func benchClient(b *testing.B, wrap func(http.RoundTripper) http.RoundTripper) {
	benchRoundTrips(b, (&http.Client{Transport: wrap(okRT())}).Do)
}

// okRT is an in-memory RoundTripper that answers 200 with no body.
func okRT() http.RoundTripper {
	return fakeRT(func(req *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
}

// TestTransportAllocs pins BenchmarkClientTransport's budget: the
// Transport adds one allocation to a round trip (its Permit, latency
// trace context and request copy, together).
func TestTransportAllocs(t *testing.T) {
	m, err := New(benchConfig())
	require.NoError(t, err)
	req := get(t, "http://host0.example/page")
	allocs := func(c *http.Client) float64 {
		return testing.AllocsPerRun(1000, func() {
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		})
	}
	bare := allocs(&http.Client{Transport: okRT()})
	through := allocs(&http.Client{Transport: m.Transport(okRT())})
	limit := 1.0
	if raceEnabled {
		// The race detector makes sync.Pool drop a share of what is put
		// back: the latency trace is made again now and then (2 more
		// than the bare client, where 3 were 4).
		limit = 2
	}
	assert.LessOrEqual(t, through-bare, limit)
}

// benchRoundTrips times do on one request, its body closed each time.
func benchRoundTrips(b *testing.B, do func(*http.Request) (*http.Response, error)) {
	req := benchRequests(b, 1)[0]
	b.ReportAllocs()
	for b.Loop() {
		resp, err := do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}
