package throttle

import (
	"context"
	"slices"
	"sync"
	"time"
)

// MemoryStore is a Store in this process's memory, for managers of one
// process that must share their limits (one per simulated worker in the
// simulator, tests), and the reference the redisstore scripts follow: the
// same checks in the same order.
//
// Its leases never expire: the managers that hold them live in the same
// process. Scopes with no lease, nothing pending and nothing learned for
// an hour are forgotten.
type MemoryStore struct {
	clock Clock

	mu       sync.Mutex
	scopes   map[string]*memScope
	sweepAt  time.Time
	watchers map[int]func(string)
	nextID   int
}

// memScope is one scope's state in a MemoryStore, as redisstore keeps it
// in a hash and a sorted set.
type memScope struct {
	leases map[string]int // lease -> slot
	// admission state
	started bool
	last    time.Time // previous start
	jitter  float64   // factor drawn at that start
	slots   []time.Time
	gate    time.Time
	qSet    bool
	qStart  time.Time
	qSeq    int64
	qUsed   int64
	// learned state
	version int64
	data    []byte
	hasEff  bool
	delay   time.Duration
	conc    int
	touched time.Time
}

// memStoreIdle is how long a MemoryStore keeps an unused scope.
const memStoreIdle = time.Hour

// NewMemoryStore returns an empty MemoryStore on clock (nil: the real
// clock). Managers sharing it should share the clock too.
func NewMemoryStore(clock Clock) *MemoryStore {
	if clock == nil {
		clock = newRealClock()
	}
	return &MemoryStore{clock: clock, scopes: make(map[string]*memScope), watchers: make(map[int]func(string))}
}

// Admit implements Store.
func (ms *MemoryStore) Admit(ctx context.Context, req *StoreRequest) (StoreAnswer, error) {
	if err := ctx.Err(); err != nil {
		return StoreAnswer{}, err
	}
	ms.mu.Lock()
	defer ms.mu.Unlock()
	now := ms.clock.Now()
	if !now.Before(ms.sweepAt) {
		ms.sweep(now)
	}
	ans := StoreAnswer{Now: now, Scope: -1, Learned: make([]StoreLearned, len(req.Scopes))}
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
			ans.Learned[i] = StoreLearned{Version: st.version, Data: st.data}
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
	ans.Tickets = make([]StoreTicket, len(req.Scopes))
	for i, st := range states {
		ans.Tickets[i] = st.start(now, req.Lease, &req.Scopes[i])
	}
	return ans, nil
}

// effective returns the scope's concurrency and delay: the shared values
// stored with the learned state, else the request's.
func (st *memScope) effective(sc *StoreScope) (int, time.Duration) {
	if st.hasEff {
		return st.conc, st.delay
	}
	return sc.Concurrency, sc.Delay
}

// admit is one scope's check, in the order of redisstore's script:
// concurrency, delay, slot delay, gate, quota; the latest time wins.
func (st *memScope) admit(now time.Time, sc *StoreScope) (time.Time, Reason) {
	conc, delay := st.effective(sc)
	if len(st.leases) >= conc {
		return time.Time{}, ReasonConcurrency
	}
	at, why := now, ReasonNone
	later := func(t time.Time, r Reason) {
		if t.After(at) {
			at, why = t, r
		}
	}
	if st.started {
		later(st.last.Add(scaleDuration(delay, st.jitter)), ReasonDelay)
	}
	if sc.SlotDelay > 0 {
		_, free := st.freeSlot(now, conc, sc.SlotDelay)
		later(free, ReasonSlotDelay)
	}
	later(st.gate, ReasonGate)
	if sc.Quota > 0 {
		st.rollQuota(now, sc.Window)
		if st.qSet && st.qUsed > 0 && st.qUsed+sc.Cost > sc.Quota {
			later(st.qStart.Add(sc.Window), ReasonQuota)
		}
	}
	return at, why
}

// freeSlot is defaultScope.freeSlot over the slots the leases don't hold.
func (st *memScope) freeSlot(now time.Time, conc int, slotDelay time.Duration) (int, time.Time) {
	best, bestAt := -1, time.Time{}
	for i, last := range st.slots[:min(len(st.slots), conc)] { // as defaultScope: not the slots above a lowered concurrency
		if st.slotBusy(i) {
			continue
		}
		if at := last.Add(slotDelay); best < 0 || at.Before(bestAt) {
			best, bestAt = i, at
		}
	}
	if (best < 0 || bestAt.After(now)) && len(st.slots) < conc {
		return -1, now
	}
	return best, bestAt
}

func (st *memScope) slotBusy(i int) bool {
	for _, s := range st.leases {
		if s == i {
			return true
		}
	}
	return false
}

func (st *memScope) rollQuota(now time.Time, w time.Duration) {
	if el := now.Sub(st.qStart); st.qSet && el >= w {
		n := el / w
		st.qStart = st.qStart.Add(n * w)
		st.qSeq += int64(n)
		st.qUsed = 0
	}
}

func (st *memScope) start(now time.Time, lease string, sc *StoreScope) StoreTicket {
	t := StoreTicket{Slot: -1}
	if sc.SlotDelay > 0 {
		conc, _ := st.effective(sc)
		i, _ := st.freeSlot(now, conc, sc.SlotDelay)
		if i < 0 {
			st.slots = append(st.slots, time.Time{})
			i = len(st.slots) - 1
		}
		st.slots[i] = now
		t.Slot = i
	}
	st.leases[lease] = t.Slot
	st.started, st.last, st.jitter = true, now, sc.Jitter
	if sc.Quota > 0 {
		if !st.qSet {
			st.qSet, st.qStart = true, now
		}
		st.rollQuota(now, sc.Window)
		st.qUsed += sc.Cost
		t.Window = st.qSeq
	}
	return t
}

// Release implements Store.
func (ms *MemoryStore) Release(ctx context.Context, rel *StoreRelease) (StoreReleaseAnswer, error) {
	var ans StoreReleaseAnswer
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
			if _, ok := st.leases[rel.Lease]; ok {
				delete(st.leases, rel.Lease)
				ended = append(ended, rs.Key)
			}
		}
		if rs.Gate.After(st.gate) {
			st.gate = rs.Gate
		}
		if st.qSet && rs.QuotaWindow > 0 && (rs.QuotaDelta != 0 || rs.QuotaFloor >= 0) {
			// A correction counts in the window it arrives in; an
			// actual cost only in its own window.
			st.rollQuota(now, rs.QuotaWindow)
			if rs.QuotaDelta != 0 && rs.Ticket.Window == st.qSeq {
				st.qUsed = max(0, st.qUsed+rs.QuotaDelta)
			}
			if rs.QuotaFloor >= 0 {
				st.qUsed = max(st.qUsed, rs.QuotaFloor)
			}
		}
		if rs.Learned {
			// A store that lost its record (version 0) takes the
			// caller's, so workers restore what a restarted store lost.
			if st.version != 0 && st.version != rs.Version {
				ans.Conflicts = append(ans.Conflicts, StoreConflict{Scope: i, Learned: StoreLearned{Version: st.version, Data: st.data}})
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
func (ms *MemoryStore) Watch(fn func(key string)) (stop func()) {
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
// memStoreIdle and have nothing pending.
func (ms *MemoryStore) sweep(now time.Time) {
	ms.sweepAt = now.Add(time.Minute)
	for k, st := range ms.scopes {
		if len(st.leases) == 0 && now.Sub(st.touched) >= memStoreIdle && !now.Before(st.gate) {
			delete(ms.scopes, k)
		}
	}
}
