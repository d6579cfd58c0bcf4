package main

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// The example runs for several seconds; both tests share one run.
var (
	once   sync.Once
	shared result
	output string
	runErr error
)

func runOnce(t *testing.T) result {
	t.Helper()
	once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out strings.Builder
		shared, runErr = run(ctx, &out)
		output = out.String()
	})
	if runErr != nil {
		t.Fatal(runErr)
	}
	t.Log("\n" + output)
	return shared
}

// TestEndpointLimits checks what every endpoint scope guarantees: its own
// Delay between starts and its own Concurrency.
func TestEndpointLimits(t *testing.T) {
	res := runOnce(t)
	for _, e := range endpoints {
		s := res.Endpoints[e.Prefix]
		if s.Requests != e.Requests {
			t.Errorf("%s: server saw %d requests, want %d", e.Prefix, s.Requests, e.Requests)
			continue
		}
		if s.Peak > e.Concurrency {
			t.Errorf("%s: peak in flight %d, want <= %d", e.Prefix, s.Peak, e.Concurrency)
		}
		// Starts are at least Delay apart (no jitter). The server sees them
		// shifted by a little network latency, hence the slack on the
		// shortest gap; the mean over all gaps is barely affected.
		if min := s.MinGap(); min < e.Delay*8/10 {
			t.Errorf("%s: shortest gap between requests %v, want about %v or more", e.Prefix, min, e.Delay)
		}
		if mean := s.MeanGap(); mean < e.Delay*95/100 {
			t.Errorf("%s: mean gap %v, want >= %v", e.Prefix, mean, e.Delay)
		}
	}
	if res.HostPeak > hostConcurrency {
		t.Errorf("host: peak in flight %d, want <= %d", res.HostPeak, hostConcurrency)
	}
	// Downloads keep their own slow pace; searches are several times faster.
	search, download := res.Endpoints["/search"], res.Endpoints["/download"]
	if g := download.MeanGap(); g > 1500*time.Millisecond {
		t.Errorf("/download: mean gap %v, want about 1s", g)
	}
	if search.Rate() < 3*download.Rate() {
		t.Errorf("/search rate %.1f/s, want well above /download's %.1f/s", search.Rate(), download.Rate())
	}
}

// TestSearchKeepsItsPace checks that /search reaches the rate its Delay
// allows (10/s) while downloads wait for theirs: a download waiting for its
// own 1 s delay does not hold searches behind it in the shared host scope.
func TestSearchKeepsItsPace(t *testing.T) {
	res := runOnce(t)
	if g, d := res.Endpoints["/search"].MeanGap(), endpoints[0].Delay; g > d*3/2 {
		t.Errorf("/search: mean gap %v, want about its Delay %v", g, d)
	}
}
