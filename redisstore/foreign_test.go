package redisstore_test

// State that no worker of the fleet wrote, planted with a plain go-redis
// client on a real redis-server, in Redis time (no Options.Clock): a
// stranger writing under the prefix, an older worker, a worker whose clock
// runs ahead. The store must hold no scope past the bounds its requests
// carry, and leave every key it touches with an expiry.

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/store"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The bounds of the foreign cases' requests.
const (
	foreignLease = 500 * time.Millisecond // Options.LeaseTTL
	foreignWait  = time.Second            // store.Scope.MaxWait
)

// foreignScope is a scope of the foreign cases: Concurrency 1 (at most
// MaxConcurrency 1), no delay, bounded by foreignWait.
func foreignScope(key string) store.Scope {
	return store.Scope{Key: key, Cost: 1, Concurrency: 1, Jitter: 1, MaxWait: foreignWait, MaxConcurrency: 1}
}

// admitUntil asks s to admit sc until it does, each time at the time the
// refusal named: at most five times, each wait at most 3 s (a store that
// names a later time fails the test). It returns the first refusal (the
// zero Answer if admitted at once) and the admission.
func admitUntil(t *testing.T, s *redisstore.Store, lease string, sc store.Scope) (first, admitted store.Answer) {
	t.Helper()
	ctx := context.Background()
	for i := range 5 {
		ans, err := s.Admit(ctx, &store.Request{Lease: lease, Scopes: []store.Scope{sc}})
		require.NoError(t, err, "attempt %d", i)
		if ans.Admitted {
			return first, ans
		}
		if i == 0 {
			first = ans
		}
		wait := ans.At.Sub(ans.Now)
		if ans.At.IsZero() {
			wait = foreignLease // a release: none comes here
		}
		require.LessOrEqual(t, wait, 3*time.Second, "attempt %d refused (%v) until %v, %v after the store's now", i, ans.Reason, ans.At, wait)
		pause := time.NewTimer(wait + time.Millisecond) // until the time named: the store's clock is this one
		<-pause.C
	}
	t.Fatalf("%s: not admitted in 5 attempts, each at the time the store named", sc.Key)
	return
}

// TestForeignStateBounded: for each kind of foreign state, the first
// refusal names a time within the bound that state is allowed (the lease
// bound, MaxWait, the quota window, a turn's longest), the scope admits
// by then, and the key has an expiry.
func TestForeignStateBounded(t *testing.T) {
	srv := redistest.Start(t)
	s, rdb := newStore(t, srv, redisstore.Options{LeaseTTL: foreignLease})
	ctx := context.Background()
	far := "9000000000000000000" // µs: the year 287,000
	for _, c := range []struct {
		name   string
		fields []any
		bound  time.Duration // of the first refusal; 0: admitted at once
		sc     func(*store.Scope)
	}{
		{"a lease for ever", []any{"L:stranger|0", far}, foreignLease, nil},
		{"a lease of infinity", []any{"L:stranger|-1", "inf"}, 0, nil},
		{"a previous start ahead", []any{"last", far}, 200 * time.Millisecond, func(sc *store.Scope) { sc.Delay = 200 * time.Millisecond }},
		{"a gate for ever", []any{"gate", far}, foreignWait, nil},
		{"a gate of infinity", []any{"gate", "inf"}, 0, nil},
		{"a shared delay of a century", []any{"d", "3153600000000000", "last", "1"}, 0, nil},
		{"a shared concurrency of 2^40 and a lease", []any{"c", "1099511627776", "L:stranger|0", far}, foreignLease, nil},
		{"a quota window ahead, spent", []any{"qs", far, "qn", "0", "qu", far}, time.Second,
			func(sc *store.Scope) { sc.Quota, sc.Window = 5, time.Second }},
		{"slots started ahead", []any{"sl", far + "," + far}, 100 * time.Millisecond,
			func(sc *store.Scope) { sc.SlotDelay, sc.Concurrency, sc.MaxConcurrency = 100*time.Millisecond, 2, 2 }},
		{"a turn for ever", []any{"q", "1|gone|" + far, "qw", "1"}, max(foreignWait, foreignLease) + store.TurnGrace, nil},
		{"a turn from the future", []any{"q", far + "|gone|" + far}, max(foreignWait, foreignLease) + store.TurnGrace, nil},
		{"a huge jitter", []any{"jit", "1e200", "last", "1"}, 0, nil},
		{"an expiry record for ever", []any{"e", far}, 0, nil},
		{"garbage in every field", garbageFields, 0, nil},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			key := "foreign-" + strings.ReplaceAll(c.name, " ", "-")
			h := s.Key(key)
			require.NoError(t, rdb.HSet(ctx, h, c.fields...).Err())
			require.Equal(t, time.Duration(-1), rdb.PTTL(ctx, h).Val(), "the stranger's key has no expiry")
			sc := foreignScope(key)
			if c.sc != nil {
				c.sc(&sc)
			}
			first, adm := admitUntil(t, s, "l", sc)
			if c.bound == 0 {
				require.True(t, first.Now.IsZero(), "refused (%v) until %v: want admitted at once", first.Reason, first.At)
			} else {
				require.False(t, first.Now.IsZero(), "admitted at once: the planted state held nothing back")
				require.LessOrEqual(t, first.At.Sub(first.Now), c.bound, "the first refusal (%v)", first.Reason)
			}
			require.Greater(t, rdb.PTTL(ctx, h).Val(), time.Duration(0), "the key's expiry")
			// Nothing left holds the scope past the bound.
			_, err := s.Release(ctx, &store.Release{Lease: "l", Scopes: []store.ReleaseScope{{Key: key, Ticket: adm.Tickets[0], QuotaFloor: -1}}})
			require.NoError(t, err)
			again, err := s.Admit(ctx, &store.Request{Lease: "again", Scopes: []store.Scope{sc}})
			require.NoError(t, err)
			require.True(t, again.Admitted || again.At.Sub(again.Now) <= max(foreignWait, sc.Window), "after the first admission: %+v", again)
		})
	}
}

