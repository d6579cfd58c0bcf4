package main

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/redisstore/redistest"
)

// TestMain runs the test binary as a worker process when the test
// re-executes it with -worker, as the command re-executes itself.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-worker" {
		os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// TestFleetHoldsLimits runs a short version of the command (3 s per run):
// with shared throttles the sites see their limits from the whole fleet;
// with per-process throttles shop.test sees more. Real processes and a
// real Redis run in real time: the test bounds what the throttle must
// hold (a loaded machine only makes the rates lower), not how fast the
// machine is.
func TestFleetHoldsLimits(t *testing.T) {
	// Skipped without redis-server, unless THROTTLE_REQUIRE_REDIS=1.
	srv := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // hang detector
	defer cancel()
	var out strings.Builder
	res, err := run(ctx, options{redis: srv.Addr(), workers: 4, goroutines: 4, duration: 3 * time.Second, phases: "shared,local"}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 2 || !res[0].Shared || res[1].Shared {
		t.Fatalf("runs: %+v, want a shared one and a per-process one", res)
	}

	shop, api := res[0].Sites[shopHost], res[0].Sites[apiHost]
	// shop.test: Delay 100ms with ±50 % jitter is 10 req/s on average;
	// 20 % over allows for the jitter's spread over 3 s.
	if shop.Rate > 1.2*limitRate(shopHost) || shop.OK == 0 {
		t.Errorf("shared: shop.test saw %.1f req/s (%d answered), want some, at most about %.0f", shop.Rate, shop.OK, limitRate(shopHost))
	}
	if shop.Peak > shopConcurrency {
		t.Errorf("shared: shop.test saw %d requests in flight, limit %d", shop.Peak, shopConcurrency)
	}
	// api.test: starts 200..220ms apart never drain its bucket.
	if api.Limited != 0 || api.Rate > limitRate(apiHost) {
		t.Errorf("shared: api.test saw %.1f req/s and %d 429s, want <= %.0f and none", api.Rate, api.Limited, limitRate(apiHost))
	}
	if api.OK == 0 {
		t.Errorf("shared: api.test answered no page")
	}

	// Four processes that don't share their throttle go past what the
	// shared run must keep to: its concurrency, or its rate.
	local := res[1].Sites[shopHost]
	if local.Rate <= 1.2*limitRate(shopHost) && local.Peak <= shopConcurrency {
		t.Errorf("per-process: shop.test saw %.1f req/s, %d in flight; want more than %.0f or %d",
			local.Rate, local.Peak, 1.2*limitRate(shopHost), shopConcurrency)
	}
}
