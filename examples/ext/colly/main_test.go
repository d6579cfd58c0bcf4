package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// runCrawl runs the crawl in fake time (a synctest bubble, the site
// served in process), so the times the server sees are the starts the
// throttle allowed, exactly, however loaded the machine is.
func runCrawl(t *testing.T, o options) result {
	t.Helper()
	var out strings.Builder
	res := localnet.Run(t, func(ctx context.Context) (result, error) { return run(ctx, &out, o) })
	t.Log("\n" + out.String())
	return res
}

// crawlOK runs the crawl with a minute's request timeout, as main does,
// and fails t on a page colly could not fetch.
func crawlOK(t *testing.T, o options) result {
	t.Helper()
	o.RequestTimeout = time.Minute
	res := runCrawl(t, o)
	for _, err := range res.Errors {
		t.Error(err)
	}
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
	res := crawlOK(t, options{Throttled: true})
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
		// Starts are at least Delay apart (no jitter).
		if g := l.MinGap(); g < h.Delay {
			t.Errorf("%s: two pages %v apart, want %v or more", h.Host, g, h.Delay)
		}
	}
	// robots.txt takes 20ms to answer; the first page follows it at once.
	if a := res.Logs["a.example"].FirstAfter(); a != 20*time.Millisecond {
		t.Errorf("a.example: first page %v after robots.txt, want right after its 20ms answer (Delay 300ms)", a)
	}
	if b := res.Logs["b.example"].FirstAfter(); b < time.Second {
		t.Errorf("b.example: first page %v after robots.txt, want its Crawl-delay, 1s", b)
	}
	if c := res.Logs["c.example"]; c.Peak != 2 {
		t.Errorf("c.example: peak in flight %d, want its Concurrency 2 used (pages take 300ms, Delay 100ms)", c.Peak)
	}
}

// TestCollyAloneHasNoLimits: the same crawl without the throttle sends
// each host's requests at once: the pacing above is the throttle's.
func TestCollyAloneHasNoLimits(t *testing.T) {
	res := crawlOK(t, options{})
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

// TestCollyTimeoutCountsTheWait: colly's request timeout is its
// http.Client's Timeout, which runs while the request waits in the
// throttle. With 2 s, b.example's pages queued behind its 1 s Crawl-delay
// fail (at once when the throttle sees the wait will not fit:
// "stopped waiting for scope ... context deadline exceeded"); colly's
// default 10 s failed 9 of 60 pages of a real crawl so. Hence
// SetRequestTimeout in the example.
func TestCollyTimeoutCountsTheWait(t *testing.T) {
	res := runCrawl(t, options{Throttled: true, RequestTimeout: 2 * time.Second})
	// When the client's timer has fired, net/http keeps only the text of
	// the transport's error: look for the throttle's words.
	waits := 0
	for _, err := range res.Errors {
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "http://b.example/") {
			t.Errorf("%v: want b.example's pages to fail, past their deadline", err)
		}
		if strings.Contains(err.Error(), `throttle: stopped waiting for scope "b.example"`) {
			waits++
		}
	}
	if waits == 0 {
		t.Errorf("%d pages failed, none while waiting in the throttle", len(res.Errors))
	}
	// A page sent just before the deadline may fail awaiting its answer.
	if l := res.Logs["b.example"]; l.Pages+len(res.Errors) < pagesPerHost {
		t.Errorf("b.example: %d pages and %d errors, want %d in all", l.Pages, len(res.Errors), pagesPerHost)
	}
}

// TestLimitRuleOnTopBlocksTheHeadOfTheLine: colly's LimitRule on top of
// the throttle adds nothing the throttle does not do, and costs time: its
// Parallelism slots are held by requests waiting in the throttle for a
// slow host (b.example's 1 s Crawl-delay) while requests for hosts that
// could go wait behind them. (A LimitRule{Parallelism: 16} halved a fast
// host's rate in a real crawl.)
func TestLimitRuleOnTopBlocksTheHeadOfTheLine(t *testing.T) {
	alone := crawlOK(t, options{Throttled: true})
	ruled := crawlOK(t, options{Throttled: true, Parallelism: 2})
	last := func(r result, host string) time.Duration {
		a := r.Logs[host].Arrivals
		return a[len(a)-1].Sub(r.Logs["a.example"].Arrivals[0])
	}
	if la, lr := last(alone, "c.example"), last(ruled, "c.example"); lr <= la {
		t.Errorf("c.example: last page %v into the crawl with the LimitRule, %v without: want later", lr, la)
	}
	if ruled.Elapsed <= alone.Elapsed {
		t.Errorf("crawl took %v with the LimitRule, %v without: want longer", ruled.Elapsed, alone.Elapsed)
	}
}
