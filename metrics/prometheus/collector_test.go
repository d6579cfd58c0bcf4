package throttleprom_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	throttleprom "github.com/crawlerkit/throttle/metrics/prometheus"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// newManager returns a manager on a fake clock: robots.txt off, no
// jitter, Concurrency 2 and Delay 1s per scope.
func newManager(t *testing.T, tune func(*throttle.Config)) (*throttle.ThrottlingManager, *throttletest.Clock) {
	t.Helper()
	clock := throttletest.NewClock(epoch)
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Robots.Enabled = false
	cfg.Default.Concurrency = 2
	cfg.Default.Delay = time.Second
	cfg.Default.Jitter = throttle.Jitter{}
	cfg.Default.Backoff.Jitter = throttle.Jitter{}
	if tune != nil {
		tune(&cfg)
	}
	m, err := throttle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m, clock
}

// request returns a GET of url, its scopes set to scopes if any.
func request(t testing.TB, url string, scopes ...string) *http.Request {
	t.Helper()
	ctx := context.Background()
	if len(scopes) > 0 {
		ctx = throttle.WithScopeKeys(ctx, scopes...)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

// start admits req now, or fails the test: in fake time with no jitter,
// the test knows when each request may start.
func start(t testing.TB, m *throttle.ThrottlingManager, req *http.Request) *throttle.Permit {
	t.Helper()
	p, adm, err := m.TryAcquire(req)
	if err != nil {
		t.Fatal(err)
	}
	if p == nil {
		t.Fatalf("%s not admitted now: %v until %v", req.URL, adm.Reason, adm.At)
	}
	return p
}

// fetch admits req now and releases it with status (0: a transport
// error).
func fetch(t testing.TB, m *throttle.ThrottlingManager, req *http.Request, status int) {
	t.Helper()
	p := start(t, m, req)
	if status == 0 {
		p.Release(nil, errors.New("connection reset by peer"))
		return
	}
	p.Release(throttletest.Response(req, status, "ok"), nil)
}

// waitFor blocks until n callers wait in Acquire.
func waitFor(t *testing.T, m *throttle.ThrottlingManager, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Waiting() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d callers waiting, want %d", m.Waiting(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// newRegistry returns a pedantic registry (it checks every metric
// against its Describe) with a Collector of m registered.
func newRegistry(t *testing.T, m *throttle.ThrottlingManager, opts throttleprom.Options) *prometheus.Registry {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(throttleprom.NewCollector(m, opts)); err != nil {
		t.Fatal(err)
	}
	return reg
}

// compare checks the series of the named metrics in a scrape of reg.
func compare(t *testing.T, reg prometheus.Gatherer, want string, names ...string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// value returns the value of the series of name with scope (and class,
// if given) in mfs, and whether there is one.
func value(mfs []*dto.MetricFamily, name, scope string, class ...string) (float64, bool) {
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				switch {
				case lp.GetName() == "scope" && lp.GetValue() != scope,
					lp.GetName() == "class" && (len(class) == 0 || lp.GetValue() != class[0]):
					continue series
				}
			}
			if c := s.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return s.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// scopes returns the scope labels of name's series in mfs, sorted.
func scopes(mfs []*dto.MetricFamily, name string) []string {
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if lp.GetName() == "scope" {
					out = append(out, lp.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// gather gathers g or fails the test.
func gather(t testing.TB, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// TestCollectorExportsTheSnapshot drives a manager through three scopes in
// fake time and checks every series of a scrape: totals, the per-scope
// figures, "other" (empty here), HELP and TYPE.
func TestCollectorExportsTheSnapshot(t *testing.T) {
	m, clock := newManager(t, nil)

	// a.example: one 200 after 100 ms, then two held, and a caller
	// waiting for a slot. b.example: a 503, a backoff signal, which
	// doubles its delay. c.example: a 404, then a transport error.
	req := request(t, "http://a.example/1")
	p := start(t, m, req)
	fetch(t, m, request(t, "http://b.example/1"), 503)
	fetch(t, m, request(t, "http://c.example/1"), 404)
	clock.Advance(100 * time.Millisecond)
	p.Release(throttletest.Response(req, 200, "ok"), nil)
	clock.Advance(900 * time.Millisecond)
	fetch(t, m, request(t, "http://c.example/2"), 0)
	held1 := start(t, m, request(t, "http://a.example/2"))
	clock.Advance(time.Second)
	held2 := start(t, m, request(t, "http://a.example/3"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, request(t, "http://a.example/4"))
		done <- err
	}()
	waitFor(t, m, 1)

	reg := newRegistry(t, m, throttleprom.Options{})
	compare(t, reg, `
# HELP throttle_backoff_signals_total Responses that were backoff signals (429, 503, timeouts ...), counted once in each scope they slowed.
# TYPE throttle_backoff_signals_total counter
throttle_backoff_signals_total 1
# HELP throttle_global_concurrency Config.GlobalConcurrency: the most permits held at once across all scopes.
# TYPE throttle_global_concurrency gauge
throttle_global_concurrency 16
# HELP throttle_in_flight Permits held now, all scopes.
# TYPE throttle_in_flight gauge
throttle_in_flight 2
# HELP throttle_requests_total Requests admitted, counted once in each of their scopes, forgotten scopes included.
# TYPE throttle_requests_total counter
throttle_requests_total 6
# HELP throttle_responses_total Released requests by status class (1xx to 5xx, errors: a transport error or no response), counted once in each of their scopes.
# TYPE throttle_responses_total counter
throttle_responses_total{class="1xx"} 0
throttle_responses_total{class="2xx"} 1
throttle_responses_total{class="3xx"} 0
throttle_responses_total{class="4xx"} 1
throttle_responses_total{class="5xx"} 1
throttle_responses_total{class="errors"} 1
# HELP throttle_scope_backoff_delay_seconds A scope's delay as raised by backoff signals (0: not in backoff).
# TYPE throttle_scope_backoff_delay_seconds gauge
throttle_scope_backoff_delay_seconds{scope="a.example"} 0
throttle_scope_backoff_delay_seconds{scope="b.example"} 2
throttle_scope_backoff_delay_seconds{scope="c.example"} 0
# HELP throttle_scope_backoff_signals_total Responses that were backoff signals for a scope.
# TYPE throttle_scope_backoff_signals_total counter
throttle_scope_backoff_signals_total{scope="a.example"} 0
throttle_scope_backoff_signals_total{scope="b.example"} 1
throttle_scope_backoff_signals_total{scope="c.example"} 0
throttle_scope_backoff_signals_total{scope="other"} 0
# HELP throttle_scope_concurrency A scope's effective concurrency now (configured, learned or robots.txt's); other: the sum.
# TYPE throttle_scope_concurrency gauge
throttle_scope_concurrency{scope="a.example"} 2
throttle_scope_concurrency{scope="b.example"} 2
throttle_scope_concurrency{scope="c.example"} 2
throttle_scope_concurrency{scope="other"} 0
# HELP throttle_scope_delay_seconds A scope's effective delay between request starts now, before jitter.
# TYPE throttle_scope_delay_seconds gauge
throttle_scope_delay_seconds{scope="a.example"} 1
throttle_scope_delay_seconds{scope="b.example"} 2
throttle_scope_delay_seconds{scope="c.example"} 1
# HELP throttle_scope_in_flight Permits a scope holds now.
# TYPE throttle_scope_in_flight gauge
throttle_scope_in_flight{scope="a.example"} 2
throttle_scope_in_flight{scope="b.example"} 0
throttle_scope_in_flight{scope="c.example"} 0
throttle_scope_in_flight{scope="other"} 0
# HELP throttle_scope_pace_starts_per_second A scope's effective pace: the starts per second all its rules allow together (+Inf when none bounds it).
# TYPE throttle_scope_pace_starts_per_second gauge
throttle_scope_pace_starts_per_second{scope="a.example"} 1
throttle_scope_pace_starts_per_second{scope="b.example"} 0.5
throttle_scope_pace_starts_per_second{scope="c.example"} 1
# HELP throttle_scope_requests_total Requests a scope admitted.
# TYPE throttle_scope_requests_total counter
throttle_scope_requests_total{scope="a.example"} 3
throttle_scope_requests_total{scope="b.example"} 1
throttle_scope_requests_total{scope="c.example"} 2
throttle_scope_requests_total{scope="other"} 0
# HELP throttle_scope_responses_total A scope's released requests by status class (1xx to 5xx, errors: a transport error or no response).
# TYPE throttle_scope_responses_total counter
throttle_scope_responses_total{class="1xx",scope="a.example"} 0
throttle_scope_responses_total{class="1xx",scope="b.example"} 0
throttle_scope_responses_total{class="1xx",scope="c.example"} 0
throttle_scope_responses_total{class="1xx",scope="other"} 0
throttle_scope_responses_total{class="2xx",scope="a.example"} 1
throttle_scope_responses_total{class="2xx",scope="b.example"} 0
throttle_scope_responses_total{class="2xx",scope="c.example"} 0
throttle_scope_responses_total{class="2xx",scope="other"} 0
throttle_scope_responses_total{class="3xx",scope="a.example"} 0
throttle_scope_responses_total{class="3xx",scope="b.example"} 0
throttle_scope_responses_total{class="3xx",scope="c.example"} 0
throttle_scope_responses_total{class="3xx",scope="other"} 0
throttle_scope_responses_total{class="4xx",scope="a.example"} 0
throttle_scope_responses_total{class="4xx",scope="b.example"} 0
throttle_scope_responses_total{class="4xx",scope="c.example"} 1
throttle_scope_responses_total{class="4xx",scope="other"} 0
throttle_scope_responses_total{class="5xx",scope="a.example"} 0
throttle_scope_responses_total{class="5xx",scope="b.example"} 1
throttle_scope_responses_total{class="5xx",scope="c.example"} 0
throttle_scope_responses_total{class="5xx",scope="other"} 0
throttle_scope_responses_total{class="errors",scope="a.example"} 0
throttle_scope_responses_total{class="errors",scope="b.example"} 0
throttle_scope_responses_total{class="errors",scope="c.example"} 1
throttle_scope_responses_total{class="errors",scope="other"} 0
# HELP throttle_scope_waiting Callers blocked in Acquire on a scope now.
# TYPE throttle_scope_waiting gauge
throttle_scope_waiting{scope="a.example"} 1
throttle_scope_waiting{scope="b.example"} 0
throttle_scope_waiting{scope="c.example"} 0
throttle_scope_waiting{scope="other"} 0
# HELP throttle_scopes Scopes the manager holds now.
# TYPE throttle_scopes gauge
throttle_scopes 3
# HELP throttle_waiting Callers blocked in Acquire now.
# TYPE throttle_waiting gauge
throttle_waiting 1
`)

	// Each scrape is a new snapshot.
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	held1.Release(nil, nil)
	held2.Release(nil, nil)
	compare(t, reg, `
# HELP throttle_in_flight Permits held now, all scopes.
# TYPE throttle_in_flight gauge
throttle_in_flight 0
# HELP throttle_waiting Callers blocked in Acquire now.
# TYPE throttle_waiting gauge
throttle_waiting 0
# HELP throttle_responses_total Released requests by status class (1xx to 5xx, errors: a transport error or no response), counted once in each of their scopes.
# TYPE throttle_responses_total counter
throttle_responses_total{class="1xx"} 0
throttle_responses_total{class="2xx"} 1
throttle_responses_total{class="3xx"} 0
throttle_responses_total{class="4xx"} 1
throttle_responses_total{class="5xx"} 1
throttle_responses_total{class="errors"} 3
`, "throttle_in_flight", "throttle_waiting", "throttle_responses_total")
}

// TestCollectorBoundsScopes: with more scopes than MaxScopes, only the
// busiest get series of their own and "other" sums the rest; the counters
// of "other" do not drop when the top changes or scopes are forgotten.
func TestCollectorBoundsScopes(t *testing.T) {
	m, clock := newManager(t, func(cfg *throttle.Config) {
		cfg.Default.Delay = 0
		cfg.IdleTimeout = 2 * time.Second
		one := cfg.Default
		one.Concurrency = 1
		cfg.Scopes = map[string]throttle.ScopeConfig{"s2.example": one}
	})
	reg := newRegistry(t, m, throttleprom.Options{MaxScopes: 3})

	// s<i>.example answers i+1 requests; "other" 20 and "\xff" (not
	// UTF-8) 30: the busiest by requests, but never named.
	for i := range 10 {
		for range i + 1 {
			fetch(t, m, request(t, fmt.Sprintf("http://s%d.example/", i)), 200)
		}
	}
	for range 20 {
		fetch(t, m, request(t, "http://other/"), 200)
	}
	for range 30 {
		fetch(t, m, request(t, "http://x.example/", "\xff"), 200)
	}
	// s2 holds its one slot with a caller waiting, s1 holds one of two:
	// by in flight, then waiting, they rank first.
	heldS1 := start(t, m, request(t, "http://s1.example/"))
	heldS2 := start(t, m, request(t, "http://s2.example/"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, request(t, "http://s2.example/"))
		done <- err
	}()
	waitFor(t, m, 1)

	// 12 totals, 14 series for each named scope, 11 for "other".
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 12+14*3+11 {
		t.Fatalf("%d series (%v), want %d", n, err, 12+14*3+11)
	}
	compare(t, reg, `
# HELP throttle_scope_requests_total Requests a scope admitted.
# TYPE throttle_scope_requests_total counter
throttle_scope_requests_total{scope="other"} 90
throttle_scope_requests_total{scope="s1.example"} 3
throttle_scope_requests_total{scope="s2.example"} 4
throttle_scope_requests_total{scope="s9.example"} 10
# HELP throttle_scope_in_flight Permits a scope holds now.
# TYPE throttle_scope_in_flight gauge
throttle_scope_in_flight{scope="other"} 0
throttle_scope_in_flight{scope="s1.example"} 1
throttle_scope_in_flight{scope="s2.example"} 1
throttle_scope_in_flight{scope="s9.example"} 0
# HELP throttle_scope_waiting Callers blocked in Acquire on a scope now.
# TYPE throttle_scope_waiting gauge
throttle_scope_waiting{scope="other"} 0
throttle_scope_waiting{scope="s1.example"} 0
throttle_scope_waiting{scope="s2.example"} 1
throttle_scope_waiting{scope="s9.example"} 0
# HELP throttle_scope_concurrency A scope's effective concurrency now (configured, learned or robots.txt's); other: the sum.
# TYPE throttle_scope_concurrency gauge
throttle_scope_concurrency{scope="other"} 18
throttle_scope_concurrency{scope="s1.example"} 2
throttle_scope_concurrency{scope="s2.example"} 1
throttle_scope_concurrency{scope="s9.example"} 2
# HELP throttle_scopes Scopes the manager holds now.
# TYPE throttle_scopes gauge
throttle_scopes 12
# HELP throttle_requests_total Requests admitted, counted once in each of their scopes, forgotten scopes included.
# TYPE throttle_requests_total counter
throttle_requests_total 107
`, "throttle_scope_requests_total", "throttle_scope_in_flight", "throttle_scope_waiting",
		"throttle_scope_concurrency", "throttle_scopes", "throttle_requests_total")
	mfs := gather(t, reg)
	for _, name := range []string{
		"throttle_scope_in_flight", "throttle_scope_waiting", "throttle_scope_concurrency",
		"throttle_scope_requests_total", "throttle_scope_backoff_signals_total",
	} {
		if got, want := scopes(mfs, name), []string{"other", "s1.example", "s2.example", "s9.example"}; !slices.Equal(got, want) {
			t.Errorf("%s: scopes %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{
		"throttle_scope_delay_seconds", "throttle_scope_pace_starts_per_second", "throttle_scope_backoff_delay_seconds",
	} {
		if got, want := scopes(mfs, name), []string{"s1.example", "s2.example", "s9.example"}; !slices.Equal(got, want) {
			t.Errorf("%s: scopes %q, want %q", name, got, want)
		}
	}
	if got := len(scopes(mfs, "throttle_scope_responses_total")); got != 4*6 {
		t.Errorf("throttle_scope_responses_total: %d series, want 24", got)
	}

	// The top changes: s9, s8, s7 by requests. s1 and s2 leave, with
	// their releases (no response: class errors) counted in "other"; s8
	// and s7 join with their whole counts, which stay in "other" too: a
	// plain sum of the rest would drop to 80, a counter reset.
	cancel()
	<-done
	heldS1.Release(nil, nil)
	heldS2.Release(nil, nil)
	compare(t, reg, `
# HELP throttle_scope_requests_total Requests a scope admitted.
# TYPE throttle_scope_requests_total counter
throttle_scope_requests_total{scope="other"} 90
throttle_scope_requests_total{scope="s7.example"} 8
throttle_scope_requests_total{scope="s8.example"} 9
throttle_scope_requests_total{scope="s9.example"} 10
`, "throttle_scope_requests_total")
	mfs = gather(t, reg)
	if v, _ := value(mfs, "throttle_scope_responses_total", "other", "errors"); v != 2 {
		t.Errorf(`other's errors: %v, want 2`, v)
	}
	if v, _ := value(mfs, "throttle_scope_responses_total", "other", "2xx"); v != 90 {
		t.Errorf(`other's 2xx: %v, want 90`, v)
	}

	// What the other scopes add goes to "other".
	for range 5 {
		fetch(t, m, request(t, "http://s0.example/"), 200)
	}
	mfs = gather(t, reg)
	if v, _ := value(mfs, "throttle_scope_requests_total", "other"); v != 95 {
		t.Errorf(`other's requests: %v, want 95`, v)
	}

	// Every scope but s9, which is kept busy, is forgotten: "other" keeps
	// its counts, and so do the totals.
	extra := 0
	for ; m.NumScopes() > 1 && extra < 5000; extra++ {
		clock.Advance(50 * time.Millisecond)
		fetch(t, m, request(t, "http://s9.example/"), 200)
	}
	if m.NumScopes() != 1 {
		t.Fatalf("%d scopes left after %d fetches, want 1", m.NumScopes(), extra)
	}
	mfs = gather(t, reg)
	if v, _ := value(mfs, "throttle_scope_requests_total", "other"); v != 95 {
		t.Errorf(`other's requests after forgetting: %v, want 95`, v)
	}
	if v, _ := value(mfs, "throttle_scope_requests_total", "s9.example"); v != float64(10+extra) {
		t.Errorf(`s9's requests: %v, want %d`, v, 10+extra)
	}
	if v, _ := value(mfs, "throttle_requests_total", ""); v != float64(112+extra) {
		t.Errorf(`total requests: %v, want %d`, v, 112+extra)
	}
	if got, want := scopes(mfs, "throttle_scope_requests_total"), []string{"other", "s9.example"}; !slices.Equal(got, want) {
		t.Errorf("scopes %q after forgetting, want %q", got, want)
	}
}

// TestCollectorTotalsOnly: a negative MaxScopes exports the totals alone.
func TestCollectorTotalsOnly(t *testing.T) {
	m, _ := newManager(t, nil)
	fetch(t, m, request(t, "http://a.example/"), 200)
	reg := newRegistry(t, m, throttleprom.Options{MaxScopes: -1})
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 12 {
		t.Fatalf("%d series (%v), want the 12 totals", n, err)
	}
	if n := testutil.CollectAndCount(throttleprom.NewCollector(m, throttleprom.Options{MaxScopes: -1}), "throttle_scope_requests_total"); n != 0 {
		t.Errorf("%d per-scope series, want none", n)
	}
}

// TestCollectorConstLabels: ConstLabels go on every series; invalid ones
// make Register fail, and a scrape of an unregistered Collector fails
// instead of panicking.
func TestCollectorConstLabels(t *testing.T) {
	m, _ := newManager(t, nil)
	fetch(t, m, request(t, "http://a.example/"), 200)
	reg := newRegistry(t, m, throttleprom.Options{ConstLabels: prometheus.Labels{"crawler": "news"}})
	for _, mf := range gather(t, reg) {
		for _, s := range mf.GetMetric() {
			if !slices.ContainsFunc(s.GetLabel(), func(lp *dto.LabelPair) bool {
				return lp.GetName() == "crawler" && lp.GetValue() == "news"
			}) {
				t.Errorf("%s %v: no crawler label", mf.GetName(), s.GetLabel())
			}
		}
	}

	bad := throttleprom.NewCollector(m, throttleprom.Options{ConstLabels: prometheus.Labels{"crawler": "\xff"}})
	if err := prometheus.NewRegistry().Register(bad); err == nil {
		t.Error("Register with a label value that is not UTF-8: no error")
	}
	ch := make(chan prometheus.Metric, 1000)
	bad.Collect(ch)
	close(ch)
	var out dto.Metric
	for metric := range ch {
		if err := metric.Write(&out); err == nil {
			t.Fatalf("%v: written, want an invalid metric", metric.Desc())
		}
	}
}

// scopeManager hides the default ScopeManager's type: a custom one, whose
// pace Stats cannot tell.
type scopeManager struct{ throttle.ScopeManager }

// TestCollectorCustomScopeManager: no pace series for a scope whose pace
// is unknown; the others are exported.
func TestCollectorCustomScopeManager(t *testing.T) {
	m, _ := newManager(t, func(cfg *throttle.Config) {
		cfg.NewScopeManager = func(p throttle.ScopeParams) throttle.ScopeManager {
			return scopeManager{throttle.NewDefaultScopeManager(p)}
		}
	})
	fetch(t, m, request(t, "http://a.example/"), 200)
	reg := newRegistry(t, m, throttleprom.Options{})
	mfs := gather(t, reg)
	if _, ok := value(mfs, "throttle_scope_pace_starts_per_second", "a.example"); ok {
		t.Error("a pace series for a custom ScopeManager")
	}
	if v, ok := value(mfs, "throttle_scope_requests_total", "a.example"); !ok || v != 1 {
		t.Errorf("requests: %v, %v; want 1", v, ok)
	}
}

// TestCollectorLint: the metrics follow Prometheus' naming rules.
func TestCollectorLint(t *testing.T) {
	m, _ := newManager(t, nil)
	fetch(t, m, request(t, "http://a.example/"), 503)
	problems, err := testutil.CollectAndLint(throttleprom.NewCollector(m, throttleprom.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestCollectorConcurrentScrapes scrapes from several goroutines while
// requests come and go over more scopes than MaxScopes: every scrape
// succeeds (the pedantic registry checks each metric), and each scraper
// sees the counters of the totals and of "other" never go down.
func TestCollectorConcurrentScrapes(t *testing.T) {
	m, _ := newManager(t, func(cfg *throttle.Config) { cfg.Default.Delay = 0 })
	reg := newRegistry(t, m, throttleprom.Options{MaxScopes: 3})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			req := request(t, fmt.Sprintf("http://s%d.example/", i%7*i%11))
			if p, _, err := m.TryAcquire(req); err == nil && p != nil {
				p.Release(throttletest.Response(req, 200+i%4*100, ""), nil)
			}
		}
	})
	var scrapers sync.WaitGroup
	for range 4 {
		scrapers.Go(func() {
			var last [2]float64
			for range 100 {
				mfs, err := reg.Gather()
				if err != nil {
					t.Error(err)
					return
				}
				total, _ := value(mfs, "throttle_requests_total", "")
				other, _ := value(mfs, "throttle_scope_requests_total", "other")
				if total < last[0] || other < last[1] {
					t.Errorf("went down: total %v -> %v, other %v -> %v", last[0], total, last[1], other)
				}
				if n := len(scopes(mfs, "throttle_scope_requests_total")); n > 4 {
					t.Errorf("%d scopes, want at most 4", n)
				}
				last = [2]float64{total, other}
			}
		})
	}
	scrapers.Wait()
	close(stop)
	wg.Wait()
}

// TestNewCollectorNilManager: a nil manager is a programming error.
func TestNewCollectorNilManager(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	throttleprom.NewCollector(nil, throttleprom.Options{})
}
