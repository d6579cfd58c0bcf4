package storetest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
)

// Foreign is state a store holds for a scope that no manager of the fleet
// put there: a stranger writing under the same keys, a worker of an older
// version or another configuration, a worker whose clock was ahead. A
// store must apply it within each request's bounds (store.Scope.MaxWait,
// MaxConcurrency) and its own lease bound: no scope is held longer, nor
// admits more at once, whatever it finds. The zero value plants nothing;
// each field that is set is planted as it is.
type Foreign struct {
	// Lease is a lease of no live worker, held until then.
	Lease time.Time
	// LastStart is a previous start at that time.
	LastStart time.Time
	// Gate holds every start until then.
	Gate time.Time
	// QuotaStart and QuotaUsed are a quota window that began then, with
	// that cost counted in it.
	QuotaStart time.Time
	QuotaUsed  int64
	// Delay and Concurrency are the shared values stored with learned
	// state (planted when not zero).
	Delay       time.Duration
	Concurrency int
	// Version and Data are learned state (planted when Version is not
	// zero).
	Version int64
	Data    []byte
	// Turn is the turn of a waiter that is gone, until then.
	Turn time.Time
	// Garbage fills every part of the scope's state with values the
	// store's representation can hold but no store writes: for a hash of
	// strings, text, "nan", "inf", negative and huge numbers; for typed
	// state, negative numbers and times before the epoch.
	Garbage bool
}

// Plant puts f into the state the store keeps for the scope key, as a
// stranger would, without the store's own code: with another client for
// a database (the timestamps in the store's units, on the suite's clock),
// through a test hook for a store in memory.
type Plant func(t *testing.T, key string, f Foreign)

// WithForeign runs the cases of foreign state (see Foreign) with plant.
// leaseTTL is how long the store holds a lease that is not renewed (for
// redisstore, Options.LeaseTTL): a planted lease must be free that long
// after the first admission that finds it.
func WithForeign(plant Plant, leaseTTL time.Duration) Option {
	return func(o *options) { o.plant, o.leaseTTL = plant, leaseTTL }
}

// The foreign cases' scope: Delay 1 s, backoff's MaxDelay 10 s, so a
// request's bound (store.Scope.MaxWait) is 10 s.
const (
	foreignDelay = time.Second
	foreignBound = 10 * time.Second
	farFuture    = 100 * 365 * 24 * time.Hour
)

func foreignConfig(f func(*throttle.ScopeConfig)) throttle.ScopeConfig {
	return config(func(sc *throttle.ScopeConfig) {
		sc.Delay = foreignDelay
		sc.Backoff.MinDelay, sc.Backoff.MaxDelay = foreignDelay, foreignBound
		if f != nil {
			f(sc)
		}
	})
}

// refusedWithin checks that m, if it refuses r, refuses it until no
// later than bound from now, and returns then; when m admits r it returns
// the permit.
func refusedWithin(t *testing.T, m *throttle.ThrottlingManager, r *http.Request, bound time.Duration) (time.Time, *throttle.Permit) {
	t.Helper()
	p, adm, err := m.TryAcquire(r)
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	if p != nil {
		return time.Time{}, p
	}
	now := m.Clock().Now()
	if adm.At.After(now.Add(bound)) {
		t.Fatalf("refused (%v) until %v, %v from now: longer than the bound %v", adm.Reason, adm.At, adm.At.Sub(now), bound)
	}
	return adm.At, nil
}

// admitAt is the permit refusedWithin returned, or the one m gives at at.
func admitAt(t *testing.T, p *pair, m *throttle.ThrottlingManager, r *http.Request, at time.Time, pm *throttle.Permit) *throttle.Permit {
	t.Helper()
	if pm != nil {
		return pm
	}
	p.clock.Set(at)
	return mustTry(t, m, r)
}

// testForeignLease: a lease held "for a century" by no live worker
// frees its slot within the store's lease bound.
func testForeignLease(t *testing.T, p *pair) {
	w1, w2 := p.workers(foreignConfig(nil))
	p.opts.plant(t, "lease.test", Foreign{Lease: p.clock.Now().Add(farFuture)})
	r := req(t, "lease.test")
	mustRefuse(t, w1, r, throttle.ReasonConcurrency, time.Time{})
	p.clock.Advance(p.opts.leaseTTL)
	mustTry(t, w2, r).Release(ok200, nil)
}

