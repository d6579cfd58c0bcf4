package storetest

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/throttletest"
)

// The turns of waiters (store.TurnGrace): first come, first served across
// the managers that share a store.

// admitReq is a request for one scope key, Concurrency 1, no delay.
func admitReq(lease, key string, waits bool, since time.Time) *store.Request {
	return &store.Request{Lease: lease, Waits: waits, Since: since,
		Scopes: []store.Scope{{Key: key, Cost: 1, Concurrency: 1, Jitter: 1}}}
}

func admitOnce(t *testing.T, st store.Store, req *store.Request) store.Answer {
	t.Helper()
	ans, err := st.Admit(context.Background(), req)
	if err != nil {
		t.Fatalf("Admit %s: %v", req.Lease, err)
	}
	return ans
}

func wantRefused(t *testing.T, ans store.Answer, lease string, why store.Reason) {
	t.Helper()
	if ans.Admitted || ans.Reason != why {
		t.Fatalf("%s: admitted %v, reason %v; want refused for %v", lease, ans.Admitted, ans.Reason, why)
	}
}

func wantAdmitted(t *testing.T, ans store.Answer, lease string) {
	t.Helper()
	if !ans.Admitted {
		t.Fatalf("%s refused for %v (at %v); want admitted", lease, ans.Reason, ans.At)
	}
}

// endLease releases lease in key, admitted with ans (a waiter that gives
// up, when ans was a refusal).
func endLease(t *testing.T, st store.Store, lease, key string, ans store.Answer) {
	t.Helper()
	rs := store.ReleaseScope{Key: key, QuotaFloor: -1}
	if ans.Admitted {
		rs.Ticket = ans.Tickets[0]
	}
	if _, err := st.Release(context.Background(), &store.Release{Lease: lease, Scopes: []store.ReleaseScope{rs}}); err != nil {
		t.Fatalf("Release %s: %v", lease, err)
	}
}

// testTurnOrder checks the rule on the store directly: a waiter refused
// first keeps its turn when a slot frees, against a later waiter and a
// caller that does not wait; its admission is announced to the watchers;
// a waiter that gives up (a Release of its lease) hands the turn on.
func testTurnOrder(t *testing.T, p *pair) {
	st := p.store
	const key = "turn.test"
	var mu sync.Mutex
	var heard []string
	stop := st.Watch(func(k string) {
		mu.Lock()
		heard = append(heard, k)
		mu.Unlock()
	})
	defer stop()
	announced := func() {
		mu.Lock()
		heard = nil
		mu.Unlock()
	}
	holder := admitOnce(t, st, admitReq("holder", key, true, time.Time{}))
	wantAdmitted(t, holder, "holder")
	first, second := twoWaiters(t, p, key, "first", "second")

	endLease(t, st, "holder", key, holder)
	// The slot is free: the later waiter and a caller that does not wait
	// are refused, the first is admitted.
	wantRefused(t, admitOnce(t, st, admitReq("second", key, true, second.Now)), "second", store.ReasonQueue)
	wantRefused(t, admitOnce(t, st, admitReq("newcomer", key, false, time.Time{})), "newcomer", store.ReasonQueue)
	announced()
	firstIn := admitOnce(t, st, admitReq("first", key, true, first.Now))
	wantAdmitted(t, firstIn, "first")
	waitFor(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(heard) > 0
	}, "the admission of the waiter whose turn it was to be announced to the watchers")
	wantRefused(t, admitOnce(t, st, admitReq("second", key, true, second.Now)), "second", store.ReasonConcurrency)
	endLease(t, st, "first", key, firstIn)
	wantRefused(t, admitOnce(t, st, admitReq("newcomer", key, false, time.Time{})), "newcomer", store.ReasonQueue)
	secondIn := admitOnce(t, st, admitReq("second", key, true, second.Now))
	wantAdmitted(t, secondIn, "second")

	// A waiter that gives up hands its turn to the next.
	third, fourth := twoWaiters(t, p, key, "third", "fourth")
	endLease(t, st, "third", key, third) // gives up: it held no slot
	endLease(t, st, "second", key, secondIn)
	fourthIn := admitOnce(t, st, admitReq("fourth", key, true, fourth.Now))
	wantAdmitted(t, fourthIn, "fourth")
	endLease(t, st, "fourth", key, fourthIn)
}

