package store

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
)

// Memory is a Store in this process's memory, for managers of one process
// that must share their limits (one per simulated worker in the simulator,
// tests). It admits with the rules of throttle's default scope (the same
// code), which the redisstore scripts follow.
//
// Its leases never expire: the managers that hold them live in the same
// process. Scopes with no lease, nothing pending and nothing learned for
// an hour are forgotten. It serves waiters first come, first served (see
// Turns), and applies what it holds within each request's bounds (see
// Scope.MaxWait): a manager configured otherwise, or a clock that moved
// back, holds no scope longer than that.
//
// A Memory is safe for concurrent use by multiple goroutines and managers.
// The zero value is not usable (its methods panic): make one with
// NewMemory.
type Memory struct {
	clock Clock

	mu       sync.Mutex
	scopes   map[string]*memScope
	sweepAt  time.Time
	watchers map[int]func(string)
	nextID   int
}

// A Clock tells a Memory the time. throttle.Clock satisfies it, and so
// does the fake clock of package throttletest, so managers and their
// store can share one. A Clock must be safe for concurrent use.
type Clock interface {
	// Now returns the current time. It should never go back.
	Now() time.Time
}

// memScope is one scope's state in a Memory, as redisstore keeps it
// in a hash.
type memScope struct {
	leases map[string]memLease
	// expiring counts the leases with an expiry (none but the ones
	// tests plant), so an admission looks at the leases only then.
	expiring int
	adm      admission.State
	jitter   float64 // factor drawn at the previous start
	turn     memTurn
	// queued: a request was refused for the turn's waiter since the
	// turn began; its admission is announced to the watchers.
	queued bool
	// learned state
	version int64
	data    []byte
	hasEff  bool
	delay   time.Duration
	conc    int
	touched time.Time
}

// memLease is a lease: its slot, and its expiry (zero: until released,
// as every lease of a Memory's managers).
type memLease struct {
	slot  int
	until time.Time
}

// memTurn is the turn of the waiter that came first among those the
// scope held back (see Turns). The zero value is no turn.
type memTurn struct {
	lease string
	since time.Time // when the waiter was first refused
	until time.Time // the turn's end; zero: until the waiter asks again
}

// live reports whether the turn holds others back at now.
func (t *memTurn) live(now time.Time) bool {
	return t.lease != "" && (t.until.IsZero() || now.Before(t.until))
}

// before reports whether a waiter first refused at since, with lease,
// came before the turn's.
func (t *memTurn) before(since time.Time, lease string) bool {
	return since.Before(t.since) || since.Equal(t.since) && lease < t.lease
}

// memIdle is how long a Memory keeps an unused scope.
const memIdle = time.Hour

// memLeaseTTL bounds a lease that carries an expiry (a planted one): as
// redisstore's LeaseTTL default.
const memLeaseTTL = 30 * time.Second

// NewMemory returns an empty Memory on clock (nil: the real clock).
// Managers sharing it should share the clock too.
func NewMemory(clock Clock) *Memory {
	if clock == nil {
		clock = realClock{}
	}
	return &Memory{clock: clock, scopes: make(map[string]*memScope), watchers: make(map[int]func(string))}
}

// realClock is the Clock of NewMemory(nil).
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Admit implements Store.
func (ms *Memory) Admit(ctx context.Context, req *Request) (Answer, error) {
	if err := ctx.Err(); err != nil {
		return Answer{}, err
	}
	ms.mu.Lock()
	now := ms.clock.Now()
	if !now.Before(ms.sweepAt) {
		ms.sweep(now)
	}
	ans := Answer{Now: now, Scope: -1, Learned: make([]Learned, len(req.Scopes))}
	states := make([]*memScope, len(req.Scopes))
	blocked := false
	for i := range req.Scopes {
		sc := &req.Scopes[i]
		st := ms.scope(sc.Key, now)
		states[i] = st
		if st.version > sc.Version {
			ans.Learned[i] = Learned{Version: st.version, Data: st.data}
		}
		if blocked {
			continue
		}
		at, why := st.admit(now, sc, req.Lease)
		switch {
		case why == ReasonNone:
		case why == ReasonConcurrency || why == ReasonQueue:
			blocked, ans.Reason, ans.Scope, ans.At = true, why, i, at
		case at.After(ans.At):
			ans.At, ans.Reason, ans.Scope = at, why, i
		}
	}
	var announce []string
	if ans.Reason != ReasonNone {
		st := states[ans.Scope]
		st.queued = st.queued || ans.Reason == ReasonQueue
		if req.Waits {
			st.wait(now, req, ans.At)
		}
	} else {
		ans.Admitted, ans.At = true, time.Time{}
		ans.Tickets = make([]Ticket, len(req.Scopes))
		for i, st := range states {
			ans.Tickets[i] = st.start(now, req.Lease, &req.Scopes[i])
			if st.endTurn(req.Lease) {
				announce = append(announce, req.Scopes[i].Key)
			}
		}
	}
	watchers := ms.watching(announce)
	ms.mu.Unlock()
	notify(watchers, announce)
	return ans, nil
}

