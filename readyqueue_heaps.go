// This file holds the ReadyQueue's internals: the groups of requests
// (setQueue, entry, entryHeap), the heaps of ready and waiting groups, and
// the FIFO of callers blocked in Pop.

package throttle

import (
	"net/http"
	"time"
)

// setQueue is a group: the queued requests of one scope set.
type setQueue struct {
	// The fields the heaps read and write come first, together: a heap
	// of many groups compares and moves groups that are not in the
	// cache, and each of its steps then misses once a group, not twice.
	idx int // in ready or waiting; -1 in neither
	// the head's rank among ready groups
	prio    int
	share   float64
	headSeq uint64
	readyAt time.Time // in waiting: when to ask again

	keys     []string // the scope keys, sorted
	scopes   []*scope // their entries, looked up again once forgotten
	set      string   // setKey, for groups of several scopes
	oneKey   [1]string
	oneScope [1]*scope
	entries  entryHeap

	state setState

	// robotsOK is the origin whose robots.txt fetch the head waited
	// for, if robotsHas: the head goes on without looking again.
	robotsOK  origin
	robotsHas bool
}

type setState uint8

const (
	setIdle setState = iota // not filed yet, or gone
	setReady
	setWaiting
	setParked
	setRobots // the head waits for its origin's robots.txt (ReadyQueue.robotsHeld)
)

// entry is one queued request.
type entry struct {
	req   *http.Request
	prio  int
	seq   uint64
	cost  int64   // one-scope groups
	costs []int64 // the others: a cost per scope, in the group's order
}

func (e *entry) costOf(i int) int64 {
	if e.costs != nil {
		return e.costs[i]
	}
	return e.cost
}

// entryHeap orders a group's requests: higher priority, then push order.
type entryHeap []entry

func (h entryHeap) less(i, j int) bool {
	if h[i].prio != h[j].prio {
		return h[i].prio > h[j].prio
	}
	return h[i].seq < h[j].seq
}

func (h *entryHeap) push(e entry) {
	*h = append(*h, e)
	s := *h
	for i := len(s) - 1; i > 0; {
		parent := (i - 1) / 2
		if !s.less(i, parent) {
			break
		}
		s[i], s[parent] = s[parent], s[i]
		i = parent
	}
}

func (h *entryHeap) pop() {
	s := *h
	last := len(s) - 1
	s[0] = s[last]
	s[last] = entry{}
	s = s[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(s) && s.less(l, small) {
			small = l
		}
		if r := l + 1; r < len(s) && s.less(r, small) {
			small = r
		}
		if small == i {
			break
		}
		s[i], s[small] = s[small], s[i]
		i = small
	}
	*h = s
}

// readyHeap orders ready groups by their heads: higher priority, larger
// quota share, pushed earlier.
type readyHeap []*setQueue

func (h readyHeap) Len() int { return len(h) }
func (h readyHeap) Less(i, j int) bool {
	a, b := h[i], h[j]
	switch {
	case a.prio != b.prio:
		return a.prio > b.prio
	case a.share != b.share:
		return a.share > b.share
	}
	return a.headSeq < b.headSeq
}
func (h readyHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *readyHeap) Push(x any) {
	g := x.(*setQueue)
	g.idx = len(*h)
	*h = append(*h, g)
}
func (h *readyHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.idx = -1
	return g
}

// waitingHeap orders waiting groups by ready time, then push order.
type waitingHeap []*setQueue

func (h waitingHeap) Len() int { return len(h) }
func (h waitingHeap) Less(i, j int) bool {
	if !h[i].readyAt.Equal(h[j].readyAt) {
		return h[i].readyAt.Before(h[j].readyAt)
	}
	return h[i].headSeq < h[j].headSeq
}
func (h waitingHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}
func (h *waitingHeap) Push(x any) {
	g := x.(*setQueue)
	g.idx = len(*h)
	*h = append(*h, g)
}
func (h *waitingHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.idx = -1
	return g
}

// popper is a caller blocked in Pop.
type popper struct {
	wake       chan struct{} // buffered 1: a signal is never lost, never blocks
	prev, next *popper
}

func (p *popper) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// popperList is the FIFO of callers blocked in Pop.
type popperList struct{ head, tail *popper }

func (l *popperList) push(p *popper) {
	p.prev, p.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = p
	} else {
		l.head = p
	}
	l.tail = p
}

func (l *popperList) remove(p *popper) {
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		l.head = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	} else {
		l.tail = p.prev
	}
	p.prev, p.next = nil, nil
}
