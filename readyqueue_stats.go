package throttle

// This file holds ReadyQueue.Stats: the backlog of a queue and the
// groups that hold most of it, for operators (the status page).

import (
	"slices"
	"time"
)

// QueueStats is a ReadyQueue at the moment of a Stats call. A plain value;
// its Top keys are shared with the queue: don't change them.
type QueueStats struct {
	At  time.Time
	Len int // requests held (ReadyQueue.Len)
	// Groups is the number of scope sets with requests (one per host with
	// HostScope); each is in one of four places:
	//   - Ready: its head may start now, or has not been asked yet;
	//   - Waiting: refused until a time (a delay, a gate, a quota window);
	//   - Parked: refused until a permit of one of its scopes is released
	//     (every slot taken, or callers blocked in Acquire ahead of it);
	//   - Robots: its head waits for its origin's robots.txt fetch.
	Groups, Ready, Waiting, Parked, Robots int
	// GlobalFull says the last attempt was refused by
	// Config.GlobalConcurrency alone, and nothing was released since:
	// nothing starts before a release.
	GlobalFull bool
	// Poppers is the number of callers blocked in Pop.
	Poppers int
	// NextAt is the soonest time a waiting group is asked again; zero
	// when none waits for a time.
	NextAt time.Time
	// Top are the groups that hold the most requests, the most first (then
	// by keys): at most the n given to Stats.
	Top []QueueGroupStats
}

// QueueGroupStats is one group of a ReadyQueue: the queued requests of
// one scope set.
type QueueGroupStats struct {
	Keys     []string // its scope keys, sorted (one with HostScope)
	Requests int      // requests held
	// State is where it is: "ready", "waiting", "parked" or "robots" (see
	// QueueStats.Groups).
	State string
	// ReadyAt is, for a waiting group (a parked one behind Acquire
	// callers too), when it is asked again; zero otherwise.
	ReadyAt time.Time
}

// Stats returns the queue's backlog, with the n groups that hold the most
// requests (n <= 0: none). It holds the queue's lock for one pass over its
// groups, as long as a Push or Pop waits for it: O(groups · log n).
func (q *ReadyQueue) Stats(n int) QueueStats {
	var st QueueStats
	q.StatsInto(&st, n)
	return st
}

// StatsInto is Stats reusing st's Top slice.
func (q *ReadyQueue) StatsInto(st *QueueStats, n int) {
	now := q.m.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	*st = QueueStats{At: now, Len: q.n, Top: st.Top[:0], GlobalFull: q.global,
		Groups: len(q.single) + len(q.multi)}
	for p := q.poppers.head; p != nil; p = p.next {
		st.Poppers++
	}
	if len(q.waiting) > 0 {
		st.NextAt = q.waiting[0].readyAt
	}
	// The top n by requests: a heap with the least kept at its root.
	worse := func(a, b *QueueGroupStats) bool {
		if a.Requests != b.Requests {
			return a.Requests < b.Requests
		}
		return slices.Compare(a.Keys, b.Keys) > 0
	}
	top := st.Top
	add := func(g *setQueue) {
		var state string
		switch g.state {
		case setReady:
			st.Ready++
			state = "ready"
		case setWaiting:
			st.Waiting++
			state = "waiting"
		case setParked:
			st.Parked++
			state = "parked"
		case setRobots:
			st.Robots++
			state = "robots"
		default:
			return
		}
		if n <= 0 {
			return
		}
		e := QueueGroupStats{Keys: g.keys, Requests: len(g.entries), State: state}
		if g.state != setReady && g.idx >= 0 { // in waiting: its time
			e.ReadyAt = g.readyAt
		}
		if len(top) < n {
			top = append(top, e)
			for i := len(top) - 1; i > 0; {
				p := (i - 1) / 2
				if !worse(&top[i], &top[p]) {
					break
				}
				top[i], top[p] = top[p], top[i]
				i = p
			}
			return
		}
		if !worse(&top[0], &e) {
			return
		}
		top[0] = e
		for i := 0; ; {
			w := i
			for _, c := range [2]int{2*i + 1, 2*i + 2} {
				if c < len(top) && worse(&top[c], &top[w]) {
					w = c
				}
			}
			if w == i {
				break
			}
			top[i], top[w] = top[w], top[i]
			i = w
		}
	}
	for _, g := range q.single {
		add(g)
	}
	for _, g := range q.multi {
		add(g)
	}
	slices.SortFunc(top, func(a, b QueueGroupStats) int {
		if a.Requests != b.Requests {
			return b.Requests - a.Requests
		}
		return slices.Compare(a.Keys, b.Keys)
	})
	st.Top = top
}
