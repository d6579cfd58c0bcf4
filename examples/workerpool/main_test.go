package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestWorkerPool runs both crawls for 1 s each and checks what the example
// shows: the ReadyQueue keeps the workers busy (near the ideal) where
// blocking in frontier order collapses, and both keep every host's delay.
// The bounds leave room for a loaded machine and the race detector.
func TestWorkerPool(t *testing.T) {
	o := defaultOptions()
	o.Duration = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out strings.Builder
	res, err := run(ctx, &out, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())

	ready, blocking := res.Ready.PagesPerSecond(o.Duration), res.Frontier.PagesPerSecond(o.Duration)
	if ready < 0.7*res.Ideal {
		t.Errorf("ReadyQueue: %.1f pages/s, want >= 70 %% of the ideal %.1f", ready, res.Ideal)
	}
	if blocking > 0.25*res.Ideal {
		t.Errorf("frontier order: %.1f pages/s, want it to collapse (<= 25 %% of the ideal %.1f)", blocking, res.Ideal)
	}
	if ready < 5*blocking {
		t.Errorf("ReadyQueue %.1f pages/s, frontier order %.1f: want >= 5x", ready, blocking)
	}
	for _, c := range []crawl{res.Ready, res.Frontier} {
		if len(c.Arrivals[slowHost]) == 0 {
			t.Errorf("%s: no request to %s", c.Name, slowHost)
		}
		for h := range c.Arrivals {
			delay := o.FastDelay
			if h == slowHost {
				delay = o.SlowDelay
			}
			// Arrivals are starts shifted by a little local latency.
			if g := c.MinGap(h); len(c.Arrivals[h]) > 1 && g < delay*8/10 {
				t.Errorf("%s: %s: requests %v apart, want about %v or more", c.Name, h, g, delay)
			}
		}
	}
	if !strings.Contains(out.String(), "ReadyQueue") || !strings.Contains(out.String(), "frontier order") {
		t.Errorf("output lacks a row:\n%s", out.String())
	}
}
