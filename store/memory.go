package store

import (
	"context"
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
// an hour are forgotten.
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
	leases map[string]int // lease -> slot
	adm    admission.State
	jitter float64 // factor drawn at the previous start
	// learned state
	version int64
	data    []byte
	hasEff  bool
	delay   time.Duration
	conc    int
	touched time.Time
}

// memIdle is how long a Memory keeps an unused scope.
const memIdle = time.Hour

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
	defer ms.mu.Unlock()
	now := ms.clock.Now()
	if !now.Before(ms.sweepAt) {
		ms.sweep(now)
	}
	ans := Answer{Now: now, Scope: -1, Learned: make([]Learned, len(req.Scopes))}
	states := make([]*memScope, len(req.Scopes))
	blocked := false
	for i := range req.Scopes {
		sc := &req.Scopes[i]
		st := ms.scopes[sc.Key]
		if st == nil {
			st = &memScope{leases: make(map[string]int)}
			ms.scopes[sc.Key] = st
		}
		st.touched = now
		states[i] = st
		if st.version > sc.Version {
			ans.Learned[i] = Learned{Version: st.version, Data: st.data}
		}
		if blocked {
			continue
		}
		at, why := st.admit(now, sc)
		switch {
		case why == ReasonNone:
		case at.IsZero():
			blocked, ans.Reason, ans.Scope, ans.At = true, why, i, time.Time{}
		case at.After(ans.At):
			ans.At, ans.Reason, ans.Scope = at, why, i
		}
	}
	if ans.Reason != ReasonNone {
		return ans, nil
	}
	ans.Admitted, ans.At = true, time.Time{}
	ans.Tickets = make([]Ticket, len(req.Scopes))
	for i, st := range states {
		ans.Tickets[i] = st.start(now, req.Lease, &req.Scopes[i])
	}
	return ans, nil
}

// effective returns the scope's concurrency and delay: the shared values
// stored with the learned state, else the request's.
func (st *memScope) effective(sc *Scope) (int, time.Duration) {
	if st.hasEff {
		return st.conc, st.delay
	}
	return sc.Concurrency, sc.Delay
}

// limits are the admission limits of sc: the shared concurrency and delay
// (the latter scaled by the jitter factor drawn at the previous start).
func (st *memScope) limits(sc *Scope) admission.Limits {
	conc, delay := st.effective(sc)
	return admission.Limits{Conc: int32(min(conc, math.MaxInt32)), Gap: admission.ScaleDuration(delay, st.jitter), GapWhy: admission.Delay}
}

// admit is one scope's check (admission.State.Check).
func (st *memScope) admit(now time.Time, sc *Scope) (time.Time, Reason) {
	l := st.limits(sc)
	at, why := st.adm.Check(now, &l, sc.SlotDelay, sc.Quota, sc.Window, sc.Cost)
	return at, reasons[why]
}

// reasons are the admission rules' reasons as a Store answers them.
var reasons = [...]Reason{admission.None: ReasonNone, admission.Concurrency: ReasonConcurrency,
	admission.Delay: ReasonDelay, admission.SlotDelay: ReasonSlotDelay, admission.Gate: ReasonGate,
	admission.Quota: ReasonQuota}

// start records an admitted start under lease.
func (st *memScope) start(now time.Time, lease string, sc *Scope) Ticket {
	l := st.limits(sc)
	var t Ticket
	t.Slot, t.Window = st.adm.Start(now, l.Conc, sc.SlotDelay, sc.Quota, sc.Window, sc.Cost)
	st.leases[lease] = t.Slot
	st.jitter = sc.Jitter
	return t
}

// Release implements Store.
func (ms *Memory) Release(ctx context.Context, rel *Release) (ReleaseAnswer, error) {
	var ans ReleaseAnswer
	var ended []string
	ms.mu.Lock()
	now := ms.clock.Now()
	for i := range rel.Scopes {
		rs := &rel.Scopes[i]
		st := ms.scopes[rs.Key]
		if st == nil {
			st = &memScope{leases: make(map[string]int)}
			ms.scopes[rs.Key] = st
		}
		st.touched = now
		if rel.Lease != "" {
			if i, ok := st.leases[rel.Lease]; ok {
				delete(st.leases, rel.Lease)
				st.adm.Finish(i)
				ended = append(ended, rs.Key)
			}
		}
		st.adm.SetGate(rs.Gate)
		if st.adm.Quota.Set && rs.QuotaWindow > 0 && (rs.QuotaDelta != 0 || rs.QuotaFloor >= 0) {
			st.adm.Quota.Correct(now, rs.QuotaWindow, rs.Ticket.Window, rs.QuotaDelta, rs.QuotaFloor)
		}
		if rs.Learned {
			// A store that lost its record (version 0) takes the
			// caller's, so workers restore what a restarted store lost.
			if st.version != 0 && st.version != rs.Version {
				ans.Conflicts = append(ans.Conflicts, Conflict{Scope: i, Learned: Learned{Version: st.version, Data: st.data}})
				continue
			}
			st.version = max(st.version, rs.Version) + 1
			st.data = slices.Clone(rs.Data)
			st.hasEff, st.delay, st.conc = true, rs.Delay, rs.Concurrency
		}
	}
	watchers := make([]func(string), 0, len(ms.watchers))
	if len(ended) > 0 {
		for _, fn := range ms.watchers {
			watchers = append(watchers, fn)
		}
	}
	ms.mu.Unlock()
	for _, key := range ended {
		for _, fn := range watchers {
			fn(key)
		}
	}
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
		if len(st.leases) == 0 && now.Sub(st.touched) >= memIdle && !now.Before(st.adm.Gate) {
			delete(ms.scopes, k)
		}
	}
}
