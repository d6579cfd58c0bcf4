package throttle

import "time"

// admission is one scope's admission state and the rules that admit a
// start: a free slot among the first Concurrency (with SlotDelay, one
// whose previous start is SlotDelay old), the gap since the previous start,
// the server gate, and room in the quota window. It is the one Go
// implementation of those rules: the default scope keeps one per scope,
// and so does MemoryStore for the managers that share it. redisstore's
// admit.lua is the only other, held to this one by package storetest.
//
// Its callers hand it their limits at each call (what the scope's policies
// make of them is theirs), so the same state serves a scope whose limits
// change between calls. The zero value is an empty scope.
type admission struct {
	slots     []slot    // only with SlotDelay; grows to the peak in use
	lastStart time.Time // the previous start
	gate      time.Time // no start before this (a server-given wait)
	quota     quotaWindow
	inFlight  int32
	started   bool // a request has started (shares inFlight's word)
}

// slot is one of a scope's Concurrency places, tracked for SlotDelay.
type slot struct {
	busy bool
	last time.Time // previous start in this slot
}

// limits are the limits a scope's policies set, which admission checks
// starts against: the concurrency, and the gap the delay asks between
// starts (the delay times the jitter drawn at the previous start) with the
// rule that set that delay. The configured SlotDelay and quota come with
// each call. The default scope keeps its limits current as its policies
// move them, so an admission reads them rather than combining the parts
// (16 bytes: a scope's size stays in its allocation class).
type limits struct {
	gap    time.Duration
	conc   int32
	gapWhy Reason
}

// check returns when a start of cost may come and the rule that holds it
// back: ReasonNone when it may come now; ReasonConcurrency, with no time,
// when every slot is taken (a release frees one); else the latest of the
// gap since the previous start, the slot delay, the gate and the quota
// window's end, and its rule.
func (a *admission) check(now time.Time, l *limits, slotDelay time.Duration, quota int64, window time.Duration, cost int64) (time.Time, Reason) {
	if a.inFlight >= l.conc {
		return time.Time{}, ReasonConcurrency
	}
	at, why := now, ReasonNone
	if a.started {
		next := a.lastStart
		if l.gap != 0 {
			next = next.Add(l.gap) // Add(0) changes nothing but costs ~70 instructions
		}
		if next.After(at) {
			at, why = next, l.gapWhy
		}
	}
	if slotDelay > 0 {
		if _, free := a.freeSlot(now, l.conc, slotDelay); free.After(at) {
			at, why = free, ReasonSlotDelay
		}
	}
	if !a.gate.IsZero() && a.gate.After(at) { // no server-given wait yet: spare the comparison
		at, why = a.gate, ReasonGate
	}
	if quota > 0 {
		if end, ok := a.quota.admit(now, quota, window, cost); !ok && end.After(at) {
			at, why = end, ReasonQuota
		}
	}
	return at, why
}

// freeSlot returns the free slot that can start soonest and when: a used
// slot whose SlotDelay has passed, else a slot never used (-1), which can
// start at once, else the used slot that frees first. Only the first conc
// slots count: when the concurrency drops (SetConfig, backoff, rampup),
// the slots above it are not used again, so their SlotDelay does not pace
// the scope as if it still had them.
func (a *admission) freeSlot(now time.Time, conc int32, slotDelay time.Duration) (int, time.Time) {
	best, bestAt := -1, time.Time{}
	for i := range min(len(a.slots), int(conc)) {
		if sl := &a.slots[i]; !sl.busy {
			if at := sl.last.Add(slotDelay); best < 0 || at.Before(bestAt) {
				best, bestAt = i, at
			}
		}
	}
	if (best < 0 || bestAt.After(now)) && len(a.slots) < int(conc) {
		return -1, now
	}
	return best, bestAt
}

// start records a start of cost at now, which check admitted, and
// returns the slot it took (-1 without SlotDelay) and the quota window it
// was counted in.
func (a *admission) start(now time.Time, conc int32, slotDelay time.Duration, quota int64, w time.Duration, cost int64) (slotIndex int, window int64) {
	a.inFlight++
	slotIndex = -1
	if slotDelay > 0 {
		i, _ := a.freeSlot(now, conc, slotDelay)
		if i < 0 {
			a.slots = append(a.slots, slot{})
			i = len(a.slots) - 1
		}
		a.slots[i] = slot{busy: true, last: now}
		slotIndex = i
	}
	a.started, a.lastStart = true, now
	if quota > 0 {
		window = a.quota.add(now, w, cost)
	}
	return slotIndex, window
}

