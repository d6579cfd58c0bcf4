// This file holds the ReadyQueue's internals: the groups of requests
// (setQueue, entry, entryHeap), the ready groups (readySet: a run and a
// heap) and the heap of waiting ones, and the FIFO of callers blocked in
// Pop.

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
	idx   int  // in ready (in its run if inRun, else its heap) or waiting; -1 in neither
	inRun bool // in ready's run (readySet)
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
	// What the head's admission needs of req's context, kept at Push
	// (the queue keeps req unchanged until it is popped), so that a pop
	// reads nothing of req: noAdjust (WithoutAdjust), and endless, set
	// when the context can never be cancelled (its Done is nil, as
	// context.Background's, and WithoutAdjust's over it), so its Err is
	// never read.
	noAdjust bool
	endless  bool
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

// readySet holds the ready groups in their order (readyItem.before). The
// groups that come in that order, each not before the last one added (a
// crawl at one priority over many hosts: a host's next head was pushed
// after the heads of the hosts ready before it), go to the back of a run,
// a ring; the others go in a heap. Its first group is the better of the
// run's first and the heap's root: it gives the groups in the order one
// heap of them all would, and a group that comes in order costs O(1), not
// a sift through the heap. A group taken out of the run before its turn
// leaves a hole (an item with no group) there.
type readySet struct {
	heap readyHeap
	run  []readyItem // len a power of 2; the item at position i is run[i&(len(run)-1)]
	head int         // the run's first position, a group's unless the run is empty
	tail int         // the position after its last item
	live int         // the groups in the run
}

func (r *readySet) len() int { return len(r.heap) + r.live }

// first returns the first group; r is not empty.
func (r *readySet) first() *setQueue {
	if r.live > 0 {
		it := &r.run[r.head&(len(r.run)-1)]
		if len(r.heap) == 0 || it.before(&r.heap[0]) {
			return it.g
		}
	}
	return r.heap[0].g
}

// push adds g, with its rank (rank).
func (r *readySet) push(g *setQueue) {
	it := readyItemOf(g)
	if r.live == 0 {
		r.head, r.tail = 0, 0
	} else if it.before(&r.run[(r.tail-1)&(len(r.run)-1)]) {
		r.heap.push(g)
		return
	}
	if r.tail-r.head == len(r.run) {
		r.grow()
	}
	r.run[r.tail&(len(r.run)-1)] = it
	g.idx, g.inRun = r.tail, true
	r.tail++
	r.live++
}

// remove takes g out.
func (r *readySet) remove(g *setQueue) {
	if !g.inRun {
		r.heap.remove(g.idx)
		return
	}
	mask := len(r.run) - 1
	r.run[g.idx&mask].g = nil
	g.idx, g.inRun = -1, false
	r.live--
	for r.head < r.tail && r.run[r.head&mask].g == nil {
		r.head++
	}
	if holes := r.tail - r.head - r.live; holes > 32 && holes > r.live {
		r.compact()
	}
}

// fix puts g in its place again after its rank changed: in the heap, a
// sift; in the run, which holds only groups in order, out and in again.
func (r *readySet) fix(g *setQueue) {
	if !g.inRun {
		r.heap.fix(g.idx)
		return
	}
	r.remove(g)
	r.push(g)
}

// grow doubles the run's ring.
func (r *readySet) grow() {
	run := make([]readyItem, max(16, 2*len(r.run)))
	for i := r.head; i < r.tail; i++ {
		run[i&(len(run)-1)] = r.run[i&(len(r.run)-1)]
	}
	r.run = run
}

// compact closes the run's holes, keeping its order.
func (r *readySet) compact() {
	mask := len(r.run) - 1
	j := r.head
	for i := r.head; i < r.tail; i++ {
		it := r.run[i&mask]
		if it.g == nil {
			continue
		}
		if j != i {
			r.run[j&mask] = it
			it.g.idx = j
		}
		j++
	}
	for i := j; i < r.tail; i++ {
		r.run[i&mask] = readyItem{}
	}
	r.tail = j
}

