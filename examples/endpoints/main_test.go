package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// runFake runs the example in fake time (a synctest bubble, the API
// served in process), so the gaps the server sees are the starts the
// throttle allowed, exactly, however loaded the machine is.
func runFake(t *testing.T) result {
	t.Helper()
	var out strings.Builder
	res := localnet.Run(t, func(ctx context.Context) (result, error) { return run(ctx, &out) })
	t.Log("\n" + out.String())
	return res
}

// TestEndpointLimits checks what every endpoint scope guarantees: its own
// Delay between starts and its own Concurrency.
func TestEndpointLimits(t *testing.T) {
	res := runFake(t)
	for _, e := range endpoints {
		s := res.Endpoints[e.Prefix]
		if s.Requests != e.Requests {
			t.Errorf("%s: server saw %d requests, want %d", e.Prefix, s.Requests, e.Requests)
			continue
		}
		if s.Peak > e.Concurrency {
			t.Errorf("%s: peak in flight %d, want <= %d", e.Prefix, s.Peak, e.Concurrency)
		}
		// Starts are at least Delay apart (no jitter).
		if min := s.MinGap(); min < e.Delay {
			t.Errorf("%s: shortest gap between requests %v, want %v or more", e.Prefix, min, e.Delay)
		}
	}
	if res.HostPeak > hostConcurrency {
		t.Errorf("host: peak in flight %d, want <= %d", res.HostPeak, hostConcurrency)
	}
	// Downloads keep their own slow pace; searches are several times faster.
	search, download := res.Endpoints["/search"], res.Endpoints["/download"]
	if g := download.MeanGap(); g > 1100*time.Millisecond {
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
	res := runFake(t)
	if g, d := res.Endpoints["/search"].MeanGap(), endpoints[0].Delay; g > d*11/10 {
		t.Errorf("/search: mean gap %v, want about its Delay %v", g, d)
	}
}
