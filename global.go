package throttle

import (
	"sync"
	"sync/atomic"
)

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
func (g *globalGate) release() {
	g.n.Add(-1)
	if g.pending.Load() > 0 {
		g.mu.Lock()
		g.q.wakeHead()
		g.mu.Unlock()
	}
}
