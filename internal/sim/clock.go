package sim

import (
	"container/heap"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
)

// Clock is a settable virtual clock that implements throttle.Clock. Time
// stands still until Set moves it; timers fire, in order of their time,
// when it passes them. A Loop owns its clock and moves it to each event.
// Clock is safe for concurrent use, but the simulator never needs that.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers timerHeap
	seq    uint64
}

var _ throttle.Clock = (*Clock)(nil)

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the virtual time.
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

// Set moves the clock to t, never backwards, firing the timers due on the
// way; each timer's channel receives its own time.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.advanceTo(t)
}

// NextTimer returns the time of the earliest pending timer.
func (c *Clock) NextTimer() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return time.Time{}, false
	}
	return c.timers[0].when, true
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
	if t.After(c.now) {
		c.now = t
	}
}

func (c *Clock) schedule(t *timer, d time.Duration) {
	c.seq++
	t.when, t.seq = c.now.Add(d), c.seq
	heap.Push(&c.timers, t)
	if d <= 0 {
		c.advanceTo(c.now)
	}
}

// timer is a virtual throttle.Timer.
type timer struct {
	c     *Clock
	ch    chan time.Time
	when  time.Time
	seq   uint64
	index int // in the heap; -1 when not pending
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

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if !h[i].when.Equal(h[j].when) {
		return h[i].when.Before(h[j].when)
	}
	return h[i].seq < h[j].seq
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
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