// TestForeignConcurrencyBounded: a shared concurrency of 2^40 written by
// a stranger admits no more than the request's MaxConcurrency.
func TestForeignConcurrencyBounded(t *testing.T) {
	srv := redistest.Start(t)
	s, rdb := newStore(t, srv, redisstore.Options{LeaseTTL: foreignLease})
	ctx := context.Background()
	require.NoError(t, rdb.HSet(ctx, s.Key("wide.test"), "c", "1099511627776").Err())
	sc := foreignScope("wide.test")
	sc.Concurrency, sc.MaxConcurrency = 2, 2
	for i := range 3 {
		ans, err := s.Admit(ctx, &store.Request{Lease: "l" + strconv.Itoa(i), Scopes: []store.Scope{sc}})
		require.NoError(t, err)
		require.Equal(t, i < 2, ans.Admitted, "admission %d: %+v", i, ans)
	}
}

// TestForeignKeyTypes: a string, list, set, sorted set or stream where a
// scope's hash belongs is no scope's state: the scope admits at once, the
// key becomes its hash with an expiry; a release and a renewal on such a
// key work too, without an error.
func TestForeignKeyTypes(t *testing.T) {
	srv := redistest.Start(t)
	s, rdb := newStore(t, srv, redisstore.Options{LeaseTTL: foreignLease})
	ctx := context.Background()
	for name, put := range map[string]func(h string) error{
		"string": func(h string) error { return rdb.Set(ctx, h, "x", 0).Err() },
		"list":   func(h string) error { return rdb.RPush(ctx, h, "a", "b").Err() },
		"set":    func(h string) error { return rdb.SAdd(ctx, h, "a").Err() },
		"zset":   func(h string) error { return rdb.ZAdd(ctx, h, redis.Z{Score: 1, Member: "a"}).Err() },
		"stream": func(h string) error { return rdb.XAdd(ctx, &redis.XAddArgs{Stream: h, Values: []any{"a", "b"}}).Err() },
	} {
		t.Run(name, func(t *testing.T) {
			for _, first := range []string{"admit", "release"} {
				key := name + "-" + first + ".test"
				h := s.Key(key)
				require.NoError(t, put(h))
				if first == "release" {
					// A 429's gate, onto the stranger's key.
					_, err := s.Release(ctx, &store.Release{Lease: "gone", Scopes: []store.ReleaseScope{{Key: key,
						QuotaFloor: -1, Gate: time.Now().Add(100 * time.Millisecond)}}})
					require.NoError(t, err, "release onto a %s", name)
					require.Equal(t, "hash", rdb.Type(ctx, h).Val())
				}
				_, adm := admitUntil(t, s, "l", foreignScope(key))
				require.Equal(t, "hash", rdb.Type(ctx, h).Val())
				require.Greater(t, rdb.PTTL(ctx, h).Val(), time.Duration(0))
				require.Equal(t, 1, s.Renew(ctx))
				// The stranger again, while the lease is held: the
				// renewal finds no lease, the release no error.
				require.NoError(t, rdb.Del(ctx, h).Err())
				require.NoError(t, put(h))
				require.Equal(t, 0, s.Renew(ctx), "renewal of a lease in a key of another type")
				_, err := s.Release(ctx, &store.Release{Lease: "l", Scopes: []store.ReleaseScope{{Key: key, Ticket: adm.Tickets[0], QuotaFloor: -1}}})
				require.NoError(t, err, "release of a lease in a key of another type")
			}
		})
	}
}