// twoWaiters has the waiters a, then b 1 ms later, refused for
// concurrency in key, and returns the refusals.
func twoWaiters(t *testing.T, p *pair, key, a, b string) (store.Answer, store.Answer) {
	t.Helper()
	first := admitOnce(t, p.store, admitReq(a, key, true, time.Time{}))
	wantRefused(t, first, a, store.ReasonConcurrency)
	p.clock.Advance(time.Millisecond)
	second := admitOnce(t, p.store, admitReq(b, key, true, time.Time{}))
	wantRefused(t, second, b, store.ReasonConcurrency)
	return first, second
}

// testTurnGrace: a turn given by a refusal that named a time ends
// store.TurnGrace after it; a waiter that comes back later loses that
// start to a newcomer, and keeps its place for the next.
func testTurnGrace(t *testing.T, p *pair) {
	st := p.store
	const key = "grace.test"
	delayed := func(lease string, waits bool, since time.Time) *store.Request {
		r := admitReq(lease, key, waits, since)
		r.Scopes[0].Delay, r.Scopes[0].Concurrency = time.Second, 4
		return r
	}
	t0 := p.clock.Now()
	a := admitOnce(t, st, delayed("start", false, time.Time{}))
	wantAdmitted(t, a, "start")
	late := admitOnce(t, st, delayed("late", true, time.Time{}))
	wantRefused(t, late, "late", store.ReasonDelay)
	if !late.At.Equal(t0.Add(time.Second)) {
		t.Fatalf("refused until %v, want %v", late.At, t0.Add(time.Second))
	}
	p.clock.Advance(time.Second + store.TurnGrace - time.Millisecond)
	q := admitOnce(t, st, delayed("newcomer", false, time.Time{}))
	wantRefused(t, q, "newcomer", store.ReasonQueue)
	if want := t0.Add(time.Second + store.TurnGrace); !q.At.Equal(want) {
		t.Fatalf("a queued caller is told to ask again at %v, want the turn's end %v", q.At, want)
	}
	p.clock.Advance(time.Millisecond)
	wantAdmitted(t, admitOnce(t, st, delayed("newcomer", false, time.Time{})), "newcomer")
	// The late waiter keeps its place: it came before a waiter that
	// asks first now.
	wantRefused(t, admitOnce(t, st, delayed("other", true, time.Time{})), "other", store.ReasonDelay)
	wantRefused(t, admitOnce(t, st, delayed("late", true, late.Now)), "late", store.ReasonDelay)
	p.clock.Advance(time.Second)
	wantRefused(t, admitOnce(t, st, delayed("other", true, p.clock.Now().Add(-time.Second))), "other", store.ReasonQueue)
	wantAdmitted(t, admitOnce(t, st, delayed("late", true, late.Now)), "late")
}

// lastAnswers records, for each lease, the store's last answer to it; it
// passes no announcement on to watchers.
type lastAnswers struct {
	store.Store
	mu   sync.Mutex
	last map[string]store.Answer
}

func (l *lastAnswers) Watch(func(string)) func() { return func() {} }

func (l *lastAnswers) Admit(ctx context.Context, req *store.Request) (store.Answer, error) {
	ans, err := l.Store.Admit(ctx, req)
	if err == nil {
		l.mu.Lock()
		l.last[req.Lease] = ans
		l.mu.Unlock()
	}
	return ans, err
}

// asleep reports whether waiting leases were last refused until one of
// times, and as many of the clock's timers are armed for each: every
// waiter sleeps until the time it was told (the clock must not move
// before: a waiter measures its wait from its clock's time after the
// answer).
func (l *lastAnswers) asleep(c *sleepers, waiting int, times ...time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	count := make([]int, len(times))
	n := 0
	for _, a := range l.last {
		if a.Admitted {
			continue
		}
		i := slices.IndexFunc(times, a.At.Equal)
		if i < 0 {
			return false
		}
		count[i]++
		n++
	}
	if n != waiting {
		return false
	}
	for i, at := range times {
		if c.asleepUntil(at) != count[i] {
			return false
		}
	}
	return true
}

