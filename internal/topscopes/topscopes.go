// Package topscopes chooses the scopes of a throttle.ThrottlingManager
// that get metrics of their own, and keeps the figures of the others,
// summed under Other, with counters that never go down.
//
// It is shared by the metrics modules, metrics/prometheus and
// metrics/otel: the internal rule is by import path, so those nested
// modules (github.com/crawlerkit/throttle/metrics/...) may import it, while
// each still depends only on its own metrics library.
package topscopes

import (
	"slices"
	"unicode/utf8"

	"github.com/crawlerkit/throttle"
)

// Other is the scope name of the figures summed over every scope that has
// no name of its own. A scope whose key is Other is never named: its
// series would read as the scopes folded together.
const Other = "other"

// Counters are a scope's counters in one array, indexed by Requests,
// Responses+i (i the index in Counts.Responses: transport errors first,
// then 1xx to 5xx) and Signals. The zero value is no counts. A plain
// value: copy it freely, but don't change it while another goroutine
// reads it.
type Counters [8]uint64

// The indexes in Counters.
const (
	Requests  = 0 // Counts.Requests
	Responses = 1 // Counts.Responses[0]; Responses+i is Counts.Responses[i]
	Signals   = 7 // Counts.Signals
)

// CountersOf returns c's counters as Counters. It only reads c, so it is
// safe for concurrent use as long as no goroutine changes c meanwhile.
func CountersOf(c *throttle.Counts) Counters {
	var out Counters
	out[Requests] = c.Requests
	for i, n := range c.Responses {
		out[Responses+i] = n
	}
	out[Signals] = c.Signals
	return out
}

// Snapshot is one collection's view of a manager: its Stats, the scopes
// named in it and the figures of the others. Take fills it; the other
// fields are for reading only, until the next Take.
//
// The zero value is ready to use: its first Take starts the counters of
// Other at what every scope not named counted so far. A Snapshot remembers
// what the previous Take named and read, and reuses its memory from one
// Take to the next, so keep one per exporter (per manager), not one per
// collection. It is not safe for concurrent use: its owner holds a lock
// through each Take and the reads that follow it.
type Snapshot struct {
	// Stats is the manager's snapshot, from ThrottlingManager.StatsInto.
	Stats throttle.Stats
	// Named are the indexes in Stats.Scopes of the named scopes, busiest
	// first: at most the limit given to Take, and never a scope whose
	// key is Other or is not valid UTF-8.
	Named []int

	// The figures of the scopes not named: gauges summed now, and
	// counters that only go up (see Take).
	OtherInFlight, OtherWaiting, OtherConcurrency int
	OtherCounts                                   Counters

	// What the previous Take named and read, to keep OtherCounts
	// monotonic.
	started    bool
	prevTotals Counters
	prev, next map[string]Counters
}

// Take reads m (ThrottlingManager.StatsInto) into s and names at most
// limit scopes (none when limit <= 0): the busiest by permits in flight,
// then callers waiting, then requests, then by key. A scope whose key is
// Other, or is not valid UTF-8, is never named: Prometheus refuses a label
// value that is not valid UTF-8, and OTLP, a protobuf, refuses such a
// string.
//
// The gauges of Other are the sums over the scopes not named now. Its
// counters only go up, as a counter must: a scope that is forgotten, or
// that is named now and was not before, does not lower them (a drop reads
// as a counter reset, and rate() would count all of Other again). A scope
// named only now leaves its earlier counts in OtherCounts, and its own
// series starts at its whole count; a scope no longer named adds to
// OtherCounts only what it counts from now on. So the named scopes'
// counters plus OtherCounts may add up to more than Stats.Totals.
func (s *Snapshot) Take(m *throttle.ThrottlingManager, limit int) {
	m.StatsInto(&s.Stats)
	s.update(limit)
}

// update names the scopes of s.Stats and sums the others, as Take says.
//
// Stats.Totals is the sum of every scope's counts, forgotten scopes
// included, so it only goes up; between two updates OtherCounts grows by
// what Totals grew, less what the scopes named in both grew.
func (s *Snapshot) update(limit int) {
	st := &s.Stats
	s.selectNamed(limit)

	s.OtherInFlight, s.OtherWaiting, s.OtherConcurrency = 0, 0, 0
	for i := range st.Scopes {
		ss := &st.Scopes[i]
		s.OtherInFlight += ss.InFlight
		s.OtherWaiting += ss.Waiting
		s.OtherConcurrency += ss.Concurrency
	}
	for _, i := range s.Named {
		ss := &st.Scopes[i]
		s.OtherInFlight -= ss.InFlight
		s.OtherWaiting -= ss.Waiting
		s.OtherConcurrency -= ss.Concurrency
	}

	totals := CountersOf(&st.Totals)
	if s.next == nil {
		s.prev, s.next = map[string]Counters{}, map[string]Counters{}
	}
	clear(s.next)
	var grew Counters // what the scopes named now and before grew
	for _, i := range s.Named {
		ss := &st.Scopes[i]
		c := CountersOf(&ss.Counts)
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
		s.OtherCounts = totals
		for _, i := range s.Named {
			c := CountersOf(&st.Scopes[i].Counts)
			for f := range c {
				s.OtherCounts[f] = subFloor(s.OtherCounts[f], c[f])
			}
		}
		s.started = true
	} else {
		for f := range totals {
			s.OtherCounts[f] += subFloor(subFloor(totals[f], s.prevTotals[f]), grew[f])
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

// nameable reports whether a scope may have a name of its own: not one
// that reads as the scopes folded together (Other), nor one whose key is
// not valid UTF-8, which neither exporter can send: Prometheus refuses a
// label value that is not valid UTF-8, and OTLP, a protobuf, refuses such
// a string.
func nameable(key string) bool {
	return key != Other && utf8.ValidString(key)
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

// selectNamed sets s.Named to the indexes of the limit busiest nameable
// scopes, busiest first: a partial selection through a heap of limit
// entries whose root is the least busy kept, O(n log limit).
func (s *Snapshot) selectNamed(limit int) {
	sc := s.Stats.Scopes
	h := s.Named[:0]
	if limit <= 0 {
		s.Named = h
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
	s.Named = h
}
