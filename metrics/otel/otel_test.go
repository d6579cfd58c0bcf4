package throttleotel_test

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
	throttleotel "github.com/crawlerkit/throttle/metrics/otel"
	"github.com/crawlerkit/throttle/throttletest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
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

// reader is a ManualReader with the adapter registered on its provider.
type reader struct {
	*sdkmetric.ManualReader
	reg metric.Registration
}

func newReader(t *testing.T, m *throttle.ThrottlingManager, opts throttleotel.Options, ropts ...sdkmetric.ManualReaderOption) *reader {
	t.Helper()
	r := sdkmetric.NewManualReader(ropts...)
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r))
	t.Cleanup(func() { provider.Shutdown(context.Background()) })
	reg, err := throttleotel.Register(m, provider.Meter("throttleotel_test"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return &reader{r, reg}
}

// points reads r once and returns its data points as lines, sorted:
//
//	name{key=value,...} kind unit value
//
// with kind counter (a monotonic sum), updown (a non-monotonic sum) or
// gauge, "(delta)" added for a sum of delta temporality, so that a test
// checks each instrument's kind and unit along with its values and
// attributes.
func (r *reader) points(t testing.TB) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var out []string
	var unit string
	line := func(name string, attrs attribute.Set, kind string, v any) {
		var kv []string
		for _, a := range attrs.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.String())
		}
		out = append(out, fmt.Sprintf("%s{%s} %s %s %v", name, strings.Join(kv, ","), kind, unit, v))
	}
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			unit = mt.Unit
			switch d := mt.Data.(type) {
			case metricdata.Sum[int64]:
				kind := "updown"
				if d.IsMonotonic {
					kind = "counter"
				}
				if d.Temporality != metricdata.CumulativeTemporality {
					kind += "(delta)"
				}
				for _, p := range d.DataPoints {
					line(mt.Name, p.Attributes, kind, p.Value)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					line(mt.Name, p.Attributes, "gauge", p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					line(mt.Name, p.Attributes, "gauge", p.Value)
				}
			default:
				t.Fatalf("%s: unexpected data %T", mt.Name, mt.Data)
			}
		}
	}
	slices.Sort(out)
	return out
}

