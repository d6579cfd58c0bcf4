package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// TestRun runs the demo for 3 s in fake time (a synctest bubble, the
// servers called in process, so every figure is exact however loaded the
// machine is) and checks what the throttle must guarantee. The bubble
// also checks that everything run started has stopped: a goroutine left
// blocked fails the test.
func TestRun(t *testing.T) {
	localnet.InProcess(t)
	synctest.Test(t, func(t *testing.T) {
		opts := defaultOptions()
		opts.Duration = 3 * time.Second
		opts.Drain = time.Second

		var out bytes.Buffer
		start := time.Now()
		sum, err := run(context.Background(), &out, opts)
		if err != nil {
			t.Fatalf("run: %v\n%s", err, out.String())
		}
		// The crawl ends after Duration; requests in flight may finish
		// for Drain (the slowest answer takes under a second).
		if took := time.Since(start); took < opts.Duration || took > opts.Duration+opts.Drain {
			t.Errorf("run took %v, want %v plus at most %v", took, opts.Duration, opts.Drain)
		}
		t.Logf("output:\n%s", out.String())

		if sum.ClientErrors > 0 {
			t.Errorf("%d client errors, first: %v", sum.ClientErrors, sum.FirstError)
		}
		if len(sum.Sites) != 3 {
			t.Fatalf("summary has %d sites, want 3", len(sum.Sites))
		}
		secs := sum.Elapsed.Seconds()
		got := map[string]siteSummary{}
		for _, s := range sum.Sites {
			got[s.Name] = s
			if s.Requests == 0 || s.OK == 0 {
				t.Errorf("%s: %d requests, %d 2xx; want some", s.Name, s.Requests, s.OK)
			}
			if s.Other != 0 || s.Cut != 0 {
				t.Errorf("%s: %d other statuses, %d cut off; want none", s.Name, s.Other, s.Cut)
			}
		}

		// fast: Delay 25ms ±50 % puts its starts 12.5-37.5 ms apart,
		// 40 req/s on average (unthrottled, 12 workers on a 5 ms server
		// make thousands a second).
		if f := got["fast"]; f.Rate < 1/0.0375 || f.Rate > 1/0.0125 {
			t.Errorf("fast: %.1f req/s, want 27-80 (starts 12.5-37.5 ms apart)", f.Rate)
		}
		// slow: the AutoThrottle delay starts at 500ms and must have come
		// down toward latency/2 (300-500 ms latency: 150-250 ms).
		if s := got["slow"]; s.Delay.Changes == 0 || s.Delay.Last >= 500*time.Millisecond {
			t.Errorf("slow: AutoThrottle delay %+v, want it lowered from 500ms", s.Delay)
		}
		// limited: every request arriving, 429s included, stays within
		// 1.5x the hidden limit plus its burst; unthrottled, it would be
		// hundreds.
		l := got["limited"]
		if maxReq := 1.5*l.HiddenLimit*secs + 2; float64(l.Requests) > maxReq {
			t.Errorf("limited: %d requests in %.1fs, want at most %.0f (1.5x the limit + burst)", l.Requests, secs, maxReq)
		}
		if l.TooMany > l.Requests/2 {
			t.Errorf("limited: %d of %d requests got 429", l.TooMany, l.Requests)
		}

		for _, want := range []string{"scope", "requests", "2xx", "429", "mean gap", "max conc", "hidden limit"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("output lacks %q", want)
			}
		}
	})
}

func TestRunRejectsBadOptions(t *testing.T) {
	opts := defaultOptions()
	opts.Workers = 0
	if _, err := run(context.Background(), &bytes.Buffer{}, opts); err == nil {
		t.Error("run with 0 workers: no error")
	}
}
