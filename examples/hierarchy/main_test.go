package main

import (
	"context"
	"strings"
	"testing"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// TestHierarchyLimits runs the example in fake time (a synctest bubble, the hosts
// served in process): every queued request is in flight at once as far as
// the scopes allow, however loaded the machine is, so each peak is exact.
func TestHierarchyLimits(t *testing.T) {
	var out strings.Builder
	res := localnet.Run(t, func(ctx context.Context) (result, error) { return run(ctx, &out) })
	t.Log("\n" + out.String())
	if len(res.Phases) != len(phases) {
		t.Fatalf("got %d phases, want %d", len(res.Phases), len(phases))
	}
	for _, p := range res.Phases {
		if p.BooksReqs != p.Phase.Books || p.QuotesReqs != p.Phase.Quotes {
			t.Errorf("%s: server saw %d+%d requests, want %d+%d", p.Phase.Name, p.BooksReqs, p.QuotesReqs, p.Phase.Books, p.Phase.Quotes)
		}
	}
	// Each subdomain alone reaches exactly its own limit.
	books, quotes, both := res.Phases[0], res.Phases[1], res.Phases[2]
	if books.BooksPeak != booksLimit {
		t.Errorf("books alone: peak %d, want exactly %d", books.BooksPeak, booksLimit)
	}
	if quotes.QuotesPeak != quotesLimit {
		t.Errorf("quotes alone: peak %d, want exactly %d", quotes.QuotesPeak, quotesLimit)
	}
	// Together, the parent's limit holds the sum (which could be 40) to 32,
	// and each subdomain still stays within its own limit.
	if both.TotalPeak != parentLimit {
		t.Errorf("both at once: peak total %d, want exactly %d", both.TotalPeak, parentLimit)
	}
	if both.BooksPeak > booksLimit || both.QuotesPeak > quotesLimit {
		t.Errorf("both at once: peaks books %d quotes %d, want <= %d and <= %d", both.BooksPeak, both.QuotesPeak, booksLimit, quotesLimit)
	}
}
