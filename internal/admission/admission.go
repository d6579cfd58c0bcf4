// Package admission holds one scope's admission rules: a free slot among
// the first Concurrency (with SlotDelay, one whose previous start is
// SlotDelay old), the gap since the previous start, the server gate, and
// room in the quota window. It is the one Go implementation of those
// rules: the root package's default scope keeps a State per scope, and so
// does store.Memory for the managers that share it. redisstore's
// admit.lua is the only other, held to this one by package storetest.
package admission

import "time"

// State is one scope's admission state, which Check and Start read and
// change. Its callers hand it their limits at each call (what the scope's
// policies make of them is theirs), so the same state serves a scope whose
// limits change between calls. The zero value is an empty scope. It is
// not safe for concurrent use: its callers lock it.
//
// What every admission reads comes first, in 57 bytes: one cache line
// where the State starts on one.
type State struct {
	LastStart time.Time // the previous start
	Gate      time.Time // no start before this (a server-given wait)
	InFlight  int32
	Started   bool // a request has started (shares InFlight's word)
	Quota     Window
	slots     []slot // only with SlotDelay; grows to the peak in use
}

// slot is one of a scope's Concurrency places, tracked for SlotDelay.
type slot struct {
	busy bool
	last time.Time // previous start in this slot
}

// Limits are the limits a scope's policies set, which State checks starts
// against: the concurrency, and the gap the delay asks between starts (the
// delay times the jitter drawn at the previous start) with the rule that
// set that delay; and the configured SlotDelay. The quota comes with each
// call. The default scope keeps its limits current as its policies move
// them, so an admission reads them rather than combining the parts (24
// bytes: a scope's size stays in its allocation class, and a call's
// arguments in registers).
type Limits struct {
	Gap       time.Duration
	SlotDelay time.Duration
	Conc      int32
	GapWhy    Reason
}

// Check returns when a start of cost may come and the rule that holds it
// back: None when it may come now; Concurrency, with no time, when every
// slot is taken (a release frees one); else the latest of the gap since
// the previous start (l.GapWhy), the slot delay (l.SlotDelay), the gate
// and the quota window's end, and its rule.
//
// A now before a start the state recorded means its clock went back: the
// state's times go back with it (see rebase), so no wait is longer than
// the rule's own.
func (a *State) Check(now time.Time, l *Limits, quota int64, window time.Duration, cost int64) (time.Time, Reason) {
	return a.CheckLatest(now, true, l, quota, window, cost) // raised: the rebase a Check makes
}

// CheckLatest is Check at now, a time that LatestRaised returned with
// raised, the state unchanged since.
func (a *State) CheckLatest(now time.Time, raised bool, l *Limits, quota int64, window time.Duration, cost int64) (time.Time, Reason) {
	if !raised && l.SlotDelay <= 0 && quota <= 0 && a.Gate.IsZero() && (!a.Started || l.Gap <= 0) {
		// Only the concurrency can hold the start back: what check
		// comes to without a rebase, a gap, a slot delay, a gate or a
		// quota, without its calls (and the spills around them).
		if a.InFlight >= l.Conc {
			return time.Time{}, Concurrency
		}
		return now, None
	}
	return a.check(now, raised, l, quota, window, cost)
}