// testForeignTimes: a previous start, a gate, a quota window and a turn
// a century ahead hold the scope no longer than their bounds from the
// first admission that finds them (the start to now, the gate to the
// request's bound, the quota window to one Window, the turn to the
// longest a waiter's lasts: the lease bound, or the bound, or the Window,
// and store.TurnGrace); then the scope runs at its own pace.
func testForeignTimes(t *testing.T, p *pair) {
	const window = 20 * time.Second
	w1, w2 := p.workers(foreignConfig(func(sc *throttle.ScopeConfig) {
		sc.Concurrency, sc.Quota, sc.Window = 4, 5, window
	}))
	far := p.clock.Now().Add(farFuture)
	p.opts.plant(t, "times.test", Foreign{LastStart: far, Gate: far, QuotaStart: far, QuotaUsed: 1 << 40, Turn: far})
	r := req(t, "times.test")
	limit := max(foreignBound, window, p.opts.leaseTTL) + store.TurnGrace
	t0 := p.clock.Now()
	if _, pm := refusedWithin(t, w1, r, limit); pm != nil {
		t.Fatal("admitted at once: the planted state held nothing back")
	}
	for p.clock.Now().Before(t0.Add(2 * limit)) {
		p.clock.Advance(time.Second)
		pm, _, err := w2.TryAcquire(r)
		if err != nil {
			t.Fatal(err)
		}
		if pm == nil {
			continue
		}
		if held := p.clock.Now().Sub(t0); held > limit {
			t.Fatalf("admitted %v after the first refusal; the bounds allow %v", held, limit)
		}
		pm.Release(ok200, nil)
		mustRefuse(t, w1, r, throttle.ReasonDelay, pm.Acquired().Add(foreignDelay))
		return
	}
	t.Fatalf("the scope never admitted in %v", 2*limit)
}

// testForeignLimits: a shared delay of a century is applied as the
// request's bound, and a shared concurrency of 2^40 as the most the
// policy allows (Concurrency 2, no rampup).
func testForeignLimits(t *testing.T, p *pair) {
	w1, w2 := p.workers(foreignConfig(func(sc *throttle.ScopeConfig) { sc.Concurrency = 2 }))
	p.opts.plant(t, "limits.test", Foreign{Delay: farFuture, Concurrency: 1 << 40})
	r := req(t, "limits.test")
	a := mustTry(t, w1, r)
	at, pm := refusedWithin(t, w2, r, foreignBound)
	b := admitAt(t, p, w2, r, at, pm)
	p.clock.Advance(foreignBound)
	mustRefuse(t, w1, r, throttle.ReasonConcurrency, time.Time{}) // 2 held: no more
	a.Release(ok200, nil)
	b.Release(ok200, nil)
}

// testForeignGarbage: values no store writes, in every part of the
// state, read as absent: they make no call fail, hold nothing back and
// allow no more at once than the policy (Concurrency 2); the scope's own
// state replaces them.
func testForeignGarbage(t *testing.T, p *pair) {
	w1, w2 := p.workers(foreignConfig(func(sc *throttle.ScopeConfig) { sc.Concurrency, sc.Delay = 2, 0 }))
	p.opts.plant(t, "garbage.test", Foreign{Garbage: true})
	r := req(t, "garbage.test")
	a := mustTry(t, w1, r)
	b := mustTry(t, w2, r)
	mustRefuse(t, w1, r, throttle.ReasonConcurrency, time.Time{})
	a.Release(tooMany(r, 5), nil)
	// The 429 is shared: its Retry-After gates the scope.
	mustRefuse(t, w2, r, throttle.ReasonGate, a.Acquired().Add(5*time.Second))
	b.Release(ok200, nil)
	p.clock.Advance(5 * time.Second)
	mustTry(t, w2, r).Release(ok200, nil)
}

// testForeignVersion: a learned-state version beyond store.MaxVersion
// reads as none: the workers' learned state is stored over it, and handed
// out with a version a store counts from.
func testForeignVersion(t *testing.T, p *pair) {
	p.opts.plant(t, "version.test", Foreign{Version: 1 << 62, Data: []byte(`{"v":1}`)})
	ctx := context.Background()
	ans, err := p.store.Release(ctx, &store.Release{Scopes: []store.ReleaseScope{{
		Key: "version.test", QuotaFloor: -1, Learned: true, Version: 0, Data: []byte(`{"v":1,"x":1}`), Concurrency: 1}}})
	if err != nil || len(ans.Conflicts) != 0 {
		t.Fatalf("learned state over a version past MaxVersion: %+v, %v; want stored", ans, err)
	}
	adm, err := p.store.Admit(ctx, &store.Request{Lease: "v", Scopes: []store.Scope{{
		Key: "version.test", Cost: 1, Concurrency: 1, Jitter: 1}}})
	if err != nil || !adm.Admitted {
		t.Fatalf("admission: %+v, %v", adm, err)
	}
	if l := adm.Learned[0]; l.Version != 1 || string(l.Data) != `{"v":1,"x":1}` {
		t.Fatalf("learned state %d %q, want version 1 with the workers' data", l.Version, l.Data)
	}
	if _, err := p.store.Release(ctx, &store.Release{Scopes: []store.ReleaseScope{{
		Key: "version.test", QuotaFloor: -1, Learned: true, Version: store.MaxVersion + 1, Concurrency: 1}}}); err == nil {
		t.Fatal("a Release with a version past MaxVersion: no error")
	}
}
