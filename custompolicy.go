package throttle

import (
	"errors"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle/store"
)

// custom adapts a ScopeManager other than the default one (a user's
// factory made it) to policy. What such a manager gets from the
// coordinator, and what it cannot:
//
//   - Its Admit, Start, Finish, Idle and SetConfig, each guarded: a panic
//     in one leaves no lock held and no slot taken. The method answers a
//     safe value (Admit: "not now"; Idle: Busy) and the panic is kept,
//     to be raised again in the caller's goroutine once the manager's
//     locks are released and the request's slots given back.
//   - The politeness the coordinator owes every site: the robots.txt
//     delay of a scope that is not configured explicitly, and the wait a
//     scope evicted from the table had pending, are enforced here, in
//     front of the manager's own Admit.
//   - Stats: the counts, the waiting reason and ReadyAt. The policy's own
//     fields (Concurrency, Delay, backoff, rampup) and Pace are zero:
//     unknown. Export writes nothing for the scope, and Import restores
//     nothing to it. New refuses a Store with such a manager: a Store
//     shares limits the manager cannot state.
//
// Its Finish gets a copy of the Feedback on the heap, since it may keep
// it; a change it makes reaches the request's later scopes (sorted by
// key), as when all the scopes of a request shared one Feedback.
type custom struct {
	mgr      ScopeManager
	key      string
	panicked atomic.Pointer[ScopeManagerPanic]

	hold        time.Time // no start before: an evicted key's pending wait
	holdWhy     Reason
	robotsDelay time.Duration
	lastStart   time.Time // the previous start, for the robots.txt delay
}

func (c *custom) catch(method string) {
	if r := recover(); r != nil {
		c.panicked.CompareAndSwap(nil, &ScopeManagerPanic{Scope: c.key, Method: method, Value: r})
	}
}

func (c *custom) admit(now time.Time, cost int64) (a Admission) {
	if now.Before(c.hold) {
		return Admission{At: c.hold, Reason: c.holdWhy}
	}
	if c.robotsDelay > 0 && !c.lastStart.IsZero() {
		if at := c.lastStart.Add(c.robotsDelay); now.Before(at) {
			return Admission{At: at, Reason: ReasonRobots}
		}
	}
	a = Admission{At: now.Add(time.Second), Reason: ReasonConcurrency}
	defer c.catch("Admit")
	return c.mgr.Admit(now, cost)
}

func (c *custom) admitLatest(now time.Time, cost int64) (Admission, time.Time, bool) {
	return c.admit(now, cost), now, false
}

func (c *custom) startLatest(t *Ticket, latest time.Time, _ bool, cost int64) {
	c.begin(t, latest, cost, false)
}

func (c *custom) begin(t *Ticket, now time.Time, cost int64, _ bool) {
	c.lastStart = now
	*t = Ticket{Slot: -1, Cost: cost, Start: now}
	defer c.catch("Start")
	*t = c.mgr.Start(now, cost)
}

func (c *custom) end(now time.Time, t *Ticket, fb Feedback, _ bool) (signal bool, changed *Feedback) {
	changed = &fb // on the heap: the manager may keep it
	c.finish(now, *t, changed)
	return changed.Backoff && changed.appliesTo(c.key), changed
}

func (c *custom) finish(now time.Time, t Ticket, fb *Feedback) {
	defer c.catch("Finish")
	c.mgr.Finish(now, t, fb)
}

func (c *custom) idleness(now time.Time) (i Idleness) {
	if now.Before(c.hold) || (c.robotsDelay > 0 && now.Before(c.lastStart.Add(c.robotsDelay))) {
		return Busy
	}
	i = Busy
	defer c.catch("Idle")
	return c.mgr.Idle(now)
}

func (c *custom) reconfigure(now time.Time, cfg ScopeConfig) {
	defer c.catch("SetConfig")
	c.mgr.SetConfig(now, cfg)
}

func (c *custom) setRobotsDelay(d time.Duration) { c.robotsDelay = d }

func (c *custom) holdUntil(_, at time.Time, gate bool) {
	c.hold, c.holdWhy = at, ReasonDelay
	if gate {
		c.holdWhy = ReasonGate
	}
}

// The answers a ScopeManager cannot give: "unknown", or nothing to do.

func (c *custom) quotaLeft(time.Time) (int64, bool) { return 0, false }
func (c *custom) snap() (policySnap, bool)          { return policySnap{}, false }
func (c *custom) configured() (int, bool, bool)     { return 0, false, false }
func (c *custom) learned() (learnedState, bool)     { return learnedState{}, false }
func (c *custom) restore(*learnedState) bool        { return false }
func (c *custom) sharedWhy(r Reason) Reason         { return r }
func (c *custom) version() int64                    { return 0 }
func (c *custom) setVersion(int64)                  {}
func (c *custom) sharedImport([]byte) error         { return errNoStore }

func (c *custom) fillStats(time.Time, time.Duration, *ScopeStats) {}

func (c *custom) sharedLimits(time.Time, *store.Scope) { panic(errNoStore) }

func (c *custom) sharedLearn(time.Time, Ticket, *Feedback, *store.ReleaseScope, bool) bool {
	panic(errNoStore)
}

func (c *custom) takePanic() *ScopeManagerPanic { return c.panicked.Swap(nil) }

// errNoStore is what a custom ScopeManager answers on the Store path,
// which Config.validate keeps it off.
var errNoStore = errors.New("throttle: a custom ScopeManager cannot share its scope through a Store")

// errPanicked is the error of a permit released because the code using it
// panicked.
var errPanicked = errors.New("throttle: released after a panic")

// takePanic returns the first panic kept by a policy of hs, clearing them.
func takePanic(hs []held) *ScopeManagerPanic {
	var first *ScopeManagerPanic
	for i := range hs {
		if p := hs[i].s.pol.takePanic(); p != nil && first == nil {
			first = p
		}
	}
	return first
}

// raiseAfterStartSlow raises a panic kept while p was admitted, once p's
// locks are released: p is released first (its slots given back), since
// the caller will never see it. raiseAfterStart (admit.go) calls it when
// some scope has a custom ScopeManager.
func (m *ThrottlingManager) raiseAfterStartSlow(p *Permit) {
	if pv := takePanic(p.scopes()); pv != nil {
		p.ReleaseFeedback(Feedback{NoAdjust: true, Err: pv})
		panic(pv)
	}
}

// raiseSlow raises a panic kept during an operation on hs that took
// nothing (see raise, admit.go). Kept out of line, so raise inlines.
//
//go:noinline
func (m *ThrottlingManager) raiseSlow(hs []held) {
	if pv := takePanic(hs); pv != nil {
		panic(pv)
	}
}
