package throttle

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
// it, dequeues it or touches its timer; others only signal it.
type waiter struct {
	wake  chan struct{} // buffered 1: a signal is never lost, never blocks
	nodes []qnode       // one per scope of the permit, same order
	one   [1]qnode
	gnode qnode // its place in the global queue
	timer Timer
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