// startUncounted records a start of cost at now, which check admitted,
// that is no start for the gap or the slot delay: it takes a slot and
// counts in the quota window, and leaves the previous start and the
// slot's as they were. The manager's robots.txt fetch starts so, and its
// caller records the rest (defaultScope.startRobots). It returns what
// start returns.
func (a *admission) startUncounted(now time.Time, conc int32, slotDelay time.Duration, quota int64, w time.Duration, cost int64) (slotIndex int, window int64) {
	a.inFlight++
	slotIndex = -1
	if slotDelay > 0 {
		i, _ := a.freeSlot(now, conc, slotDelay)
		if i < 0 {
			a.slots = append(a.slots, slot{})
			i = len(a.slots) - 1
		}
		a.slots[i].busy = true
		slotIndex = i
	}
	if quota > 0 {
		window = a.quota.add(now, w, cost)
	}
	return slotIndex, window
}

// finish ends a start that took slotIndex.
func (a *admission) finish(slotIndex int) {
	if a.inFlight > 0 {
		a.inFlight--
	}
	if slotIndex >= 0 && slotIndex < len(a.slots) {
		a.slots[slotIndex].busy = false
	}
}

// setGate holds every start until t, unless a later gate is set.
func (a *admission) setGate(t time.Time) {
	if t.After(a.gate) {
		a.gate = t
	}
}

// quotaWindow counts the cost admitted in the current quota window. The
// first window starts at the scope's first start; later ones follow it back
// to back, window long each, so boundaries are exact whatever the clock's
// origin.
type quotaWindow struct {
	set   bool
	start time.Time
	seq   int64 // which window; tickets carry it so stale corrections are dropped
	used  int64
}

func (q *quotaWindow) roll(now time.Time, w time.Duration) {
	if el := now.Sub(q.start); q.set && el >= w {
		n := el / w
		q.start = q.start.Add(n * w)
		q.seq += int64(n)
		q.used = 0
	}
}

// admit reports whether cost fits the window at now, or when it ends. A
// request larger than the whole quota is admitted into an empty window, so
// it is never starved.
func (q *quotaWindow) admit(now time.Time, quota int64, w time.Duration, cost int64) (time.Time, bool) {
	q.roll(now, w)
	if !q.set || q.used <= 0 || q.used+cost <= quota {
		return time.Time{}, true
	}
	return q.start.Add(w), false
}

// add counts cost at a start and returns the window it was counted in.
func (q *quotaWindow) add(now time.Time, w time.Duration, cost int64) int64 {
	if !q.set {
		q.set, q.start = true, now
	}
	q.roll(now, w)
	q.used += cost
	return q.seq
}

// correct applies a correction arriving at now (it counts in the window
// it arrives in): delta, an actual cost minus the admitted one, if the
// start's window (ticketWindow) is still the current one; and floor, the
// count the server's remaining quota implies, when >= 0.
func (q *quotaWindow) correct(now time.Time, w time.Duration, ticketWindow, delta, floor int64) {
	q.roll(now, w)
	if delta != 0 && ticketWindow == q.seq {
		q.used = max(0, q.used+delta)
	}
	if floor >= 0 {
		q.used = max(q.used, floor)
	}
}

// pending reports whether the window still counts something at now.
func (q *quotaWindow) pending(now time.Time, w time.Duration) bool {
	return q.set && q.used > 0 && now.Before(q.start.Add(w))
}

// quotaCorrection sums the quota corrections fb makes to the scope key
// for a start t, under a quota of quota: delta, the actual costs minus the
// admitted one; floor, the count the server's remaining quota implies (-1:
// none).
func quotaCorrection(key string, quota int64, t *Ticket, fb *Feedback) (delta, floor int64) {
	floor = -1
	for _, u := range fb.Quota {
		if u.Scope != "" && u.Scope != key {
			continue
		}
		if u.HasCost && u.Cost >= 0 {
			delta += u.Cost - t.Cost
		}
		if u.HasRemaining && u.Remaining >= 0 && u.Remaining <= quota {
			floor = max(floor, quota-u.Remaining)
		}
	}
	return delta, floor
}
