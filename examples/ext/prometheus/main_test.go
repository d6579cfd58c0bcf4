package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The tests share one run of the crawl, in fake time (a synctest bubble,
// the hosts served in process); the monitoring server, outside the
// bubble, serves the registry and the status page after it.
var (
	once   sync.Once
	shared result
	reg    *prometheus.Registry
	mon    *httptest.Server
	runErr error
	ranOK  bool
)

func runOnce(t *testing.T) result {
	t.Helper()
	once.Do(func() {
		reg = prometheus.NewRegistry()
		mux := http.NewServeMux()
		mon = httptest.NewServer(mux)
		var out strings.Builder
		shared = localnet.Run(t, func(ctx context.Context) (result, error) { return run(ctx, &out, reg, mux) })
		runErr = printMetrics(&out, mon.URL+"/metrics")
		t.Log("\n" + out.String())
		ranOK = true
	})
	if !ranOK {
		t.Fatal("the shared run failed")
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	m.Run()
	if mon != nil {
		mon.Close()
	}
}

// labelOf is the scope label the server's host gets.
func labelOf(host string) string {
	if slices.Contains(known, host) {
		return host
	}
	return otherScope
}

// series are the lines of a counter by scope label and class, from
// what the server answered, sorted.
func series(name string, answered map[string]map[int]int) (string, map[[2]string]int) {
	counts := map[[2]string]int{}
	for host, statuses := range answered {
		for status, n := range statuses {
			counts[[2]string{labelOf(host), class(status, nil)}] += n
		}
	}
	var lines []string
	for k, n := range counts {
		lines = append(lines, fmt.Sprintf("%s{class=%q,scope=%q} %d", name, k[1], k[0], n))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), counts
}

// TestScrapeCounters scrapes /metrics and compares the counters with what
// the server answered, per bounded scope label and class: pages in
// throttle_requests_total, robots.txt fetches apart.
func TestScrapeCounters(t *testing.T) {
	res := runOnce(t)
	pages, requests := series("throttle_requests_total", res.Statuses)
	robots, robotsTxt := series("throttle_robots_txt_total", res.Robots)
	want := `# HELP throttle_requests_total Released permits by scope and status class (2xx, 4xx, ..., errors).
# TYPE throttle_requests_total counter
` + pages + `
# HELP throttle_robots_txt_total The manager's own robots.txt fetches by scope and status class, not in throttle_requests_total.
# TYPE throttle_robots_txt_total counter
` + robots + `
# HELP throttle_backoff_signals_total Responses that were backoff signals (429, 503, timeouts ...), by scope.
# TYPE throttle_backoff_signals_total counter
throttle_backoff_signals_total{scope="busy.example"} 2
throttle_backoff_signals_total{scope="flaky.example"} 2
# HELP throttle_gates_total Server-given waits (Retry-After, RateLimit headers) that gated a scope.
# TYPE throttle_gates_total counter
throttle_gates_total{scope="busy.example"} 2
# HELP throttle_waiting Callers waiting in Acquire now.
# TYPE throttle_waiting gauge
throttle_waiting 0
`
	if err := testutil.ScrapeAndCompare(mon.URL+"/metrics", strings.NewReader(want),
		"throttle_requests_total", "throttle_robots_txt_total", "throttle_backoff_signals_total", "throttle_gates_total", "throttle_waiting"); err != nil {
		t.Error(err)
	}
	// The farm: 30 pages and 30 robots.txt 404s, all under "other"; the
	// 404s are robots.txt fetches, not 4xx of the crawl.
	if got := requests[[2]string{otherScope, "2xx"}]; got != farmHosts {
		t.Errorf(`other/2xx = %d, want %d`, got, farmHosts)
	}
	if got := requests[[2]string{otherScope, "4xx"}]; got != 0 {
		t.Errorf(`requests other/4xx = %d, want 0`, got)
	}
	if got := robotsTxt[[2]string{otherScope, "4xx"}]; got != farmHosts {
		t.Errorf(`robots.txt other/4xx = %d, want %d`, got, farmHosts)
	}
}

// TestLabelsAreBounded: 33 hosts, but the scope label has 4 values.
func TestLabelsAreBounded(t *testing.T) {
	runOnce(t)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	allowed := append([]string{otherScope}, known...)
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "scope" && !slices.Contains(allowed, lp.GetValue()) {
					t.Errorf("%s has scope label %q", mf.GetName(), lp.GetValue())
				}
			}
		}
	}
	// 2xx for each of 4 labels, 4xx (busy's 429s) and 5xx (flaky's
	// 503s): at most 4 labels x 3 classes; robots.txt: one 4xx a label.
	if n := testutil.CollectAndCount(reg, "throttle_requests_total"); n > 4*3 {
		t.Errorf("throttle_requests_total has %d series", n)
	}
	if n := testutil.CollectAndCount(reg, "throttle_robots_txt_total"); n != 4 {
		t.Errorf("throttle_robots_txt_total has %d series, want 4", n)
	}
}

// TestDelayGaugesAndWaitHistogram: DelayChanged set the raised delays of
// the known scopes that backed off (and of no farm host); every page's
// permit is one observation of the wait histogram, robots.txt fetches none.
func TestDelayGaugesAndWaitHistogram(t *testing.T) {
	res := runOnce(t)
	x := res.Metrics
	for _, h := range []string{"busy.example", "flaky.example"} {
		if d := testutil.ToFloat64(x.delay.WithLabelValues(h)); d <= delay.Seconds() {
			t.Errorf("throttle_delay_seconds{scope=%q} = %v, want above %v", h, d, delay.Seconds())
		}
		if c := testutil.ToFloat64(x.concurrency.WithLabelValues(h)); c != 1 {
			t.Errorf("throttle_concurrency{scope=%q} = %v", h, c)
		}
	}
	if n := testutil.CollectAndCount(x.delay); n != 2 {
		t.Errorf("throttle_delay_seconds has %d series, want 2 (busy, flaky)", n)
	}
	total := 0
	for _, statuses := range res.Statuses {
		for _, n := range statuses {
			total += n
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "throttle_wait_seconds" {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if int(h.GetSampleCount()) != total {
			t.Errorf("throttle_wait_seconds count %d, want %d permits", h.GetSampleCount(), total)
		}
		if h.GetSampleSum() <= 0 {
			t.Errorf("throttle_wait_seconds sum %v: requests queued at once must have waited", h.GetSampleSum())
		}
		return
	}
	t.Error("no throttle_wait_seconds")
}

// TestStatusPage: the same mux serves the manager's status page.
func TestStatusPage(t *testing.T) {
	runOnce(t)
	resp, err := http.Get(mon.URL + "/status?format=json")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("status: %s %s", resp.Status, resp.Header.Get("Content-Type"))
	}
}
