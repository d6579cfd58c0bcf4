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
	var s *redisstore.Store
	var rdb *redis.Client
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		s, rdb = newStore(t, srv, redisstore.Options{Clock: clock})
		return s
	}, storetest.WithForeign(func(t *testing.T, key string, f storetest.Foreign) { plant(t, rdb, s.Key(key), f) }, 30*time.Second))
}

func TestConformanceClusterRule(t *testing.T) {
	srv := redistest.Start(t)
	var s *redisstore.Store
	var rdb *redis.Client
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) store.Store {
		s, rdb = newStore(t, srv, redisstore.Options{Clock: clock, Cluster: true})
		return s
	}, storetest.PartialAdmission(),
		storetest.WithForeign(func(t *testing.T, key string, f storetest.Foreign) { plant(t, rdb, s.Key(key), f) }, 30*time.Second))
}

// plant writes f into the hash h with a plain client, as a stranger
// would: times in Redis's units (µs), field names admit.lua reads.
func plant(t *testing.T, rdb redis.Cmdable, h string, f storetest.Foreign) {
	t.Helper()
	us := func(tm time.Time) string { return strconv.FormatInt(tm.UnixMicro(), 10) }
	var fields []any
	set := func(kv ...any) { fields = append(fields, kv...) }
	if !f.Lease.IsZero() {
		set("L:stranger|0", us(f.Lease))
	}
	if !f.LastStart.IsZero() {
		set("last", us(f.LastStart))
	}
	if !f.Gate.IsZero() {
		set("gate", us(f.Gate))
	}
	if !f.QuotaStart.IsZero() {
		set("qs", us(f.QuotaStart), "qn", "0", "qu", strconv.FormatInt(f.QuotaUsed, 10))
	}
	if f.Delay != 0 {
		set("d", strconv.FormatInt(f.Delay.Microseconds(), 10))
	}
	if f.Concurrency != 0 {
		set("c", strconv.Itoa(f.Concurrency))
	}
	if f.Version != 0 {
		set("v", strconv.FormatInt(f.Version, 10), "ld", string(f.Data))
	}
	if !f.Turn.IsZero() {
		set("q", us(f.Turn)+"|gone|"+us(f.Turn), "qw", "1")
	}
	if f.Garbage {
		set(garbageFields...)
	}
	if err := rdb.HSet(context.Background(), h, fields...).Err(); err != nil {
		t.Fatal(err)
	}
}

// garbageFields are values no script writes, in every field admit.lua
// and release.lua read.
var garbageFields = []any{"L:g|0", "nan", "L:h|x", "inf", "L:i|1", "-inf", "L:j|2", "1e999", "L:k|-7", "x",
	"last", "x", "jit", "-5", "c", "1e999", "d", "nan", "gate", "inf", "sl", "a,,nan,-1,1e999", "qs", "-inf",
	"qn", "x", "qu", "nan", "v", "1.5", "ld", "\x00{", "w", "inf", "q", "junk||", "qw", "", "e", "9e18", "?", "?"}

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

// TestEveryAdmissionSetsExpiry: every admission leaves its hash with an
// expiry of IdleTTL at least, whatever the hash's fields say and whether
// or not a stranger removed the expiry in between (PERSIST, and a field
// "e" that an older admit.lua read as "the expiry is set until then").
func TestEveryAdmissionSetsExpiry(t *testing.T) {
	const idle = 10 * time.Second
	srv := redistest.Start(t)
	s, client := newStore(t, srv, redisstore.Options{LeaseTTL: time.Second, IdleTTL: idle})
	ctx := context.Background()
	key := s.Key("busy.test")
	for i := range 20 {
		if i > 0 && i%2 == 0 {
			if err := client.Persist(ctx, key).Err(); err != nil {
				t.Fatal(err)
			}
			client.HSet(ctx, key, "e", "9000000000000000000")
			if ttl := client.PTTL(ctx, key).Val(); ttl != -1 {
				t.Fatalf("PERSIST left a TTL of %v", ttl)
			}
		}
		lease := "l" + strconv.Itoa(i)
		ans, err := s.Admit(ctx, &store.Request{Lease: lease,
			Scopes: []store.Scope{{Key: "busy.test", Cost: 1, Concurrency: 1, Jitter: 1}}})
		if err != nil || !ans.Admitted {
			t.Fatalf("admission %d: %v %+v", i, err, ans)
		}
		// At least half of IdleTTL left: set by this admission (bounded
		// from below only loosely: a loaded machine may take long to ask).
		if ttl := client.PTTL(ctx, key).Val(); ttl < idle/2 || ttl > idle*3/2 {
			t.Fatalf("admission %d: the hash has %v to live, want about IdleTTL (%v)", i, ttl, idle)
		}
		if _, err := s.Release(ctx, &store.Release{Lease: lease,
			Scopes: []store.ReleaseScope{{Key: "busy.test", Ticket: ans.Tickets[0], QuotaFloor: -1}}}); err != nil {
			t.Fatal(err)
		}
	}
}
