package redisstore_test

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/redis/go-redis/v9"
)

// countHook counts the commands a client sends, pipelines included.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

var _ = net.Dial

func req(t testing.TB, host string) *http.Request {
	r, err := http.NewRequest(http.MethodGet, "http://"+host+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func sharedManager(t testing.TB, st store.Store, clock throttle.Clock, f func(*throttle.Config)) *throttle.ThrottlingManager {
	t.Helper()
	cfg := throttle.DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter, cfg.Default.Backoff.Jitter = 0, 0, throttle.Jitter{}, throttle.Jitter{}
	cfg.Store, cfg.Clock = st, clock
	cfg.Robots.Enabled = false
	if f != nil {
		f(&cfg)
	}
	m, err := throttle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestOneRoundTripEach counts commands: one per uncontended admission (one
// script for all three scopes), one per release.
func TestOneRoundTripEach(t *testing.T) {
	srv := redistest.Start(t)
	s, client := newStore(t, srv, redisstore.Options{})
	hook := &countHook{}
	client.AddHook(hook)
	m := sharedManager(t, s, nil, nil)
	r := req(t, "rt.test")
	r = r.WithContext(throttle.WithScopeKeys(r.Context(), "rt.test", "api", "cost"))
	ctx := context.Background()
	// The first Acquire also subscribes to the release channel, once for
	// the store's lifetime: warm up with it.
	p, err := m.Acquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	p.Release(&http.Response{StatusCode: 200}, nil)
	for i := range 20 {
		before := hook.n.Load()
		p, err := m.Acquire(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		admit := hook.n.Load() - before
		p.Release(&http.Response{StatusCode: 200}, nil)
		release := hook.n.Load() - before - admit
		if admit != 1 || release != 1 {
			t.Fatalf("request %d: %d commands to admit, %d to release; want 1 and 1", i, admit, release)
		}
	}
}

// TestLeaseExpires in fake time: a permit whose holder stopped renewing
// (its store closed, as a killed worker's) frees its slot after LeaseTTL;
// releasing it afterwards is harmless.
func TestLeaseExpires(t *testing.T) {
	srv := redistest.Start(t)
	clock := throttletest.NewClock(time.Now())
	dead, _ := newStore(t, srv, redisstore.Options{Clock: clock, LeaseTTL: 10 * time.Second, Prefix: "lease:"})
	live, _ := newStore(t, srv, redisstore.Options{Clock: clock, LeaseTTL: 10 * time.Second, Prefix: "lease:"})
	m1 := sharedManager(t, dead, clock, nil)
	m2 := sharedManager(t, live, clock, nil)
	r := req(t, "lease.test")
	p, _, err := m1.TryAcquire(r)
	if err != nil || p == nil {
		t.Fatal("first permit refused", err)
	}
	dead.Close() // no more renewals
	clock.Advance(9 * time.Second)
	if q, adm, _ := m2.TryAcquire(r); q != nil || adm.Reason != throttle.ReasonConcurrency {
		t.Fatalf("slot free before the lease ended: %v", adm)
	}
	if q, adm, _ := m2.TryAcquire(r); q != nil || adm.At.Sub(p.Acquired().Add(10*time.Second)).Abs() > time.Millisecond {
		t.Fatalf("refusal names %v, want the lease's expiry %v", adm.At, p.Acquired().Add(10*time.Second))
	}
	clock.Advance(time.Second)
	q, adm, err := m2.TryAcquire(r)
	if err != nil || q == nil {
		t.Fatalf("slot not freed at the lease's expiry: %v %v", adm, err)
	}
	// A renewal from the live store keeps q's lease past its first TTL.
	clock.Advance(9 * time.Second)
	if n := live.Renew(context.Background()); n != 1 {
		t.Fatalf("renewed %d leases, want 1", n)
	}
	clock.Advance(5 * time.Second)
	if x, adm, _ := m1.TryAcquire(r); x != nil || adm.Reason != throttle.ReasonConcurrency {
		t.Fatalf("renewed lease lost: %v", adm)
	}
	p.Release(&http.Response{StatusCode: 200}, nil) // long expired: harmless
	if x, adm, _ := m1.TryAcquire(r); x != nil || adm.Reason != throttle.ReasonConcurrency {
		t.Fatalf("releasing an expired lease freed another's slot: %v", adm)
	}
	q.Release(&http.Response{StatusCode: 200}, nil)
}
