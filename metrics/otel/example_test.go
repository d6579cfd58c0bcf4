package throttleotel_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/crawlerkit/throttle"
	throttleotel "github.com/crawlerkit/throttle/metrics/otel"
	"github.com/crawlerkit/throttle/throttletest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A crawler registers the manager's instruments once on its meter. Here
// three hosts were met and only the busiest has a scope attribute of its
// own (MaxScopes 1); the other two are summed under "other". A program
// would use its MeterProvider (otel.Meter("crawler")) with an exporter;
// the example reads with the SDK's ManualReader.
func Example() {
	cfg := throttle.DefaultConfig()
	cfg.Clock = throttletest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) // fake time: the output is the same each run
	cfg.Robots.Enabled = false
	m, err := throttle.New(cfg)
	if err != nil {
		panic(err)
	}

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	reg, err := throttleotel.Register(m, provider.Meter("crawler"), throttleotel.Options{MaxScopes: 1})
	if err != nil {
		panic(err)
	}
	defer reg.Unregister()

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

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch mt.Name {
			case "throttle.requests", "throttle.scope.requests", "throttle.scope.in_flight":
				for _, p := range mt.Data.(metricdata.Sum[int64]).DataPoints {
					scope, _ := p.Attributes.Value(throttleotel.ScopeKey)
					lines = append(lines, fmt.Sprintf("%s %q %d", mt.Name, scope.AsString(), p.Value))
				}
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// throttle.requests "" 3
	// throttle.scope.in_flight "example.com" 1
	// throttle.scope.in_flight "other" 0
	// throttle.scope.requests "example.com" 1
	// throttle.scope.requests "other" 2
}
