// Package throttletest has helpers for testing code that uses throttle: a
// fake Clock that moves only when told, and a RoundTripper that answers
// from a function, so tests run in fake time without sockets.
package throttletest

import (
	"container/heap"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
)

// Clock is a fake throttle.Clock. Time stands still until Advance, Set or
// AdvanceToNext moves it; timers fire when it passes their time. It is safe
// for concurrent use. The zero value is not usable: call NewClock.
type Clock struct {
	mu     sync.Mutex
	cond   *sync.Cond // broadcast when the set of timers changes
	now    time.Time
	timers timerHeap
	seq    uint64
}

var _ throttle.Clock = (*Clock)(nil)

// NewClock returns a fake clock reading start.
func NewClock(start time.Time) *Clock {
	c := &Clock{now: start}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTimer returns a timer that fires when the clock reaches Now()+d.
func (c *Clock) NewTimer(d time.Duration) throttle.Timer {
	t := &timer{c: c, ch: make(chan time.Time, 1), index: -1}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.schedule(t, d)
	return t
}

// Advance moves the clock forward by d, firing the timers due on the way in
// order of their time; each timer's channel receives its own time.
//
// A negative d sets the clock back, as a wall clock is set back or
// stepped back by NTP: the pending timers keep the time they have left,
// as a time.Timer does (it runs on the monotonic clock), so each fires
// when the clock has moved forward by that much again.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d < 0 {
		for _, t := range c.timers { // all move alike: the heap's order holds
			t.when = t.when.Add(d)
		}
		c.now = c.now.Add(d)
		c.cond.Broadcast()
		return
	}
	c.advanceTo(c.now.Add(d))
}

// Set moves the clock to t (never backwards), firing the timers due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.advanceTo(t)
	}
}

// Next returns the time of the earliest pending timer.
func (c *Clock) Next() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].when, true
}

// AdvanceToNext moves the clock to the earliest pending timer and fires it
// (and any other timer due at that same time). It reports false, and does
// nothing, when no timer is pending.
func (c *Clock) AdvanceToNext() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return false
	}
	if w := c.timers[0].when; w.After(c.now) {
		c.advanceTo(w)
	} else {
		c.advanceTo(c.now)
	}
	return true
}

// Timers returns how many timers are pending.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// BlockUntilTimers blocks until at least n timers are pending: for example
// until n callers of Acquire are waiting for a delay to pass. It waits in
// real time for the other goroutines to get there, not in fake time.
func (c *Clock) BlockUntilTimers(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.timers) < n {
		c.cond.Wait()
	}
}

func (c *Clock) advanceTo(t time.Time) {
	for len(c.timers) > 0 && !c.timers[0].when.After(t) {
		tm := heap.Pop(&c.timers).(*timer)
		if tm.when.After(c.now) {
			c.now = tm.when
		}
		select {
		case tm.ch <- tm.when:
		default:
		}
	}
	c.now = t
	c.cond.Broadcast()
}

func (c *Clock) schedule(t *timer, d time.Duration) {
	c.seq++
	t.when, t.seq = c.now.Add(d), c.seq
	heap.Push(&c.timers, t)
	c.cond.Broadcast()
	if d <= 0 {
		c.advanceTo(c.now)
	}
}

// timer is a fake throttle.Timer.
type timer struct {
	c     *Clock
	ch    chan time.Time
	when  time.Time
	seq   uint64 // FIFO among timers due at the same time
	index int    // in the heap; -1 when not pending
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.stopLocked()
}

func (t *timer) stopLocked() bool {
	active := t.index >= 0
	if active {
		heap.Remove(&t.c.timers, t.index)
		t.c.cond.Broadcast()
	}
	select { // no stale value after Stop, as with time.Timer since Go 1.23
	case <-t.ch:
	default:
	}
	return active
}

func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	active := t.stopLocked()
	t.c.schedule(t, d)
	return active
}

// timerHeap orders timers by time, then by creation.
type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].seq < h[j].seq
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
