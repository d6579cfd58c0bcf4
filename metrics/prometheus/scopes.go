package throttleprom

// This file chooses the scopes that get a label of their own and keeps the
// figures of the others. It is the same in metrics/prometheus and
// metrics/otel but for the package clause and one comment: the two modules
// share no package, so that each depends only on its own metrics library.

import (
	"slices"
	"unicode/utf8"

	"github.com/crawlerkit/throttle"
)

// counters are a scope's counters in one array: requests, the responses
// by status class (Counts.Responses: transport errors first, then 1xx to
// 5xx) and backoff signals.
type counters [8]uint64

const (
	cRequests  = 0
	cResponses = 1 // + Counts.Responses' index
	cSignals   = 7
)

func countersOf(c *throttle.Counts) counters {
	var out counters
	out[cRequests] = c.Requests
	for i, n := range c.Responses {
		out[cResponses+i] = n
	}
	out[cSignals] = c.Signals
	return out
}

// snapshot is one collection's view of a manager: its Stats, the scopes
// named in it and the figures of the others. Its memory is reused from one
// collection to the next; it is not safe for concurrent use (its owner
// holds a lock through each collection).
type snapshot struct {
	st    throttle.Stats
	named []int // indexes in st.Scopes of the named scopes, busiest first

	// The others: gauges summed now, counters that only go up.
	otherInFlight, otherWaiting, otherConcurrency int
	otherCounts                                   counters

	// What the previous collection named and read, to keep otherCounts
	// monotonic: see take.
	started    bool
	prevTotals counters
	prev, next map[string]counters
}

// take reads m into s, naming at most limit scopes (none when limit <= 0).
//
// The counters of "other" only go up, as a counter must: a scope that
// is forgotten, or that is named now and was not before, must not lower
// them (a drop reads as a counter reset, and rate() would count all of
// "other" again). Stats.Totals is the sum of every scope's counts,
// forgotten scopes included, so it only goes up; between two collections
// "other" grows by what Totals grew, less what the scopes named in both
// grew. A scope named only now keeps its earlier counts in "other" and
// its series starts at its whole count; a scope no longer named adds to
// "other" only what it counts from now on.
func (s *snapshot) take(m *throttle.ThrottlingManager, limit int) {
	m.StatsInto(&s.st)
	st := &s.st
	s.selectNamed(limit)

	s.otherInFlight, s.otherWaiting, s.otherConcurrency = 0, 0, 0
	for i := range st.Scopes {
		ss := &st.Scopes[i]
		s.otherInFlight += ss.InFlight
		s.otherWaiting += ss.Waiting
		s.otherConcurrency += ss.Concurrency
	}
	for _, i := range s.named {
		ss := &st.Scopes[i]
		s.otherInFlight -= ss.InFlight
		s.otherWaiting -= ss.Waiting
		s.otherConcurrency -= ss.Concurrency
	}

	totals := countersOf(&st.Totals)
	if s.next == nil {
		s.prev, s.next = map[string]counters{}, map[string]counters{}
	}
	clear(s.next)
	var grew counters // what the scopes named now and before grew
	for _, i := range s.named {
		ss := &st.Scopes[i]
		c := countersOf(&ss.Counts)
		s.next[ss.Key] = c
		p, ok := s.prev[ss.Key]
		if !ok || !s.started {
			continue
		}
		for f := range c {
			if c[f] >= p[f] {
				grew[f] += c[f] - p[f]
			} else {
				grew[f] += c[f] // forgotten and made again: counts from 0
			}
		}
	}
	if !s.started {
		s.otherCounts = totals
		for _, i := range s.named {
			c := countersOf(&st.Scopes[i].Counts)
			for f := range c {
				s.otherCounts[f] = subFloor(s.otherCounts[f], c[f])
			}
		}
		s.started = true
	} else {
		for f := range totals {
			s.otherCounts[f] += subFloor(subFloor(totals[f], s.prevTotals[f]), grew[f])
		}
	}
	s.prevTotals = totals
	s.prev, s.next = s.next, s.prev
}

// subFloor is a-b, or 0 when b > a.
func subFloor(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// nameable reports whether a scope may have a label of its own: not one
// that reads as the scopes folded together, nor one that is not valid
// UTF-8 (Prometheus refuses such a label value).
func nameable(key string) bool {
	return key != OtherScope && utf8.ValidString(key)
}

// busier orders scopes for naming: more permits in flight, then more
// callers waiting, then more requests, then by key.
func busier(a, b *throttle.ScopeStats) bool {
	if a.InFlight != b.InFlight {
		return a.InFlight > b.InFlight
	}
	if a.Waiting != b.Waiting {
		return a.Waiting > b.Waiting
	}
	if a.Counts.Requests != b.Counts.Requests {
		return a.Counts.Requests > b.Counts.Requests
	}
	return a.Key < b.Key
}

// selectNamed sets s.named to the indexes of the limit busiest nameable
// scopes, busiest first: a partial selection through a heap of limit
// entries whose root is the least busy kept, O(n log limit).
func (s *snapshot) selectNamed(limit int) {
	sc := s.st.Scopes
	h := s.named[:0]
	if limit <= 0 {
		s.named = h
		return
	}
	less := func(i, j int) bool { return busier(&sc[h[j]], &sc[h[i]]) } // i is less busy than j
	for i := range sc {
		if !nameable(sc[i].Key) {
			continue
		}
		if len(h) < limit {
			h = append(h, i)
			for c := len(h) - 1; c > 0; { // sift up
				p := (c - 1) / 2
				if !less(c, p) {
					break
				}
				h[c], h[p] = h[p], h[c]
				c = p
			}
			continue
		}
		if !busier(&sc[i], &sc[h[0]]) {
			continue
		}
		h[0] = i
		for p := 0; ; { // sift down
			l, small := 2*p+1, p
			if l < len(h) && less(l, small) {
				small = l
			}
			if r := l + 1; r < len(h) && less(r, small) {
				small = r
			}
			if small == p {
				break
			}
			h[p], h[small] = h[small], h[p]
			p = small
		}
	}
	slices.SortFunc(h, func(a, b int) int {
		switch {
		case busier(&sc[a], &sc[b]):
			return -1
		case busier(&sc[b], &sc[a]):
			return 1
		}
		return 0
	})
	s.named = h
}