// readyHeap, readySet's heap, orders ready groups by their heads: higher
// priority, larger quota share, pushed earlier. Each item holds its
// group's rank, so the heap compares items without reaching into their
// groups: with thousands of groups, each such reach missed the cache,
// twice a level of a sift. A sift moves items into a hole, writing each
// moved group's idx once.
type readyHeap []readyItem

type readyItem struct {
	prio    int
	share   float64
	headSeq uint64
	g       *setQueue
}

// readyItemOf is g's item, with g's rank (rank).
func readyItemOf(g *setQueue) readyItem {
	return readyItem{prio: g.prio, share: g.share, headSeq: g.headSeq, g: g}
}

func (a *readyItem) before(b *readyItem) bool {
	switch {
	case a.prio != b.prio:
		return a.prio > b.prio
	case a.share != b.share:
		return a.share > b.share
	}
	return a.headSeq < b.headSeq
}

func (h *readyHeap) push(g *setQueue) {
	*h = append(*h, readyItem{})
	h.place(len(*h)-1, readyItemOf(g))
}

// remove takes out the group at i, and returns it.
func (h *readyHeap) remove(i int) *setQueue {
	s := *h
	g, n := s[i].g, len(s)-1
	last := s[n]
	s[n] = readyItem{}
	*h = s[:n]
	if i < n {
		h.place(i, last)
	}
	g.idx = -1
	return g
}

// fix puts the group at i in its place again after its rank changed.
func (h *readyHeap) fix(i int) { h.place(i, readyItemOf((*h)[i].g)) }

// place puts it in the heap at i, a hole, sifting it up or down.
func (h *readyHeap) place(i int, it readyItem) {
	s := *h
	j := i
	for j > 0 {
		p := (j - 1) / 2
		if !it.before(&s[p]) {
			break
		}
		s[j] = s[p]
		s[j].g.idx = j
		j = p
	}
	for j == i {
		c := 2*j + 1
		if c >= len(s) {
			break
		}
		if r := c + 1; r < len(s) && s[r].before(&s[c]) {
			c = r
		}
		if !s[c].before(&it) {
			break
		}
		s[j] = s[c]
		s[j].g.idx = j
		j, i = c, c
	}
	s[j] = it
	it.g.idx = j
}

// waitingHeap orders waiting groups by ready time, then push order; its
// items hold both, as readyHeap's hold the rank.
type waitingHeap []waitingItem

type waitingItem struct {
	readyAt time.Time
	headSeq uint64
	g       *setQueue
}

func (a *waitingItem) before(b *waitingItem) bool {
	if !a.readyAt.Equal(b.readyAt) {
		return a.readyAt.Before(b.readyAt)
	}
	return a.headSeq < b.headSeq
}

func (h *waitingHeap) push(g *setQueue) {
	*h = append(*h, waitingItem{})
	h.place(len(*h)-1, waitingItem{readyAt: g.readyAt, headSeq: g.headSeq, g: g})
}

// remove takes out the group at i, and returns it.
func (h *waitingHeap) remove(i int) *setQueue {
	s := *h
	g, n := s[i].g, len(s)-1
	last := s[n]
	s[n] = waitingItem{}
	*h = s[:n]
	if i < n {
		h.place(i, last)
	}
	g.idx = -1
	return g
}

// place is readyHeap.place. The two heaps' remove and place are written
// twice, not once as generic code: a generic heap's type is a shape
// shared by its item types, which calls before through a dictionary,
// where this inlines it, on the path of every Push and pop.
func (h *waitingHeap) place(i int, it waitingItem) {
	s := *h
	j := i
	for j > 0 {
		p := (j - 1) / 2
		if !it.before(&s[p]) {
			break
		}
		s[j] = s[p]
		s[j].g.idx = j
		j = p
	}
	for j == i {
		c := 2*j + 1
		if c >= len(s) {
			break
		}
		if r := c + 1; r < len(s) && s[r].before(&s[c]) {
			c = r
		}
		if !s[c].before(&it) {
			break
		}
		s[j] = s[c]
		s[j].g.idx = j
		j, i = c, c
	}
	s[j] = it
	it.g.idx = j
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
