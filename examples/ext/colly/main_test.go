package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

func runCrawl(t *testing.T, throttled bool) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out strings.Builder
	res, err := run(ctx, &out, throttled)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + out.String())
	return res
}

// TestPerHostLimitsHold: with throttle's Transport and no LimitRule,
// colly's requests to each host are never more than its Concurrency at
// once, and its pages never start closer than its Delay (b.example's from
// its robots.txt Crawl-delay), as the server measures them. robots.txt is
// fetched once per host, through the throttle; it is no start for the
// Delay, so a.example's first page follows its robots.txt (a 404) at
// once, but b.example's Crawl-delay holds its first page a second after
// it.
func TestPerHostLimitsHold(t *testing.T) {
	res := runCrawl(t, true)
	for _, h := range site {
		l := res.Logs[h.Host]
		if l.Pages != pagesPerHost {
			t.Errorf("%s: %d pages crawled, want %d", h.Host, l.Pages, pagesPerHost)
		}
		if got := len(l.Robots); got != 1 {
			t.Errorf("%s: %d robots.txt fetches, want 1", h.Host, got)
		}
		if l.Peak > h.Concurrency {
			t.Errorf("%s: %d requests in flight at once, want <= %d", h.Host, l.Peak, h.Concurrency)
		}
		// Starts are at least Delay apart (no jitter); the server sees
		// them shifted by a little network latency, hence the slack.
		if g := l.MinGap(); g < h.Delay*8/10 {
			t.Errorf("%s: two pages %v apart, want about %v or more", h.Host, g, h.Delay)
		}
	}
	if a := res.Logs["a.example"].FirstAfter(); a >= 200*time.Millisecond {
		t.Errorf("a.example: first page %v after robots.txt, want right after it (robots.txt takes 20ms; Delay 300ms)", a)
	}
	if b := res.Logs["b.example"].FirstAfter(); b < 800*time.Millisecond {
		t.Errorf("b.example: first page %v after robots.txt, want its Crawl-delay, 1s", b)
	}
	if c := res.Logs["c.example"]; c.Peak != 2 {
		t.Errorf("c.example: peak in flight %d, want its Concurrency 2 used (pages take 300ms, Delay 100ms)", c.Peak)
	}
}

// TestCollyAloneHasNoLimits: the same crawl without the throttle sends
// each host's requests at once: the pacing above is the throttle's.
func TestCollyAloneHasNoLimits(t *testing.T) {
	res := runCrawl(t, false)
	violated := 0
	for _, h := range site {
		l := res.Logs[h.Host]
		if l.Pages != pagesPerHost {
			t.Errorf("%s: %d pages crawled, want %d", h.Host, l.Pages, pagesPerHost)
		}
		if l.Peak > h.Concurrency || l.MinGap() < h.Delay/2 {
			violated++
		}
	}
	if violated == 0 {
		t.Error("colly alone kept every host's limits: the example shows nothing")
	}
}