// check is CheckLatest's general path.
func (a *State) check(now time.Time, raised bool, l *Limits, quota int64, window time.Duration, cost int64) (time.Time, Reason) {
	if raised {
		a.rebase(now)
	}
	if a.InFlight >= l.Conc {
		return time.Time{}, Concurrency
	}
	at, why := now, None
	// Without a gap the previous start holds nothing back: it is not
	// after now (LatestRaised, or the rebase above, made sure of it).
	if a.Started && l.Gap > 0 {
		if next := a.LastStart.Add(l.Gap); next.After(at) {
			at, why = next, l.GapWhy
		}
	}
	if l.SlotDelay > 0 {
		if _, free := a.freeSlot(now, l.Conc, l.SlotDelay); free.After(at) {
			at, why = free, SlotDelay
		}
	}
	if !a.Gate.IsZero() && a.Gate.After(at) { // no server-given wait yet: spare the comparison
		at, why = a.Gate, Gate
	}
	if quota > 0 {
		if end, ok := a.Quota.admit(now, quota, window, cost); !ok && end.After(at) {
			at, why = end, Quota
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
func (a *State) freeSlot(now time.Time, conc int32, slotDelay time.Duration) (int, time.Time) {
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

// Start records a start of cost at now, which Check admitted under l, and
// returns the slot it took (-1 without SlotDelay) and the quota window it
// was counted in.
func (a *State) Start(now time.Time, l *Limits, quota int64, w time.Duration, cost int64) (slotIndex int, window int64) {
	return a.StartLatest(now, true, l, quota, w, cost)
}

// StartLatest is Start at now, a time that LatestRaised returned with
// raised, the state unchanged since.
func (a *State) StartLatest(now time.Time, raised bool, l *Limits, quota int64, w time.Duration, cost int64) (slotIndex int, window int64) {
	if !raised && l.SlotDelay <= 0 && quota <= 0 {
		// What the general path below comes to without a rebase, a
		// slot or a quota window, without its call.
		a.InFlight++
		a.Started, a.LastStart = true, now
		return -1, 0
	}
	slotIndex, window = a.StartUncountedLatest(now, raised, l, quota, w, cost)
	if slotIndex >= 0 {
		a.slots[slotIndex].last = now
	}
	a.Started, a.LastStart = true, now
	return slotIndex, window
}

// StartUncounted records a start of cost at now, which Check admitted,
// that is no start for the gap or the slot delay: it takes a slot and
// counts in the quota window, and leaves the previous start and the
// slot's as they were. The manager's robots.txt fetch starts so, and its
// caller records the rest (the default scope's startRobots). It returns
// what Start returns.
func (a *State) StartUncounted(now time.Time, l *Limits, quota int64, w time.Duration, cost int64) (slotIndex int, window int64) {
	return a.StartUncountedLatest(now, true, l, quota, w, cost)
}

// StartUncountedLatest is StartUncounted at now, a time that LatestRaised
// returned with raised, the state unchanged since.
func (a *State) StartUncountedLatest(now time.Time, raised bool, l *Limits, quota int64, w time.Duration, cost int64) (slotIndex int, window int64) {
	if raised {
		a.rebase(now)
	}
	a.InFlight++
	slotIndex = -1
	if l.SlotDelay > 0 {
		i, _ := a.freeSlot(now, l.Conc, l.SlotDelay)
		if i < 0 {
			a.slots = append(a.slots, slot{})
			i = len(a.slots) - 1
		}
		a.slots[i].busy = true
		slotIndex = i
	}
	if quota > 0 {
		window = a.Quota.add(now, w, cost)
	}
	return slotIndex, window
}

// Latest returns now, or the latest start the state recorded if that is
// later. A caller whose clock never goes back (the manager's, which takes
// a jump back out of its readings) checks at it: a now before a recorded
// start is then a reading taken before another caller recorded that
// start, not a jump, and Check would take it for one (see rebase) and
// move the gap back by as much, letting the next start come early.
func (a *State) Latest(now time.Time) time.Time {
	now, _ = a.LatestRaised(now)
	return now
}

// LatestRaised is Latest, and reports whether the quota window's start
// raised the time it returns. Unless it did, that time is the previous
// start or not before it, and not before the window's start: a rebase at
// it moves nothing, and CheckLatest and StartLatest skip it (its two time
// comparisons).
func (a *State) LatestRaised(now time.Time) (time.Time, bool) {
	if a.Started && now.Before(a.LastStart) {
		now = a.LastStart
	}
	if a.Quota.Set && now.Before(a.Quota.start) {
		return a.Quota.start, true
	}
	return now, false
}

// rebase moves the state's times back by as much as now lies before the
// latest start it recorded: a start is recorded at the time it came, so
// one in the future means the clock went back (at least that far). The
// gap, the slot delays and the quota window then count from where the
// starts were before the jump, so none holds a start longer than its own
// wait; the gate keeps the time it had left, plus at most the time from
// the latest start to the jump (a smaller jump, which leaves now after
// the latest start, is not seen: it holds the gate at most that much
// longer too). Knowing the jump exactly would take a field of its own in
// every scope's state, and a clock reading the state is not given.
func (a *State) rebase(now time.Time) {
	// The window's start is a time the state saw too: a robots.txt fetch
	// counts in the window alone, and Roll moves it up to a now.
	if !(a.Started && now.Before(a.LastStart)) && !(a.Quota.Set && now.Before(a.Quota.start)) {
		return
	}
	latest := a.Quota.start
	if a.Started && (!a.Quota.Set || a.LastStart.After(latest)) {
		latest = a.LastStart
	}
	back := latest.Sub(now)
	if a.Started {
		a.LastStart = a.LastStart.Add(-back)
	}
	for i := range a.slots {
		if sl := &a.slots[i]; !sl.last.IsZero() {
			sl.last = sl.last.Add(-back)
		}
	}
	if !a.Gate.IsZero() {
		a.Gate = a.Gate.Add(-back)
	}
	if a.Quota.Set {
		a.Quota.start = a.Quota.start.Add(-back)
	}
}

// Finish ends a start that took slotIndex.
func (a *State) Finish(slotIndex int) {
	if a.InFlight > 0 {
		a.InFlight--
	}
	if slotIndex >= 0 && slotIndex < len(a.slots) {
		a.slots[slotIndex].busy = false
	}
}

// NotAfter moves the times a holds that are later than now back to now:
// the previous start, each slot's last start and the quota window's
// start; the gate goes back as far as the latest start (see rebase). A time after now was recorded by a clock that was ahead (a clock
// that stepped back since, or another worker's); left as it is it would
// hold the scope for that difference on top of its delays. It reports
// whether it moved any.
func (a *State) NotAfter(now time.Time) bool {
	moved := a.Started && a.LastStart.After(now) || a.Quota.Set && a.Quota.start.After(now)
	a.rebase(now) // the gate goes back with the starts
	if a.LastStart.After(now) {
		a.LastStart, moved = now, true
	}
	for i := range a.slots {
		if a.slots[i].last.After(now) {
			a.slots[i].last, moved = now, true
		}
	}
	if a.Quota.Set && a.Quota.start.After(now) {
		a.Quota.start, moved = now, true
	}
	return moved
}

// SetGate holds every start until t, unless a later gate is set.
func (a *State) SetGate(t time.Time) {
	if t.After(a.Gate) {
		a.Gate = t
	}
}

// Window counts the cost admitted in the current quota window. The first
// window starts at the scope's first start; later ones follow it back to
// back, w long each, so boundaries are exact whatever the clock's origin.
// The zero value has counted nothing.
type Window struct {
	Set   bool // a start has been counted
	start time.Time
	seq   int64 // which window; tickets carry it so stale corrections are dropped
	Used  int64 // the cost counted in the current window
}

// Roll moves the window forward to the one that holds now.
func (q *Window) Roll(now time.Time, w time.Duration) {
	if el := now.Sub(q.start); q.Set && el >= w {
		n := el / w
		q.start = q.start.Add(n * w)
		q.seq += int64(n)
		q.Used = 0
	}
}

// admit reports whether cost fits the window at now, or when it ends. A
// request larger than the whole quota is admitted into an empty window, so
// it is never starved.
func (q *Window) admit(now time.Time, quota int64, w time.Duration, cost int64) (time.Time, bool) {
	q.Roll(now, w)
	if !q.Set || q.Used <= 0 || q.Used+cost <= quota {
		return time.Time{}, true
	}
	return q.start.Add(w), false
}

// add counts cost at a start and returns the window it was counted in.
func (q *Window) add(now time.Time, w time.Duration, cost int64) int64 {
	if !q.Set {
		q.Set, q.start = true, now
	}
	q.Roll(now, w)
	q.Used += cost
	return q.seq
}

// Correct applies a correction arriving at now (it counts in the window
// it arrives in): delta, an actual cost minus the admitted one, if the
// start's window (ticketWindow) is still the current one; and floor, the
// count the server's remaining quota implies, when >= 0.
func (q *Window) Correct(now time.Time, w time.Duration, ticketWindow, delta, floor int64) {
	q.Roll(now, w)
	if delta != 0 && ticketWindow == q.seq {
		q.Used = max(0, q.Used+delta)
	}
	if floor >= 0 {
		q.Used = max(q.Used, floor)
	}
}

// Pending reports whether the window still counts something at now.
func (q *Window) Pending(now time.Time, w time.Duration) bool {
	return q.Set && q.Used > 0 && now.Before(q.start.Add(w))
}

// ScaleDuration returns d*f, saturating instead of overflowing: a delay
// times a factor (the jitter drawn at a start, backoff's step).
func ScaleDuration(d time.Duration, f float64) time.Duration {
	if f == 1 || d == 0 {
		return d
	}
	v := float64(d) * f
	switch {
	case v <= 0:
		return 0
	case v >= float64(maxDuration):
		return maxDuration
	}
	return time.Duration(v)
}

const maxDuration = time.Duration(1<<63 - 1)

// Reason says why a request waits: the rule that holds its start back.
// It is declared here, once, for the whole module: the root package's
// throttle.Reason and package store's store.Reason are this type under
// their own names (aliases), so a reason crosses between the admission
// rules, the manager and a Store as it is, with no conversion. The first
// six are the rules Check applies; the others are the manager's and the
// scope policy's (Limits.GapWhy may hold any of them, which Check
// returns as it is). The zero value is None.
type Reason uint8

// The reasons, in throttle.Reason's order (the root package documents
// each as ReasonNone, ReasonConcurrency and so on).
const (
	None         Reason = iota // it may start now
	Concurrency                // every slot of the scope is taken
	Delay                      // the scope's delay since its last start
	SlotDelay                  // the free slots' delay since their last start
	Gate                       // a server-given wait (Retry-After, RateLimit)
	Quota                      // the window's quota is spent
	Robots                     // robots.txt Crawl-delay or Request-rate
	Backoff                    // the delay raised by backoff signals
	Global                     // Config.GlobalConcurrency is reached
	Queue                      // earlier callers wait for the same scope
	Rampup                     // rampup's rate: the fastest it has proven, or is probing
	AutoThrottle               // AutoThrottle's delay: latency / TargetConcurrency
)

var reasonNames = [...]string{"none", "concurrency", "delay", "slot delay", "server gate",
	"quota", "robots", "backoff", "global concurrency", "queue", "rampup", "autothrottle"}

// String returns the reason in words, e.g. "slot delay"; "unknown" for a
// value not listed.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}