// scope returns key's state, made if new, touched at now. ms.mu is held.
func (ms *Memory) scope(key string, now time.Time) *memScope {
	st := ms.scopes[key]
	if st == nil {
		st = &memScope{leases: make(map[string]memLease)}
		ms.scopes[key] = st
	}
	st.touched = now
	return st
}

// watching returns the watchers to call, outside ms.mu, for keys.
func (ms *Memory) watching(keys []string) []func(string) {
	if len(keys) == 0 {
		return nil
	}
	fns := make([]func(string), 0, len(ms.watchers))
	for _, fn := range ms.watchers {
		fns = append(fns, fn)
	}
	return fns
}

func notify(fns []func(string), keys []string) {
	for _, key := range keys {
		for _, fn := range fns {
			fn(key)
		}
	}
}

// effective returns the scope's concurrency and delay: the shared values
// stored with the learned state, else the request's; within the
// request's bounds.
func (st *memScope) effective(sc *Scope) (int, time.Duration) {
	conc, delay := sc.Concurrency, sc.Delay
	if st.hasEff && st.conc >= 1 { // (a value no policy sets reads as none)
		conc = st.conc
	}
	if st.hasEff && st.delay >= 0 {
		delay = st.delay
	}
	if sc.MaxConcurrency > 0 {
		conc = min(conc, sc.MaxConcurrency)
	}
	return max(conc, 1), min(max(delay, 0), sc.WaitBound())
}

// limits are the admission limits of sc: the shared concurrency and delay
// (the latter scaled by the jitter factor drawn at the previous start,
// within sc's bounds).
func (st *memScope) limits(sc *Scope) admission.Limits {
	conc, delay := st.effective(sc)
	gap := min(admission.ScaleDuration(delay, st.jitter), sc.WaitBound())
	return admission.Limits{Conc: int32(min(conc, math.MaxInt32)), Gap: gap, SlotDelay: sc.SlotDelay, GapWhy: admission.Delay}
}

// admit is one scope's check (admission.State.Check), after the state is
// brought within sc's bounds, then the turn: a waiter that came first
// goes first. lease is the request's.
func (st *memScope) admit(now time.Time, sc *Scope, lease string) (time.Time, Reason) {
	st.bound(now, sc)
	l := st.limits(sc)
	at, why := st.adm.Check(now, &l, sc.Quota, sc.Window, sc.Cost)
	if why == admission.Quota && at.After(now.Add(sc.Window)) {
		// A window that ends later than one from now began after now.
		st.adm.Quota = admission.Window{}
		at, why = st.adm.Check(now, &l, sc.Quota, sc.Window, sc.Cost)
	}
	if why == admission.None && st.turn.live(now) && st.turn.lease != lease {
		return st.turn.until, ReasonQueue
	}
	return at, why
}

// bound brings the state within sc's bounds at now: expired leases are
// ended, a lease's expiry cut to memLeaseTTL from now, times after now
// moved to now and a gate cut to maxWait from now. What it cuts stays
// cut: the scope is held that long at most from the first admission that
// finds it.
func (st *memScope) bound(now time.Time, sc *Scope) {
	if st.expiring > 0 {
		for lease, l := range st.leases {
			switch {
			case l.until.IsZero():
			case !now.Before(l.until):
				st.endLease(lease)
			case l.until.After(now.Add(memLeaseTTL)):
				l.until = now.Add(memLeaseTTL)
				st.leases[lease] = l
			}
		}
	}
	st.saneVersion()
	st.adm.NotAfter(now)
	b := sc.WaitBound()
	if limit := now.Add(b); st.adm.Gate.After(limit) {
		st.adm.Gate = limit
	}
	// A turn lasts TurnGrace past the time a refusal named: the lease
	// bound, the wait bound or the quota window at most.
	if limit := now.Add(max(b, memLeaseTTL, sc.Window) + TurnGrace); st.turn.until.After(limit) {
		st.turn.until = limit
		st.turn.since = minTime(st.turn.since, now)
	}
}

