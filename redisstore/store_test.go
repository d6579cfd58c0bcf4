package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/storetest"
	"github.com/redis/go-redis/v9"
)

var prefixes atomic.Int64

// newStore returns a store on srv under a prefix of its own, closed with
// the test.
func newStore(t testing.TB, srv *redistest.Server, opts redisstore.Options) (*redisstore.Store, *redis.Client) {
	t.Helper()
	client := redisstore.NewClient(&redis.Options{Addr: srv.Addr()})
	if opts.Prefix == "" {
		opts.Prefix = "t" + strconv.FormatInt(prefixes.Add(1), 10) + ":"
	}
	s, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		client.Close()
	})
	return s, client
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		s, _ := newStore(t, srv, redisstore.Options{Clock: clock})
		return s
	})
}

func TestConformanceClusterRule(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		s, _ := newStore(t, srv, redisstore.Options{Clock: clock, Cluster: true})
		return s
	}, storetest.PartialAdmission())
}

var _ = context.Background

// awaitProgress waits for n signals on progress, failing with msg if
// none comes for within (a hang detector for tests on a real Redis).
func awaitProgress(t *testing.T, progress <-chan struct{}, n int, within time.Duration, msg string) {
	t.Helper()
	hang := time.NewTimer(within)
	defer hang.Stop()
	for range n {
		select {
		case <-progress:
		case <-hang.C:
			t.Fatal(msg)
		}
	}
}

// TestKeyExpiryRenewedSparingly, in Redis time: admit.lua renews a
// scope's expiry with a quarter of IdleTTL to spare and skips the
// PEXPIRE while what is left covers the admission, so a busy scope's
// hash always has between IdleTTL and 1.25·IdleTTL to live, and is
// renewed about once per IdleTTL/4, not at every admission.
func TestKeyExpiryRenewedSparingly(t *testing.T) {
	const idle = 1200 * time.Millisecond // above LeaseTTL+1s, the least a hash with a lease keeps
	srv := redistest.Start(t)
	s, client := newStore(t, srv, redisstore.Options{LeaseTTL: 100 * time.Millisecond, IdleTTL: idle})
	ctx := context.Background()
	key := s.Key("busy.test")
	start := time.Now()
	admissions := 0
	renewals := map[string]bool{} // the expiries admit.lua recorded (field e)
	for time.Since(start) < idle {
		lease := "l" + strconv.Itoa(admissions)
		ans, err := s.Admit(ctx, &store.Request{Lease: lease,
			Scopes: []store.Scope{{Key: "busy.test", Cost: 1, Concurrency: 1, Jitter: 1}}})
		if err != nil || !ans.Admitted {
			t.Fatalf("admission %d: %v %+v", admissions, err, ans)
		}
		admissions++
		if ttl := client.PTTL(ctx, key).Val(); ttl < idle-200*time.Millisecond || ttl > idle*5/4 {
			t.Fatalf("admission %d: the hash has %v to live, want IdleTTL (%v) to 1.25 times that", admissions, ttl, idle)
		}
		e := client.HGet(ctx, key, "e").Val()
		if e == "" {
			t.Fatalf("admission %d: no expiry recorded in the hash", admissions)
		}
		renewals[e] = true
		if _, err := s.Release(ctx, &store.Release{Lease: lease,
			Scopes: []store.ReleaseScope{{Key: "busy.test", Ticket: ans.Tickets[0], QuotaFloor: -1}}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// One at the first admission, then at most one per IdleTTL/4.
	if most := 1 + int(idle/(idle/4)); len(renewals) < 1 || len(renewals) > most {
		t.Fatalf("expiry set %d times in %d admissions over %v, want 1 to %d", len(renewals), admissions, idle, most)
	}
	t.Logf("expiry set %d times in %d admissions", len(renewals), admissions)
}