// lines splits want into its non-empty lines, trimmed, sorted.
func lines(want string) []string {
	var out []string
	for l := range strings.Lines(want) {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	slices.Sort(out)
	return out
}

// TestRegisterObservesTheSnapshot drives a manager through three scopes in
// fake time and checks every data point of a collection: totals, the
// per-scope figures, "other" (empty here), each instrument's kind.
func TestRegisterObservesTheSnapshot(t *testing.T) {
	m, clock := newManager(t, nil)
	r := newReader(t, m, throttleotel.Options{})

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

	check(t, r.points(t), `
throttle.backoff.signals{} counter {signal} 1
throttle.global_concurrency{} gauge {permit} 16
throttle.in_flight{} updown {permit} 2
throttle.requests{} counter {request} 6
throttle.responses{throttle.status_class=1xx} counter {response} 0
throttle.responses{throttle.status_class=2xx} counter {response} 1
throttle.responses{throttle.status_class=3xx} counter {response} 0
throttle.responses{throttle.status_class=4xx} counter {response} 1
throttle.responses{throttle.status_class=5xx} counter {response} 1
throttle.responses{throttle.status_class=errors} counter {response} 1
throttle.scope.backoff.delay{throttle.scope=a.example} gauge s 0
throttle.scope.backoff.delay{throttle.scope=b.example} gauge s 2
throttle.scope.backoff.delay{throttle.scope=c.example} gauge s 0
throttle.scope.backoff.signals{throttle.scope=a.example} counter {signal} 0
throttle.scope.backoff.signals{throttle.scope=b.example} counter {signal} 1
throttle.scope.backoff.signals{throttle.scope=c.example} counter {signal} 0
throttle.scope.backoff.signals{throttle.scope=other} counter {signal} 0
throttle.scope.concurrency{throttle.scope=a.example} gauge {permit} 2
throttle.scope.concurrency{throttle.scope=b.example} gauge {permit} 2
throttle.scope.concurrency{throttle.scope=c.example} gauge {permit} 2
throttle.scope.concurrency{throttle.scope=other} gauge {permit} 0
throttle.scope.delay{throttle.scope=a.example} gauge s 1
throttle.scope.delay{throttle.scope=b.example} gauge s 2
throttle.scope.delay{throttle.scope=c.example} gauge s 1
throttle.scope.in_flight{throttle.scope=a.example} updown {permit} 2
throttle.scope.in_flight{throttle.scope=b.example} updown {permit} 0
throttle.scope.in_flight{throttle.scope=c.example} updown {permit} 0
throttle.scope.in_flight{throttle.scope=other} updown {permit} 0
throttle.scope.pace{throttle.scope=a.example} gauge {start}/s 1
throttle.scope.pace{throttle.scope=b.example} gauge {start}/s 0.5
throttle.scope.pace{throttle.scope=c.example} gauge {start}/s 1
throttle.scope.requests{throttle.scope=a.example} counter {request} 3
throttle.scope.requests{throttle.scope=b.example} counter {request} 1
throttle.scope.requests{throttle.scope=c.example} counter {request} 2
throttle.scope.requests{throttle.scope=other} counter {request} 0
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=1xx} counter {response} 0
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=2xx} counter {response} 1
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=3xx} counter {response} 0
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=4xx} counter {response} 0
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=5xx} counter {response} 0
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=errors} counter {response} 0
throttle.scope.responses{throttle.scope=b.example,throttle.status_class=1xx} counter {response} 0
throttle.scope.responses{throttle.scope=b.example,throttle.status_class=2xx} counter {response} 0
throttle.scope.responses{throttle.scope=b.example,throttle.status_class=3xx} counter {response} 0
throttle.scope.responses{throttle.scope=b.example,throttle.status_class=4xx} counter {response} 0
throttle.scope.responses{throttle.scope=b.example,throttle.status_class=5xx} counter {response} 1
throttle.scope.responses{throttle.scope=b.example,throttle.status_class=errors} counter {response} 0
throttle.scope.responses{throttle.scope=c.example,throttle.status_class=1xx} counter {response} 0
throttle.scope.responses{throttle.scope=c.example,throttle.status_class=2xx} counter {response} 0
throttle.scope.responses{throttle.scope=c.example,throttle.status_class=3xx} counter {response} 0
throttle.scope.responses{throttle.scope=c.example,throttle.status_class=4xx} counter {response} 1
throttle.scope.responses{throttle.scope=c.example,throttle.status_class=5xx} counter {response} 0
throttle.scope.responses{throttle.scope=c.example,throttle.status_class=errors} counter {response} 1
throttle.scope.responses{throttle.scope=other,throttle.status_class=1xx} counter {response} 0
throttle.scope.responses{throttle.scope=other,throttle.status_class=2xx} counter {response} 0
throttle.scope.responses{throttle.scope=other,throttle.status_class=3xx} counter {response} 0
throttle.scope.responses{throttle.scope=other,throttle.status_class=4xx} counter {response} 0
throttle.scope.responses{throttle.scope=other,throttle.status_class=5xx} counter {response} 0
throttle.scope.responses{throttle.scope=other,throttle.status_class=errors} counter {response} 0
throttle.scope.waiting{throttle.scope=a.example} updown {caller} 1
throttle.scope.waiting{throttle.scope=b.example} updown {caller} 0
throttle.scope.waiting{throttle.scope=c.example} updown {caller} 0
throttle.scope.waiting{throttle.scope=other} updown {caller} 0
throttle.scopes{} updown {scope} 3
throttle.waiting{} updown {caller} 1
`)

	// Each collection is a new snapshot.
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire: %v, want context.Canceled", err)
	}
	held1.Release(nil, nil)
	held2.Release(nil, nil)
	got := r.points(t)
	for _, want := range lines(`
throttle.in_flight{} updown {permit} 0
throttle.waiting{} updown {caller} 0
throttle.responses{throttle.status_class=errors} counter {response} 3
throttle.scope.in_flight{throttle.scope=a.example} updown {permit} 0
throttle.scope.responses{throttle.scope=a.example,throttle.status_class=errors} counter {response} 2
`) {
		if !slices.Contains(got, want) {
			t.Errorf("no %s", want)
		}
	}
}