// saneVersion forgets a learned-state version no store gives.
func (st *memScope) saneVersion() {
	if st.version < 0 || st.version > MaxVersion {
		st.version, st.data = 0, nil
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// start records an admitted start under lease.
func (st *memScope) start(now time.Time, lease string, sc *Scope) Ticket {
	l := st.limits(sc)
	var t Ticket
	t.Slot, t.WindowIndex = st.adm.Start(now, &l, sc.Quota, sc.Window, sc.Cost)
	st.leases[lease] = memLease{slot: t.Slot}
	st.jitter = sc.Jitter
	return t
}

// endLease ends a lease the scope holds.
func (st *memScope) endLease(lease string) {
	l := st.leases[lease]
	delete(st.leases, lease)
	if !l.until.IsZero() {
		st.expiring--
	}
	st.adm.Finish(l.slot)
}

// wait records a refusal of req, whose caller waits, by this scope at
// now: the turn goes to req's caller if it came before the turn's, or if
// the turn has ended. wake is the time the refusal named (zero: a
// release).
func (st *memScope) wait(now time.Time, req *Request, wake time.Time) {
	since := req.Since
	if since.IsZero() {
		since = now
	}
	if st.turn.lease == req.Lease || !st.turn.live(now) || st.turn.before(since, req.Lease) {
		st.turn = memTurn{lease: req.Lease, since: since}
		if !wake.IsZero() {
			st.turn.until = wake.Add(TurnGrace)
		}
	}
}

// endTurn ends lease's turn, if it holds the scope's, and reports
// whether waiters held back by it are to be told.
func (st *memScope) endTurn(lease string) bool {
	if st.turn.lease != lease || lease == "" {
		return false
	}
	st.turn = memTurn{}
	queued := st.queued
	st.queued = false
	return queued
}

// Release implements Store.
func (ms *Memory) Release(ctx context.Context, rel *Release) (ReleaseAnswer, error) {
	for i := range rel.Scopes {
		if rs := &rel.Scopes[i]; rs.Learned && (rs.Version < 0 || rs.Version > MaxVersion) {
			return ReleaseAnswer{}, fmt.Errorf("store: release: scope %q: version %d outside [0, %d]", rs.Key, rs.Version, int64(MaxVersion))
		}
	}
	var ans ReleaseAnswer
	var ended []string
	ms.mu.Lock()
	now := ms.clock.Now()
	for i := range rel.Scopes {
		rs := &rel.Scopes[i]
		st := ms.scope(rs.Key, now)
		if rel.Lease != "" {
			if _, ok := st.leases[rel.Lease]; ok {
				st.endLease(rel.Lease)
				ended = append(ended, rs.Key)
			} else if st.endTurn(rel.Lease) {
				ended = append(ended, rs.Key) // a waiter gave up its turn
			}
		}
		st.adm.SetGate(rs.Gate)
		if st.adm.Quota.Set && rs.QuotaWindow > 0 && (rs.QuotaDelta != 0 || rs.QuotaFloor >= 0) {
			st.adm.Quota.Correct(now, rs.QuotaWindow, rs.Ticket.WindowIndex, rs.QuotaDelta, rs.QuotaFloor)
		}
		if rs.Learned {
			st.saneVersion()
			// A store that lost its record (version 0) takes the
			// caller's, so workers restore what a restarted store lost.
			if st.version != 0 && st.version != rs.Version {
				ans.Conflicts = append(ans.Conflicts, Conflict{Scope: i, Learned: Learned{Version: st.version, Data: st.data}})
				continue
			}
			st.version = min(max(st.version, rs.Version)+1, MaxVersion)
			st.data = slices.Clone(rs.Data)
			st.hasEff, st.delay, st.conc = true, rs.Delay, rs.Concurrency
		}
	}
	watchers := ms.watching(ended)
	ms.mu.Unlock()
	notify(watchers, ended)
	return ans, ctx.Err()
}

// Watch implements Store.
func (ms *Memory) Watch(fn func(key string)) (stop func()) {
	ms.mu.Lock()
	id := ms.nextID
	ms.nextID++
	ms.watchers[id] = fn
	ms.mu.Unlock()
	return func() {
		ms.mu.Lock()
		delete(ms.watchers, id)
		ms.mu.Unlock()
	}
}

// sweep forgets scopes with no lease that have not been used for
// memIdle and have nothing pending.
func (ms *Memory) sweep(now time.Time) {
	ms.sweepAt = now.Add(time.Minute)
	for k, st := range ms.scopes {
		if len(st.leases) == 0 && now.Sub(st.touched) >= memIdle && !now.Before(st.adm.Gate) && !st.turn.live(now) {
			delete(ms.scopes, k)
		}
	}
}
