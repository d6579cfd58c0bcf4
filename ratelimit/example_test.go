package ratelimit_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/crawlerkit/throttle/ratelimit"
)

// A 200 that reports its burst quota spent: the wait is that quota's
// reset, not the daily one, and RateLimit-Policy states the rate allowed.
func ExampleParse() {
	now := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	h := http.Header{}
	h.Set("RateLimit", `"burst";r=0;t=10, "daily";r=4000;t=80000`)
	h.Set("RateLimit-Policy", `"burst";q=20;w=10, "daily";q=5000;w=86400`)

	w := ratelimit.Parse(h, now)
	fmt.Println("wait:", w.Duration, "present:", w.Present)
	fmt.Println("exhausted:", w.Exhausted, "remaining:", w.Remaining)
	fmt.Printf("rate: %.3f/s\n", w.Rate)
	// Output:
	// wait: 10s present: true
	// exhausted: true remaining: 0
	// rate: 0.058/s
}

func ExampleParseRetryAfter() {
	now := time.Date(1994, time.November, 6, 8, 49, 7, 0, time.UTC)
	for _, v := range []string{"120", "Sun, 06 Nov 1994 08:49:37 GMT", "99999999999", "-5"} {
		d, ok := ratelimit.ParseRetryAfter(v, now)
		fmt.Println(d, ok)
	}
	// Output:
	// 2m0s true
	// 30s true
	// 720h0m0s true
	// 0s false
}

func ExampleParseRateLimit() {
	items, ok := ratelimit.ParseRateLimit(`"default";r=50;t=30, "daily";r=0`)
	fmt.Println(ok)
	for _, it := range items {
		fmt.Printf("%s: %d left, reset %v (%v)\n", it.Policy, it.Remaining, it.Reset, it.HasReset)
	}
	// Output:
	// true
	// default: 50 left, reset 30s (true)
	// daily: 0 left, reset 0s (false)
}

func ExampleParseXRateLimitReset() {
	now := time.Unix(1_700_000_000, 0)
	for _, v := range []string{"30", "1700000060", "1700000000500"} {
		d, _ := ratelimit.ParseXRateLimitReset(v, now)
		fmt.Println(d)
	}
	// Output:
	// 30s
	// 1m0s
	// 500ms
}
