package throttle

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// A Clock tells the time and makes timers. The ThrottlingManager reads time
// only through its Clock, so tests can run it in fake time; policies
// (ScopeManager and its parts) never read a clock at all: they are given now.
//
// Config.Clock nil means the real clock, which is monotonic. Package
// throttletest has a fake one.
//
// Now should be monotonic: never earlier than a time it returned before (a
// wall clock set back, or stepped back by NTP, is not). When a custom
// Clock's Now goes back, the manager carries on from the latest time it
// knows of and adds the jump to every later reading: the times it hands
// its policies, and gives out (Permit.Acquired, Admission.At, its own
// Clock), never go back, and go on at the Clock's pace, ahead of the
// Clock by the sum of its backward jumps. The latest time it knows of is
// the latest it read, or the time a timer it armed was due when that
// timer fires: so a caller waiting through the jump waits what it had
// left, not that again. Otherwise a Clock set back an hour would hold the
// next start of every scope for an hour. No wait is longer than its
// rule's for a Clock going back, whatever the jump.
//
// Timers take durations, and must fire when their duration has passed,
// whatever Now does meanwhile, as a time.Timer does (it runs on the
// monotonic clock). throttletest's fake Clock, set back, keeps its
// pending timers' durations so.
//
// A Clock must be safe for concurrent use: the manager calls it from many
// goroutines at once.
type Clock interface {
	// Now returns the current time. It should never go back; see above.
	Now() time.Time
	// NewTimer returns a timer that fires once, d from now.
	NewTimer(d time.Duration) Timer
}

// A Timer is the part of *time.Timer the manager uses. Each waiting caller
// owns at most one, reused with Reset. A Clock must not return a nil Timer.
// The manager uses each Timer from one goroutine only, the waiting
// caller's; its Clock may fire it from another.
type Timer interface {
	// C is the channel the timer's time is delivered on.
	C() <-chan time.Time
	// Stop prevents the timer from firing; it reports whether it was active.
	Stop() bool
	// Reset changes the timer to fire d from now; it reports whether it was
	// active. As with time.Timer since Go 1.23, no stale value is received
	// from C after Stop or Reset returns.
	Reset(d time.Duration) bool
}

// realClock is the Clock used when Config.Clock is nil. It reads only the
// monotonic clock (time.Since of a base with a monotonic reading costs one
// clock read where time.Now costs two: 32 ns against 47 ns per call here,
// twice per request) and takes a fresh wall-clock base once a minute, so
// its wall time never drifts from time.Now by more than a minute's worth
// of clock slewing.
type realClock struct {
	base atomic.Pointer[time.Time]
}

// rebaseAfter is how long a wall-clock base is used.
const rebaseAfter = time.Minute

func newRealClock() *realClock {
	c := &realClock{}
	now := time.Now()
	c.base.Store(&now)
	return c
}

func (c *realClock) Now() time.Time {
	b := c.base.Load()
	d := time.Since(*b)
	if d < rebaseAfter {
		return b.Add(d)
	}
	now := time.Now()
	c.base.CompareAndSwap(b, &now)
	return now
}

func (*realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// monotonicClock is a custom Clock whose Now never goes back: a backward
// jump of the Clock is added to an offset that every later reading gets,
// so the time goes on from the latest one given out, at the Clock's pace.
// The real clock needs no wrapper (its readings carry the monotonic
// clock).
type monotonicClock struct {
	Clock
	mu     sync.Mutex
	read   bool          // Now has returned a time
	last   time.Time     // the latest time Now returned
	offset time.Duration // the sum of the backward jumps
}

func newMonotonicClock(c Clock) *monotonicClock { return &monotonicClock{Clock: c} }

func (c *monotonicClock) Now() time.Time {
	// Read under the lock: a reading taken before another caller's later
	// one, and compared after it, would look like a jump back, and its
	// offset would move every later reading ahead for good (two starts of
	// a scope came at one instant, a Delay apart by the manager's clock).
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.Clock.Now()
	if c.offset != 0 {
		t = t.Add(c.offset)
	}
	if c.read && t.Before(c.last) {
		c.offset = addSaturating(c.offset, c.last.Sub(t))
		t = c.last
	}
	c.read, c.last = true, t
	return t
}

// notBefore tells c that its time is at least t: a timer the manager armed
// for t (Timers take durations, so they fire when the time they were
// given has passed, whatever Now did meanwhile) has fired. A Clock set
// back while nothing read it would otherwise lose the time that passed
// between the last reading and the jump, and a caller waiting through
// the jump would wait that long again.
func (c *monotonicClock) notBefore(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.read || t.After(c.last) {
		c.read, c.last = true, t
	}
}

// timerFired tells the manager's clock that a timer armUntil armed for at
// has fired: its time is at least at.
func (m *ThrottlingManager) timerFired(at time.Time) {
	if c, ok := m.clock.(*monotonicClock); ok {
		c.notBefore(at)
	}
}

// addSaturating returns a+b for b >= 0, at most math.MaxInt64.
func addSaturating(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