// check compares data points with want's lines.
func check(t *testing.T, got []string, want string) {
	t.Helper()
	w := lines(want)
	for _, l := range w {
		if !slices.Contains(got, l) {
			t.Errorf("missing: %s", l)
		}
	}
	for _, l := range got {
		if !slices.Contains(w, l) {
			t.Errorf("unexpected: %s", l)
		}
	}
}

// find returns the value of the point of name with attrs (as in points'
// lines: "throttle.scope=other"), or "" if there is none.
func find(points []string, name, attrs string) string {
	prefix := name + "{" + attrs + "} "
	for _, l := range points {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			f := strings.Fields(v)
			return f[len(f)-1]
		}
	}
	return ""
}

// scopesOf returns the throttle.scope values of name's points, sorted.
func scopesOf(points []string, name string) []string {
	var out []string
	for _, l := range points {
		rest, ok := strings.CutPrefix(l, name+"{throttle.scope=")
		if !ok {
			continue
		}
		scope, _, _ := strings.Cut(rest, "}")
		scope, _, _ = strings.Cut(scope, ",")
		out = append(out, scope)
	}
	return out
}

// TestRegisterBoundsScopes: with more scopes than MaxScopes, only the
// busiest have a ScopeKey value of their own and "other" sums the rest;
// the counters of "other" do not drop when the top changes or scopes are
// forgotten, so their deltas (read by a second reader, of delta
// temporality) are never negative.
func TestRegisterBoundsScopes(t *testing.T) {
	m, clock := newManager(t, func(cfg *throttle.Config) {
		cfg.Default.Delay = 0
		cfg.IdleTimeout = 2 * time.Second
		one := cfg.Default
		one.Concurrency = 1
		cfg.Scopes = map[string]throttle.ScopeConfig{"s2.example": one}
	})
	r := newReader(t, m, throttleotel.Options{MaxScopes: 3})
	delta := newReader(t, m, throttleotel.Options{MaxScopes: 3}, sdkmetric.WithTemporalitySelector(
		func(sdkmetric.InstrumentKind) metricdata.Temporality { return metricdata.DeltaTemporality }))

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

	got := r.points(t)
	// 12 totals, 14 points for each named scope, 11 for "other".
	if len(got) != 12+14*3+11 {
		t.Fatalf("%d points, want %d:\n%s", len(got), 12+14*3+11, strings.Join(got, "\n"))
	}
	for _, want := range lines(`
throttle.requests{} counter {request} 107
throttle.scopes{} updown {scope} 12
throttle.scope.requests{throttle.scope=other} counter {request} 90
throttle.scope.requests{throttle.scope=s1.example} counter {request} 3
throttle.scope.requests{throttle.scope=s2.example} counter {request} 4
throttle.scope.requests{throttle.scope=s9.example} counter {request} 10
throttle.scope.in_flight{throttle.scope=other} updown {permit} 0
throttle.scope.in_flight{throttle.scope=s1.example} updown {permit} 1
throttle.scope.in_flight{throttle.scope=s2.example} updown {permit} 1
throttle.scope.in_flight{throttle.scope=s9.example} updown {permit} 0
throttle.scope.waiting{throttle.scope=other} updown {caller} 0
throttle.scope.waiting{throttle.scope=s2.example} updown {caller} 1
throttle.scope.concurrency{throttle.scope=other} gauge {permit} 18
throttle.scope.concurrency{throttle.scope=s2.example} gauge {permit} 1
`) {
		if !slices.Contains(got, want) {
			t.Errorf("no %s", want)
		}
	}
	for _, name := range []string{
		"throttle.scope.in_flight", "throttle.scope.waiting", "throttle.scope.concurrency",
		"throttle.scope.requests", "throttle.scope.backoff.signals",
	} {
		if got, want := scopesOf(got, name), []string{"other", "s1.example", "s2.example", "s9.example"}; !slices.Equal(got, want) {
			t.Errorf("%s: scopes %q, want %q", name, got, want)
		}
	}
	for _, name := range []string{"throttle.scope.delay", "throttle.scope.pace", "throttle.scope.backoff.delay"} {
		if got, want := scopesOf(got, name), []string{"s1.example", "s2.example", "s9.example"}; !slices.Equal(got, want) {
			t.Errorf("%s: scopes %q, want %q", name, got, want)
		}
	}
	if n := len(scopesOf(got, "throttle.scope.responses")); n != 4*6 {
		t.Errorf("throttle.scope.responses: %d points, want 24", n)
	}
	if v := find(delta.points(t), "throttle.scope.requests", "throttle.scope=other"); v != "90" {
		t.Errorf("other's requests, first delta: %s, want 90", v)
	}

	// The top changes: s9, s8, s7 by requests. s1 and s2 leave, with
	// their releases (no response: class errors) counted in "other"; s8
	// and s7 join with their whole counts, which stay in "other" too: a
	// plain sum of the rest would drop to 80.
	cancel()
	<-done
	heldS1.Release(nil, nil)
	heldS2.Release(nil, nil)
	got = r.points(t)
	if got, want := scopesOf(got, "throttle.scope.requests"), []string{"other", "s7.example", "s8.example", "s9.example"}; !slices.Equal(got, want) {
		t.Errorf("scopes %q, want %q", got, want)
	}
	for _, want := range lines(`
throttle.scope.requests{throttle.scope=other} counter {request} 90
throttle.scope.requests{throttle.scope=s7.example} counter {request} 8
throttle.scope.requests{throttle.scope=s8.example} counter {request} 9
throttle.scope.responses{throttle.scope=other,throttle.status_class=errors} counter {response} 2
throttle.scope.responses{throttle.scope=other,throttle.status_class=2xx} counter {response} 90
`) {
		if !slices.Contains(got, want) {
			t.Errorf("no %s", want)
		}
	}
	d := delta.points(t)
	if v := find(d, "throttle.scope.requests", "throttle.scope=other"); v != "0" {
		t.Errorf("other's requests, delta: %s, want 0", v)
	}
	if v := find(d, "throttle.scope.responses", "throttle.scope=other,throttle.status_class=errors"); v != "2" {
		t.Errorf("other's errors, delta: %s, want 2", v)
	}

	// What the other scopes add goes to "other".
	for range 5 {
		fetch(t, m, request(t, "http://s0.example/"), 200)
	}
	if v := find(r.points(t), "throttle.scope.requests", "throttle.scope=other"); v != "95" {
		t.Errorf("other's requests: %s, want 95", v)
	}
	if v := find(delta.points(t), "throttle.scope.requests", "throttle.scope=other"); v != "5" {
		t.Errorf("other's requests, delta: %s, want 5", v)
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
	got = r.points(t)
	if v := find(got, "throttle.scope.requests", "throttle.scope=other"); v != "95" {
		t.Errorf("other's requests after forgetting: %s, want 95", v)
	}
	if v := find(got, "throttle.scope.requests", "throttle.scope=s9.example"); v != fmt.Sprint(10+extra) {
		t.Errorf("s9's requests: %s, want %d", v, 10+extra)
	}
	if v := find(got, "throttle.requests", ""); v != fmt.Sprint(112+extra) {
		t.Errorf("total requests: %s, want %d", v, 112+extra)
	}
	for _, l := range delta.points(t) {
		if strings.Contains(l, " counter(delta) ") && strings.HasPrefix(strings.Fields(l)[3], "-") {
			t.Errorf("a negative delta: %s", l)
		}
	}
}

// TestRegisterTotalsOnly: a negative MaxScopes observes the totals alone.
func TestRegisterTotalsOnly(t *testing.T) {
	m, _ := newManager(t, nil)
	fetch(t, m, request(t, "http://a.example/"), 200)
	got := newReader(t, m, throttleotel.Options{MaxScopes: -1}).points(t)
	if len(got) != 12 {
		t.Errorf("%d points, want the 12 totals:\n%s", len(got), strings.Join(got, "\n"))
	}
	for _, l := range got {
		if strings.HasPrefix(l, "throttle.scope.") {
			t.Errorf("a per-scope point: %s", l)
		}
	}
}

// TestRegisterAttributes: Options.Attributes go on every point; Register
// copies them.
func TestRegisterAttributes(t *testing.T) {
	m, _ := newManager(t, nil)
	fetch(t, m, request(t, "http://a.example/"), 200)
	attrs := []attribute.KeyValue{attribute.String("crawler", "news")}
	r := newReader(t, m, throttleotel.Options{Attributes: attrs})
	attrs[0] = attribute.String("crawler", "changed")
	got := r.points(t)
	if len(got) != 12+14+11 {
		t.Errorf("%d points, want %d", len(got), 12+14+11)
	}
	for _, l := range got {
		if !strings.Contains(l, "{crawler=news") {
			t.Errorf("no crawler=news: %s", l)
		}
	}
	if v := find(got, "throttle.scope.requests", "crawler=news,throttle.scope=a.example"); v != "1" {
		t.Errorf("a.example's requests: %q, want 1", v)
	}
}

// scopeManager hides the default ScopeManager's type: a custom one, whose
// pace Stats cannot tell.
type scopeManager struct{ throttle.ScopeManager }

// TestRegisterCustomScopeManager: no pace point for a scope whose pace is
// unknown; the others are observed.
func TestRegisterCustomScopeManager(t *testing.T) {
	m, _ := newManager(t, func(cfg *throttle.Config) {
		cfg.NewScopeManager = func(p throttle.ScopeParams) throttle.ScopeManager {
			return scopeManager{throttle.NewDefaultScopeManager(p)}
		}
	})
	fetch(t, m, request(t, "http://a.example/"), 200)
	got := newReader(t, m, throttleotel.Options{}).points(t)
	if v := find(got, "throttle.scope.pace", "throttle.scope=a.example"); v != "" {
		t.Errorf("a pace point for a custom ScopeManager: %s", v)
	}
	if v := find(got, "throttle.scope.requests", "throttle.scope=a.example"); v != "1" {
		t.Errorf("requests: %q, want 1", v)
	}
}

// TestRegisterUnregister: after Unregister the callback is not called.
func TestRegisterUnregister(t *testing.T) {
	m, _ := newManager(t, nil)
	fetch(t, m, request(t, "http://a.example/"), 200)
	r := newReader(t, m, throttleotel.Options{})
	if len(r.points(t)) == 0 {
		t.Fatal("no points")
	}
	if err := r.reg.Unregister(); err != nil {
		t.Fatal(err)
	}
	if got := r.points(t); len(got) != 0 {
		t.Errorf("%d points after Unregister", len(got))
	}
}

// TestRegisterErrors: a nil manager or meter is an error.
func TestRegisterErrors(t *testing.T) {
	m, _ := newManager(t, nil)
	meter := sdkmetric.NewMeterProvider().Meter("x")
	if _, err := throttleotel.Register(nil, meter, throttleotel.Options{}); err == nil {
		t.Error("nil manager: no error")
	}
	if _, err := throttleotel.Register(m, nil, throttleotel.Options{}); err == nil {
		t.Error("nil meter: no error")
	}
}

// TestRegisterConcurrentCollections: two readers of one provider collect
// concurrently (the callback runs for each) while requests come and go
// over more scopes than MaxScopes; each reader sees the counters of the
// totals and of "other" never go down.
func TestRegisterConcurrentCollections(t *testing.T) {
	m, _ := newManager(t, func(cfg *throttle.Config) { cfg.Default.Delay = 0 })
	r1, r2 := sdkmetric.NewManualReader(), sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r1), sdkmetric.WithReader(r2))
	defer provider.Shutdown(context.Background())
	reg, err := throttleotel.Register(m, provider.Meter("x"), throttleotel.Options{MaxScopes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Unregister()

	stop := make(chan struct{})
	var load sync.WaitGroup
	load.Go(func() {
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
	var readers sync.WaitGroup
	for _, mr := range []*sdkmetric.ManualReader{r1, r1, r2, r2} {
		readers.Go(func() {
			r := &reader{ManualReader: mr}
			var last [2]int
			for range 100 {
				got := r.points(t)
				var total, other int
				fmt.Sscan(find(got, "throttle.requests", ""), &total)
				fmt.Sscan(find(got, "throttle.scope.requests", "throttle.scope=other"), &other)
				if total < last[0] || other < last[1] {
					t.Errorf("went down: total %d -> %d, other %d -> %d", last[0], total, last[1], other)
				}
				if n := len(scopesOf(got, "throttle.scope.requests")); n > 4 {
					t.Errorf("%d scopes, want at most 4", n)
				}
				last = [2]int{total, other}
			}
		})
	}
	readers.Wait()
	close(stop)
	load.Wait()
}