// testTurnsAcrossWorkers: six callers wait for one scope (Delay 3 s, the
// slots never bind), arriving 1 ms apart, alternately in the two workers;
// every 3 seconds one starts, and they start in the order they came. The
// store's announcements are not passed on, so the waiters wake only at
// the times they were told and the test knows when each sleeps: a caller
// held back by the turn asks again at the turn's end.
func testTurnsAcrossWorkers(t *testing.T, p *pair) {
	const n, delay = 6, 3 * time.Second
	rec := &lastAnswers{Store: p.store, last: map[string]store.Answer{}}
	p.store = rec
	clock := &sleepers{Clock: p.clock, due: map[*sleeper]time.Time{}}
	p.workerClock = clock
	w1, w2 := p.workers(config(func(sc *throttle.ScopeConfig) { sc.Delay, sc.Concurrency = delay, 2*n }))
	ws := []*throttle.ThrottlingManager{w1, w2}
	r := req(t, "fifo.test")
	last := mustTry(t, w1, r)
	last.Release(ok200, nil)
	starts := make(chan *throttle.Permit, n)
	order := make(chan int, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range n {
		p.clock.Advance(time.Millisecond)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang detector
			defer cancel()
			pm, err := ws[i%2].Acquire(ctx, r.Clone(ctx))
			if err != nil {
				errs <- err
				return
			}
			order <- i
			starts <- pm
			pm.Release(ok200, nil)
		})
		waitFor(t, func() bool { return w1.Waiting()+w2.Waiting() == i+1 }, "caller %d to wait", i)
	}
	var got []int
	next := last.Acquired().Add(delay)
	for k := range n {
		// Every waiter was refused until the delay's end, and sleeps
		// until then.
		waitFor(t, func() bool { return rec.asleep(clock, n-k, next) }, "the waiters to sleep before start %d", k)
		p.clock.Set(next)
		select {
		case i := <-order:
			got = append(got, i)
			last = <-starts
		case err := <-errs:
			t.Fatal(err)
		case <-time.After(10 * time.Second):
			t.Fatalf("no start %d at the delay's end (hang detector)", k)
		}
		// Those that asked before the turn's waiter sleep until the
		// turn's end, the others until the next delay's.
		turnEnd := next.Add(store.TurnGrace)
		next = last.Acquired().Add(delay)
		waitFor(t, func() bool { return rec.asleep(clock, n-k-1, turnEnd, next) }, "the waiters to sleep after start %d", k)
		p.clock.Set(turnEnd)
	}
	for k, i := range got {
		if i != k {
			t.Fatalf("callers started in the order %v, want the order they came in", got)
		}
	}
}

// waitFor returns once cond holds, failing after 10 s of real time (a
// hang detector: the goroutines it waits for need no clock movement).
func waitFor(t *testing.T, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for "+what, args...)
		}
		time.Sleep(time.Millisecond)
	}
}

// sleepers is the workers' Clock in testTurnsAcrossWorkers: it tells how
// many of their timers are armed for a time after now, so the test moves
// the clock only once every waiter sleeps until its time.
type sleepers struct {
	*throttletest.Clock
	mu  sync.Mutex
	due map[*sleeper]time.Time
}

type sleeper struct {
	throttle.Timer
	c *sleepers
}

// NewTimer implements throttle.Clock.
func (c *sleepers) NewTimer(d time.Duration) throttle.Timer {
	t := &sleeper{c: c}
	c.set(t, d)
	t.Timer = c.Clock.NewTimer(d)
	return t
}

func (c *sleepers) set(t *sleeper, d time.Duration) {
	c.mu.Lock()
	c.due[t] = c.Now().Add(d)
	c.mu.Unlock()
}

// asleepUntil counts the timers armed for at.
func (c *sleepers) asleepUntil(at time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, due := range c.due {
		if due.Equal(at) {
			n++
		}
	}
	return n
}

func (t *sleeper) Reset(d time.Duration) bool {
	t.c.set(t, d)
	return t.Timer.Reset(d)
}

func (t *sleeper) Stop() bool {
	t.c.mu.Lock()
	delete(t.c.due, t)
	t.c.mu.Unlock()
	return t.Timer.Stop()
}
