package throttleprom_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/crawlerkit/throttle"
	throttleprom "github.com/crawlerkit/throttle/metrics/prometheus"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// A crawler registers one Collector per manager and serves /metrics. Here
// three hosts were met and only the busiest gets a scope label of its own
// (MaxScopes 1); the other two are summed under scope="other".
func Example() {
	cfg := throttle.DefaultConfig()
	cfg.Clock = throttletest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) // fake time: the output is the same each run
	cfg.Robots.Enabled = false
	m, err := throttle.New(cfg)
	if err != nil {
		panic(err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(throttleprom.NewCollector(m, throttleprom.Options{MaxScopes: 1}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	// A request to example.com in flight; example.org and example.net
	// answered.
	ctx := context.Background()
	for _, url := range []string{"https://example.org/", "https://example.net/", "https://example.com/"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		p, err := m.Acquire(ctx, req)
		if err != nil {
			panic(err)
		}
		if req.URL.Host != "example.com" {
			p.Release(&http.Response{StatusCode: http.StatusOK, Request: req}, nil)
		}
	}

	// Scrape /metrics.
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "throttle_requests_total") ||
			strings.HasPrefix(line, "throttle_scope_in_flight") ||
			strings.HasPrefix(line, "throttle_scope_requests_total") ||
			strings.HasPrefix(line, `throttle_scope_responses_total{class="2xx"`) {
			fmt.Print(line)
		}
	}
	// Output:
	// throttle_requests_total 3
	// throttle_scope_in_flight{scope="example.com"} 1
	// throttle_scope_in_flight{scope="other"} 0
	// throttle_scope_requests_total{scope="example.com"} 1
	// throttle_scope_requests_total{scope="other"} 2
	// throttle_scope_responses_total{class="2xx",scope="example.com"} 0
	// throttle_scope_responses_total{class="2xx",scope="other"} 2
}
