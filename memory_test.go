package throttle

import (
	"context"
	"net/http"
	"net/url"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// memoryHosts is how many distinct hosts the memory tests crawl: a
// million, or 100,000 under the race detector or -short.
func memoryHosts() int {
	if raceEnabled || testing.Short() {
		return 100_000
	}
	return 1_000_000
}

// liveHeap returns the live heap: HeapAlloc after two collections.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// hostRequests builds requests to distinct hosts cheaply: one request whose
// URL's Host is replaced each time (the manager keeps no request), with
// one allocation per host: its name.
type hostRequests struct {
	req *http.Request
	buf []byte
}

func newHostRequests() *hostRequests {
	return &hostRequests{req: &http.Request{Method: http.MethodGet, Header: http.Header{},
		URL: &url.URL{Scheme: "http", Path: "/page"}}}
}

// to returns the request for prefix<i>.example.
func (h *hostRequests) to(prefix string, i int) *http.Request {
	h.buf = append(h.buf[:0], prefix...)
	h.buf = strconv.AppendInt(h.buf, int64(i), 10)
	h.buf = append(h.buf, ".example"...)
	h.req.URL.Host = string(h.buf)
	return h.req
}

// crawlOnce acquires and releases one request.
func crawlOnce(t testing.TB, m *ThrottlingManager, req *http.Request, fb Feedback) {
	t.Helper()
	p, err := m.Acquire(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	p.ReleaseFeedback(fb)
}

// TestMemoryMillionHosts: a million distinct hosts, each
// acquired and released once, cost at most 1 KiB of live heap per scope
// while they are recent; once idle for IdleTimeout they are forgotten and
// the live heap returns to within 10 MB of where it started, while the
// scopes that learned something (a 429's backoff, an AutoThrottle delay)
// are kept until LearnedIdleTimeout. Meanwhile the crawl goes on at one
// request a second on a host it already knows, so no new scope triggers
// the sweeps. In fake time: synctest, as package throttletest's clock
// cannot be imported here (it imports this package).
func TestMemoryMillionHosts(t *testing.T) {
	hosts := memoryHosts()
	const learned = 1000 // half backoff (a 429), half AutoThrottle
	synctest.Test(t, func(t *testing.T) {
		cfg := benchConfig()
		cfg.MaxScopes = 0 // count every scope; the cap has its own test
		auto := cfg.Default
		auto.AutoThrottle.Enabled = true
		cfg.Scopes = make(map[string]ScopeConfig, learned/2)
		reqs := newHostRequests()
		for i := range learned / 2 {
			key, _ := requestHost(reqs.to("auto", i))
			cfg.Scopes[key] = auto
		}
		before := liveHeap()
		m, err := New(cfg)
		require.NoError(t, err)

		start := time.Now()
		// No collection while the scopes are made, only at the
		// measurements: it halves the time and the peak heap.
		gc := debug.SetGCPercent(-1)
		defer debug.SetGCPercent(gc)
		for i := range learned / 2 {
			crawlOnce(t, m, reqs.to("auto", i), Feedback{Status: 200, Latency: 3 * time.Second})
			crawlOnce(t, m, reqs.to("busy", i), Feedback{Status: http.StatusTooManyRequests})
		}
		for i := range hosts - learned {
			crawlOnce(t, m, reqs.to("h", i), Feedback{Status: 200})
		}
		debug.SetGCPercent(gc)
		recent := liveHeap()
		require.Equal(t, hosts, m.NumScopes())
		perScope := float64(recent-before) / float64(hosts)
		t.Logf("live heap per recent scope: %.0f B (%d hosts)", perScope, hosts)
		assert.LessOrEqual(t, perScope, 1024.0)

		// The crawl goes on, on one host it knows, once a second.
		alive := get(t, "http://alive.example/")
		crawlFor := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				time.Sleep(time.Second)
				crawlOnce(t, m, alive, Feedback{Status: 200})
			}
		}
		// An idle scope goes within IdleTimeout and a sweep period.
		crawlFor(cfg.IdleTimeout + m.sweepPeriod() + 5*time.Second)
		assert.Equal(t, learned+1, m.NumScopes(), "after IdleTimeout: the learned scopes and the live one")
		assert.True(t, m.has("auto0.example"), "AutoThrottle state outlives IdleTimeout")
		assert.True(t, m.has("busy0.example"), "backoff state outlives IdleTimeout")
		delta := int64(liveHeap()) - int64(before)
		t.Logf("live heap after IdleTimeout: %+d B against the start (%d scopes held, %v of fake time)",
			delta, m.NumScopes(), time.Since(start).Round(time.Second))
		assert.Less(t, delta, int64(10<<20))

		crawlFor(cfg.LearnedIdleTimeout - cfg.IdleTimeout)
		assert.Equal(t, 1, m.NumScopes(), "after LearnedIdleTimeout: the live scope only")
		runtime.KeepAlive(m)
	})
}

// TestMemoryLinkFarm: a million distinct hosts (100,000 under -race or
// -short), each used once, with MaxScopes 10,000 (a link farm), all within
// IdleTimeout: the scopes held, and the live heap, stay bounded by the cap
// however many hosts go by.
func TestMemoryLinkFarm(t *testing.T) {
	hosts := memoryHosts()
	const limit = 10_000
	cfg := benchConfig()
	cfg.MaxScopes = limit
	before := liveHeap()
	m, err := New(cfg)
	require.NoError(t, err)
	reqs := newHostRequests()
	var peak int64
	for i := range hosts {
		crawlOnce(t, m, reqs.to("farm", i), Feedback{Status: 200})
		if (i+1)%(hosts/10) == 0 {
			d := int64(liveHeap()) - int64(before)
			peak = max(peak, d)
			t.Logf("%d hosts: %d scopes, live heap %+d B", i+1, m.NumScopes(), d)
			assert.LessOrEqual(t, m.NumScopes(), limit)
		}
	}
	t.Logf("live heap with MaxScopes %d: at most %+d B over %d hosts (%.0f B per scope of the cap)",
		limit, peak, hosts, float64(peak)/limit)
	assert.LessOrEqual(t, peak, int64(limit)*1024, "at most 1 KiB per scope the cap lets through")
	runtime.KeepAlive(m)
}
