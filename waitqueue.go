package throttle

import (
	"sync"
	"sync/atomic"
)

// waitQueue is an intrusive FIFO of waiting callers: one per scope (guarded
// by the scope's lock) and one for the global cap (guarded by its lock). A
// waiter owns one node per queue it is in, so no queue operation allocates.
type waitQueue struct {
	head, tail *qnode
	n          int
}

type qnode struct {
	w          *waiter
	prev, next *qnode
	queued     bool
}

func (q *waitQueue) push(n *qnode) {
	n.prev, n.next, n.queued = q.tail, nil, true
	if q.tail != nil {
		q.tail.next = n
	} else {
		q.head = n
	}
	q.tail = n
	q.n++
}

// remove takes n out of q and reports whether n was the head.
func (q *waitQueue) remove(n *qnode) (wasHead bool) {
	if !n.queued {
		return false
	}
	wasHead = q.head == n
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		q.head = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	} else {
		q.tail = n.prev
	}
	n.prev, n.next, n.queued = nil, nil, false
	q.n--
	return wasHead
}

// wakeHead signals the first waiter, if any, to look again.
func (q *waitQueue) wakeHead() {
	if q.head != nil {
		q.head.w.signal()
	}
}

// waiter is one caller blocked in Acquire. Only its own goroutine admits
// it or dequeues it; others only signal it.
type waiter struct {
	wake  chan struct{} // buffered 1: a signal is never lost, never blocks
	nodes []qnode       // one per scope of the permit, same order
	one   [1]qnode
	gnode qnode // its place in the global queue
	// blocker is the scope that held the waiter back at its last look
	// (nil: none known, or the global cap). Written by the waiter with all
	// its scopes locked, so whoever holds one of them may read it.
	blocker *scope
}

// maxPass bounds how far a caller looks down a scope's queue for waiters
// it may pass, so a long queue costs a bounded walk.
const maxPass = 64

// mustWait reports whether a waiter ahead of mine (nil: a newcomer, behind
// all) in s's queue waits for s itself, or for nothing known. Waiters held
// back by another of their scopes are passed: they could not use s now,
// and keep their place for when they can. This keeps FIFO order among the
// callers that compete for s without letting a request that waits on its
// own endpoint's delay stall everyone behind it in the shared host scope.
func mustWait(s *scope, mine *qnode) bool {
	n := s.queue.head
	for k := 0; n != nil && n != mine; k++ {
		if k >= maxPass || n.w.blocker == nil || n.w.blocker == s {
			return true
		}
		n = n.next
	}
	return false
}

// wakeNeeding signals the first waiter from n on that may need s: one held
// back by s, or by nothing known. Waiters held back by their other scopes
// are skipped; those scopes wake them.
func wakeNeeding(s *scope, n *qnode) {
	for k := 0; n != nil && k < maxPass; k++ {
		if b := n.w.blocker; b == nil || b == s {
			n.w.signal()
			return
		}
		n = n.next
	}
}

func newWaiter(nscopes int) *waiter {
	w := &waiter{wake: make(chan struct{}, 1)}
	if nscopes == 1 {
		w.nodes = w.one[:]
	} else {
		w.nodes = make([]qnode, nscopes)
	}
	for i := range w.nodes {
		w.nodes[i].w = w
	}
	w.gnode.w = w
	return w
}

func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// globalGate enforces Config.GlobalConcurrency without a global lock on the
// hot path: permits are counted with a compare-and-swap; the lock and the
// FIFO queue are used only while some caller waits for the cap.
//
// A caller queues here only once every scope of its request admits it, so
// a request waiting on its own scope's delay never holds back others.
//
// No lost wakeups: a waiter raises pending before it reads the count, a
// releaser lowers the count before it reads pending (both sequentially
// consistent), so either the waiter sees the free permit or the releaser
// sees the waiter and signals the head of the queue under the lock.
type globalGate struct {
	limit   int64
	_       [120]byte    // n is written on every admission: keep it alone
	n       atomic.Int64 // permits held
	_       [120]byte    // pending is read on every admission, written rarely
	pending atomic.Int64 // callers queued or deciding to queue
	mu      sync.Mutex
	q       waitQueue
}

// tryFast takes a permit if nobody waits for the cap and one is free.
func (g *globalGate) tryFast() bool {
	if g.pending.Load() != 0 {
		return false
	}
	return g.cas()
}

func (g *globalGate) cas() bool {
	for {
		n := g.n.Load()
		if n >= g.limit {
			return false
		}
		if g.n.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// take takes a permit for w, in FIFO order among the callers waiting for
// the cap, or queues w. It is called with w's scopes locked.
func (g *globalGate) take(w *waiter) bool {
	if !w.gnode.queued && g.tryFast() {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !w.gnode.queued {
		g.pending.Add(1)
	}
	if (g.q.head == nil || g.q.head == &w.gnode) && g.cas() {
		g.q.remove(&w.gnode)
		g.pending.Add(-1)
		if g.n.Load() < g.limit {
			g.q.wakeHead()
		}
		return true
	}
	if !w.gnode.queued {
		g.q.push(&w.gnode)
	}
	return false
}

// leave takes w out of the queue (it gave up, or its scopes stopped
// admitting it) and passes its turn on.
func (g *globalGate) leave(w *waiter) {
	if !w.gnode.queued {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.q.remove(&w.gnode) {
		g.q.wakeHead()
	}
	g.pending.Add(-1)
}

// release gives a permit back and wakes the first caller waiting for one.
// Small enough to inline: no call while no caller waits.
func (g *globalGate) release() {
	g.n.Add(-1)
	if g.pending.Load() > 0 {
		g.wakeFirst()
	}
}

// wakeFirst is release's wake-up, when callers wait.
func (g *globalGate) wakeFirst() {
	g.mu.Lock()
	g.q.wakeHead()
	g.mu.Unlock()
}
