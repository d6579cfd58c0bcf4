package sim

import (
	"container/heap"
	"github.com/crawlerkit/throttle/throttletest"
	"time"
)

// Loop is a discrete-event loop in virtual time. Events run one at a time
// in order of (time, scheduling order), each with the clock set to its
// time, so a run is deterministic.
type Loop struct {
	clock *throttletest.Clock
	q     eventHeap
	seq   uint64
}

// NewLoop returns a loop whose clock reads start.
func NewLoop(start time.Time) *Loop { return &Loop{clock: throttletest.NewClock(start)} }

// Clock returns the loop's clock, to give to a ThrottlingManager.
func (l *Loop) Clock() *throttletest.Clock { return l.clock }

// Now returns the virtual time.
func (l *Loop) Now() time.Time { return l.clock.Now() }

// At schedules fn to run at t (now, if t is in the past). Events at the
// same time run in the order they were scheduled.
func (l *Loop) At(t time.Time, fn func()) {
	if now := l.clock.Now(); t.Before(now) {
		t = now
	}
	l.seq++
	heap.Push(&l.q, event{at: t, seq: l.seq, fn: fn})
}

// Run runs the events due before end, then sets the clock to end. Timers
// made with the clock fire as the loop passes their time.
func (l *Loop) Run(end time.Time) {
	for len(l.q) > 0 {
		next := l.q[0].at
		if tt, ok := l.clock.Next(); ok && tt.Before(next) {
			next = tt
		}
		if !next.Before(end) {
			break
		}
		l.clock.Set(next)
		if !l.q[0].at.After(next) {
			e := heap.Pop(&l.q).(event)
			e.fn()
		}
	}
	l.clock.Set(end)
}

// Pending returns how many events are scheduled.
func (l *Loop) Pending() int { return len(l.q) }

type event struct {
	at  time.Time
	seq uint64
	fn  func()
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = event{}
	*h = old[:len(old)-1]
	return e
}
