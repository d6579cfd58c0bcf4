package main

import (
	"context"
	"strings"
	"testing"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// TestSharedRegistrableDomain runs the example in fake time (a synctest bubble, the hosts
// served in process): every queued request is in flight at once as far as
// the scopes allow, however loaded the machine is, so each peak is exact.
func TestSharedRegistrableDomain(t *testing.T) {
	var out strings.Builder
	res := localnet.Run(t, func(ctx context.Context) (result, error) { return run(ctx, &out) })
	t.Log("\n" + out.String())

	for _, s := range sites {
		if got := res.Hosts[s.host].Requests; got != pagesPerHost {
			t.Errorf("%s: server saw %d requests, want %d", s.host, got, pagesPerHost)
		}
	}
	// The three example.co.uk hosts are one scope: together never more
	// than its Concurrency in flight, and the limit is actually reached.
	if got := res.Sites["example.co.uk"].Peak; got != concurrency {
		t.Errorf("example.co.uk (3 hosts): peak in flight %d, want exactly %d", got, concurrency)
	}
	// alice.github.io and bob.github.io are separate sites, each with its
	// own scope and its own Concurrency.
	for _, o := range []string{"alice.github.io", "bob.github.io"} {
		if got := res.Sites[o].Peak; got != concurrency {
			t.Errorf("%s: peak in flight %d, want exactly %d", o, got, concurrency)
		}
	}
	// Unrelated scopes run side by side: overall more than one scope's limit,
	// never more than all three together.
	if got := res.All.Peak; got <= concurrency || got > 3*concurrency {
		t.Errorf("all hosts: peak in flight %d, want in (%d, %d]", got, concurrency, 3*concurrency)
	}
}