// TestForeignStuffedHash: a scope's hash stuffed with 20,000 fields by a
// stranger (leases of ever, junk) is no scope's state: it is dropped at
// the first admission, which admits at once; the hash is small again.
func TestForeignStuffedHash(t *testing.T) {
	srv := redistest.Start(t)
	s, rdb := newStore(t, srv, redisstore.Options{LeaseTTL: foreignLease})
	ctx := context.Background()
	h := s.Key("stuffed.test")
	var fields []any
	for i := range 10_000 {
		fields = append(fields, "junk:"+strconv.Itoa(i), "x", "L:s"+strconv.Itoa(i)+"|0", "9000000000000000000")
	}
	require.NoError(t, rdb.HSet(ctx, h, fields...).Err())
	_, adm := admitUntil(t, s, "l", foreignScope("stuffed.test"))
	require.Zero(t, adm.Reason)
	n := rdb.HLen(ctx, h).Val()
	require.Less(t, n, int64(16), "fields left")
	require.Greater(t, rdb.PTTL(ctx, h).Val(), time.Duration(0))
}

// TestClockSkewBetweenWorkers: a worker whose Options.Clock runs an hour
// ahead of Redis (misconfigured: every worker must share it) starts a
// request and receives a 429 with Retry-After: 1, writing a start and a
// gate an hour ahead; a worker on Redis's time is held by them no longer
// than its bound (Backoff.MaxDelay 1 s): an hour of skew is cut to it.
func TestClockSkewBetweenWorkers(t *testing.T) {
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	ahead, _ := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, Clock: skewedClock{time.Hour}})
	onTime, _ := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix})
	mod := func(c *throttle.Config) {
		c.Default.Backoff.MinDelay, c.Default.Backoff.MaxDelay = 100*time.Millisecond, time.Second
	}
	a := fleetManager(t, ahead, 1, 0, mod)
	b := fleetManager(t, onTime, 1, 0, mod)
	const url = "http://skew.test/"
	p := acquireWithin(t, a, url, 5*time.Second)
	p.Release(&http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{"Retry-After": {"1"}}}, nil)
	_, adm, err := b.TryAcquire(getReq(t, url))
	require.NoError(t, err)
	wait := time.Until(adm.At)
	t.Logf("a worker an hour ahead started and was told to wait; one on Redis's time is refused (%v) for %v", adm.Reason, wait.Round(time.Millisecond))
	require.LessOrEqual(t, wait, time.Second+100*time.Millisecond, "held by the skewed worker's start and gate")
	acquireWithin(t, b, url, 10*time.Second).Release(nil, nil)
}

// skewedClock is the real clock, d ahead.
type skewedClock struct{ d time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.d) }

func (c skewedClock) NewTimer(d time.Duration) throttle.Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// TestForeignLearnedStateTooLarge: learned state of 1 MiB under a newer
// version (no policy writes more than a few KiB) is not handed out to
// every admission, and the workers' own replaces it at their next
// release instead of conflicting with it.
func TestForeignLearnedStateTooLarge(t *testing.T) {
	srv := redistest.Start(t)
	s, rdb := newStore(t, srv, redisstore.Options{LeaseTTL: foreignLease})
	ctx := context.Background()
	require.NoError(t, rdb.HSet(ctx, s.Key("big.test"), "v", "5", "ld", strings.Repeat("x", 1<<20)).Err())
	ans, err := s.Admit(ctx, &store.Request{Lease: "l", Scopes: []store.Scope{foreignScope("big.test")}})
	require.NoError(t, err)
	require.True(t, ans.Admitted)
	require.Nil(t, ans.Learned[0].Data, "1 MiB of learned state handed out")
	rel, err := s.Release(ctx, &store.Release{Lease: "l", Scopes: []store.ReleaseScope{{Key: "big.test", Ticket: ans.Tickets[0],
		QuotaFloor: -1, Learned: true, Version: 0, Data: []byte(`{"v":1}`), Concurrency: 1}}})
	require.NoError(t, err)
	require.Empty(t, rel.Conflicts)
	require.Equal(t, `{"v":1}`, rdb.HGet(ctx, s.Key("big.test"), "ld").Val())
}

// TestForeignManyLeases: 4,500 leases "for ever" in a scope of
// Concurrency 4,500 (under the field cap) are cut to LeaseTTL, and the
// cut is written back in calls Lua can make (one HSET of 9,000 arguments
// is beyond its unpack).
func TestForeignManyLeases(t *testing.T) {
	const n = 4500
	srv := redistest.Start(t)
	s, rdb := newStore(t, srv, redisstore.Options{LeaseTTL: foreignLease})
	ctx := context.Background()
	var fields []any
	for i := range n {
		fields = append(fields, "L:s"+strconv.Itoa(i)+"|-1", "9000000000000000000")
	}
	require.NoError(t, rdb.HSet(ctx, s.Key("many.test"), fields...).Err())
	sc := foreignScope("many.test")
	sc.Concurrency, sc.MaxConcurrency = n, n
	first, _ := admitUntil(t, s, "l", sc)
	require.Equal(t, store.ReasonConcurrency, first.Reason)
	require.LessOrEqual(t, first.At.Sub(first.Now), foreignLease)
}
