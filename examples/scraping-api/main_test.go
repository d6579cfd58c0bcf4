package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// runFake runs the example in fake time (a synctest bubble, the API
// served in process), so its waits and gaps are exactly the throttle's,
// however loaded the machine is.
func runFake(t *testing.T) result {
	t.Helper()
	var out strings.Builder
	res := localnet.Run(t, func(ctx context.Context) (result, error) { return run(ctx, &out) })
	t.Log("\n" + out.String())
	return res
}

// TestUpstreamBackoffStaysWithTarget: the target that rate limits is
// slowed, the API scope is not.
func TestUpstreamBackoffStaysWithTarget(t *testing.T) {
	res := runFake(t)
	books, quotes := res.Sites["books.toscrape.com"], res.Sites["quotes.toscrape.com"]
	if books == nil || quotes == nil {
		t.Fatalf("missing sites in %v", res.Sites)
	}

	// books.toscrape.com: limited, then backed off well beyond its Delay.
	if n := books.Limited(); n < 1 {
		t.Fatalf("books.toscrape.com: no upstream 429, the example did not provoke any")
	}
	if got, want := len(books.Fetches)-books.Limited(), len(targets[0].Pages); got != want {
		t.Errorf("books.toscrape.com: %d pages fetched, want %d", got, want)
	}
	if g := res.GapAfter("books.toscrape.com"); g < 2*siteDelay {
		t.Errorf("books.toscrape.com: mean gap after the first 429 %v, want >= %v (backed off)", g, 2*siteDelay)
	}
	// With the backoff done, the site stops complaining: at most a few 429s.
	if n := books.Limited(); n > 3 {
		t.Errorf("books.toscrape.com: %d upstream 429s, want a few at most", n)
	}

	// quotes.toscrape.com never complained and never retried.
	if n := quotes.Limited(); n != 0 || len(quotes.Fetches) != len(targets[1].Pages) {
		t.Errorf("quotes.toscrape.com: %d fetches, %d limited; want %d, 0", len(quotes.Fetches), n, len(targets[1].Pages))
	}

	// The API scope never backed off: a request in the API scope alone
	// starts at once (it would wait about 1 s for a backoff delay).
	if res.AccountWait != 0 {
		t.Errorf("/v1/account waited %v: the API scope was slowed by the target's 429s", res.AccountWait)
	}
	if res.APIPeak > apiConcurrency {
		t.Errorf("API: peak %d in flight, want <= %d", res.APIPeak, apiConcurrency)
	}
}

// TestOtherTargetKeepsItsPace checks that quotes.toscrape.com keeps its
// 200 ms pace while books.toscrape.com backs off: a books request waiting
// for its backoff delay does not hold quotes requests behind it in the
// shared API scope.
func TestOtherTargetKeepsItsPace(t *testing.T) {
	res := runFake(t)
	if g := res.GapAfter("quotes.toscrape.com"); g > siteDelay*5/4 {
		t.Errorf("quotes.toscrape.com: mean gap after books' first 429 %v, want about %v", g, siteDelay)
	}
}

// TestFeedbackRestrictsToTarget checks the FeedbackFunc on its own.
func TestFeedbackRestrictsToTarget(t *testing.T) {
	req, err := http.NewRequest(http.MethodGet, "http://api.scraper.example/v1/?url=http%3A%2F%2Fbooks.toscrape.com%2F", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := &http.Response{StatusCode: 200, Header: http.Header{"X-Upstream-Status": {"429"}}, Request: req}
	fb := upstreamFeedback(time.Now(), resp, nil)
	if !fb.Backoff || len(fb.BackoffScopes) != 1 || fb.BackoffScopes[0] != "books.toscrape.com" {
		t.Errorf("upstream 429: Backoff %v, BackoffScopes %q; want true, [books.toscrape.com]", fb.Backoff, fb.BackoffScopes)
	}
	resp.Header.Set("X-Upstream-Status", "200")
	if fb := upstreamFeedback(time.Now(), resp, nil); fb.Backoff || fb.BackoffScopes != nil {
		t.Errorf("upstream 200: Backoff %v, BackoffScopes %q; want false, nil", fb.Backoff, fb.BackoffScopes)
	}
}
