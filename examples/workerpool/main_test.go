package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// TestWorkerPool runs the three crawls for 3 s each in fake time (a
// synctest bubble, the hosts served in process, so the figures are exact
// whatever the machine's load) and checks what the example shows: the
// ReadyQueue keeps the workers busy (near the ideal) where blocking in
// frontier order collapses, the requeueing loop lies between, and every
// crawl keeps every host's delay.
func TestWorkerPool(t *testing.T) {
	localnet.InProcess(t)
	synctest.Test(t, func(t *testing.T) {
		o := defaultOptions()
		var out strings.Builder
		res, err := run(t.Context(), &out, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Log("\n" + out.String())

		ready := res.Ready.PagesPerSecond(o.Duration)
		blocking := res.Frontier.PagesPerSecond(o.Duration)
		requeue := res.Requeue.PagesPerSecond(o.Duration)
		if ready < 0.9*res.Ideal {
			t.Errorf("ReadyQueue: %.1f pages/s, want >= 90 %% of the ideal %.1f", ready, res.Ideal)
		}
		if blocking > 0.1*res.Ideal {
			t.Errorf("frontier order: %.1f pages/s, want it to collapse (<= 10 %% of the ideal %.1f)", blocking, res.Ideal)
		}
		if requeue < 3*blocking || requeue > ready/2 {
			t.Errorf("requeueing loop: %.1f pages/s, want between 3x blocking (%.1f) and half the ReadyQueue's (%.1f)", requeue, blocking, ready)
		}
		for _, c := range []crawl{res.Ready, res.Frontier, res.Requeue} {
			if len(c.Arrivals[slowHost]) == 0 {
				t.Errorf("%s: no request to %s", c.Name, slowHost)
			}
			for h := range c.Arrivals {
				delay := o.FastDelay
				if h == slowHost {
					delay = o.SlowDelay
				}
				if g := c.MinGap(h); len(c.Arrivals[h]) > 1 && g < delay {
					t.Errorf("%s: %s: requests %v apart, want %v or more", c.Name, h, g, delay)
				}
			}
		}
		for _, row := range []string{"ReadyQueue", "frontier order", "frontier, requeue"} {
			if !strings.Contains(out.String(), row) {
				t.Errorf("output lacks the row %q:\n%s", row, out.String())
			}
		}
	})
}

// TestWorkerLoopDoesNotSpin: the requeueing loop gives up waits that
// would outlast MaxWait (Acquire fails at once when it can tell) and puts
// each URL back for when it can start, so no URL fails twice at one
// instant. A loop that tried again at once would fail again at once, for
// ever (21,310 errors in 3 s were seen at the end of a 30 s run): fake
// time would not move, and here the first repeat fails the test and ends
// the run.
func TestWorkerLoopDoesNotSpin(t *testing.T) {
	localnet.InProcess(t)
	synctest.Test(t, func(t *testing.T) {
		o := defaultOptions()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var (
			mu       sync.Mutex
			failedAt = map[string]time.Time{}
			errs     int
		)
		o.OnWaitError = func(url string, at, readyAt time.Time) {
			mu.Lock()
			defer mu.Unlock()
			errs++
			if readyAt.Before(at) {
				t.Errorf("%s put back for %v, before its failure at %v", url, readyAt, at)
			}
			if last, ok := failedAt[url]; ok && !at.After(last) {
				t.Errorf("%s failed twice at %v: the loop spins", url, at)
				cancel()
			}
			failedAt[url] = at
		}
		srv := &server{latency: o.Latency, rec: map[string][]time.Time{}}
		base, stop := localnet.Serve(srv, "*.example")
		defer stop()
		// Only slow.example's URLs: after each start the next one can
		// start 500ms later, past MaxWait (250ms), so every wait but one
		// per 500ms fails at once.
		var urls []string
		for i := range 20 {
			urls = append(urls, fmt.Sprintf("http://%s/page/%d", slowHost, i))
		}
		c, err := crawlRequeue(ctx, &http.Client{Transport: base}, urls, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d pages, %d waits given up (%d URLs), in %v", c.Pages, errs, len(failedAt), o.Duration)
		if errs == 0 {
			t.Error("no wait was given up: the test shows nothing")
		}
		if errs != c.WaitErrors {
			t.Errorf("the crawl counted %d waits given up, the hook %d", c.WaitErrors, errs)
		}
		// One start per SlowDelay, the first at once.
		if want := int(o.Duration/o.SlowDelay) + 1; c.Pages < want-1 || c.Pages > want {
			t.Errorf("%d pages in %v, want about %d (one per %v)", c.Pages, o.Duration, want, o.SlowDelay)
		}
	})
}
