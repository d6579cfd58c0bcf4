// This file holds what keeps a shard of the scope table under its share of
// Config.MaxScopes: the eviction order (a second-chance FIFO, the CLOCK
// algorithm), and the table of evicted scopes' next starts, which keeps a
// host re-seen after its eviction from being sent a request before its
// server gate or its delay gap ends.

package throttle

import (
	"hash/maphash"
	"math"
	"time"
)

// shardCap is the share of MaxScopes of the shard that holds the keys of
// hash h: the shares sum to MaxScopes, so the table holds at most MaxScopes
// scopes beyond those that cannot be evicted (see evict).
func (m *ThrottlingManager) shardCap(h uint64) int {
	n := m.shardCount()
	c := m.cfg.MaxScopes / int(n)
	if int(m.shardIndex(h)) < m.cfg.MaxScopes%int(n) {
		c++
	}
	return c
}

// eviction is a shard's state under MaxScopes, made when the shard first
// holds more than its share: until then a crawl pays nothing for the cap.
type eviction struct {
	ring    clockRing
	records evictedTimes
	// examined counts the scopes evict looked at, evicted those it
	// forgot: the work of the cap, which tests compare across table
	// sizes.
	examined, evicted uint64
}

// newEviction makes sh's eviction state, its ring holding sh's scopes in
// the map's order (sh locked). Their lastUsed is not read here, which
// would need their locks: each gets its second chance when first looked
// at.
func newEviction(sh *shard) *eviction {
	ev := &eviction{}
	ev.ring.buf = make([]clockEntry, max(len(sh.m), clockMinRoom))
	for _, s := range sh.m {
		ev.ring.push(clockEntry{s: s, used: math.MinInt64})
	}
	return ev
}

// evict forgets scopes of sh (locked) until it holds no more than its
// share of MaxScopes, never keep (the scope being created). It takes them
// from the front of the ring: a scope with permits or waiters, one locked
// at that instant (being admitted), or one used since it was last put at
// the back (its lastUsed moved) goes to the back instead, with a second
// chance; any other is forgotten, whatever its state: a server gate, a
// delay gap or a quota window still running is kept in the shard's
// evicted-record table (record), not in the scope. A scope looked at is
// evicted, or was used since it was last looked at, or is in use: so the
// scopes looked at per new scope are one, plus the uses of scopes since,
// plus the part's scopes in use, however many scopes the table holds. It
// stops after two turns of the ring, when every scope left is in use.
func (m *ThrottlingManager) evict(sh *shard, keep *scope, now time.Time, limit int) {
	ev := sh.ev
	if ev == nil {
		ev = newEviction(sh)
		sh.ev = ev
	}
	for turns := 2 * ev.ring.n; len(sh.m) > limit && turns > 0; turns-- {
		e, _ := ev.ring.pop()
		ev.examined++
		s := e.s
		if s.dead {
			continue
		}
		if s == keep || !s.mu.TryLock() {
			ev.ring.push(e)
			continue
		}
		if s.queue.n > 0 || s.counts.inFlight > 0 || s.lastUsed != e.used {
			e.used = s.lastUsed
			s.mu.Unlock()
			ev.ring.push(e)
			continue
		}
		m.record(ev, s, now, limit)
		sh.forget(s)
		ev.evicted++
		s.mu.Unlock()
	}
}

// record keeps, in ev's table, when s (locked, being evicted) would admit
// its next request: the time a request of cost 1 is told to wait for,
// when it waits for a time (a server gate, the delay gap after the last
// start, a slot delay, the end of a spent quota window). limit is the
// shard's share of MaxScopes, which sizes the table.
func (m *ThrottlingManager) record(ev *eviction, s *scope, now time.Time, limit int) {
	a := s.pol.admit(now, 1)
	if a.Reason == ReasonNone || !a.At.After(now) {
		return
	}
	ev.records.put(maphash.String(m.seed, s.key), a.At, a.Reason == ReasonGate, now, limit)
}

// restore holds s, new in sh (locked) and not yet shared, until the time
// the record of its key says, if its key was evicted with a wait pending:
// a server gate, or the gap after a previous start, as it was.
func (m *ThrottlingManager) restore(ev *eviction, s *scope, h uint64, now time.Time) {
	if at, gate, ok := ev.records.take(h, now); ok {
		s.pol.holdUntil(now, at, gate)
	}
}

// holdUntil makes a new scope's next start, at now, no earlier than at:
// a server gate when gate, else the gap after a previous start that ends
// at at, which the scope's rules then report as its delay. The previous
// start is put at now and the gap stretched to at (a start in the future
// would read as a clock that went back, see admission.State.Check).
func (s *defaultScope) holdUntil(now, at time.Time, gate bool) {
	if gate {
		s.adm.SetGate(at)
		return
	}
	s.adm.Started, s.adm.LastStart = true, now
	s.lim.Gap = at.Sub(now)
	if s.effDelay > 0 {
		s.jitter = float64(s.lim.Gap) / float64(s.effDelay) // what a refresh keeps
	}
}

// clockEntry is a scope in a shard's ring, with its lastUsed when it was
// put at the back: a different one now says it was used since.
type clockEntry struct {
	s    *scope
	used int64
}

// clockMinRoom is the smallest room of a ring.
const clockMinRoom = 16

// clockRing is a FIFO of a shard's scopes in a circular buffer that grows
// by doubling. The zero value is empty.
type clockRing struct {
	buf     []clockEntry
	head, n int
}

func (r *clockRing) push(e clockEntry) {
	if r.n == len(r.buf) {
		r.resize(max(2*len(r.buf), clockMinRoom))
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

func (r *clockRing) pop() (clockEntry, bool) {
	if r.n == 0 {
		return clockEntry{}, false
	}
	e := r.buf[r.head]
	r.buf[r.head] = clockEntry{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return e, true
}

// resize moves the entries to a buffer of room n >= r.n, in order.
func (r *clockRing) resize(n int) {
	buf := make([]clockEntry, n)
	for i := range r.n {
		buf[i] = r.buf[(r.head+i)%len(r.buf)]
	}
	r.buf, r.head = buf, 0
}

// compact drops the entries of forgotten scopes, keeping the order of the
// others, and gives room back when a quarter of it or less is used. The
// shard's sweep calls it after forgetting idle scopes: their entries would
// otherwise keep them in memory until the ring's front reached them.
func (r *clockRing) compact() {
	w := 0
	for i := range r.n {
		e := r.buf[(r.head+i)%len(r.buf)]
		if !e.s.dead {
			r.buf[(r.head+w)%len(r.buf)] = e
			w++
		}
	}
	for i := w; i < r.n; i++ {
		r.buf[(r.head+i)%len(r.buf)] = clockEntry{}
	}
	r.n = w
	if room := len(r.buf); room > clockMinRoom && r.n <= room/4 {
		r.resize(max(2*r.n, clockMinRoom))
	}
}

// evictedWays is how many records share a bucket of an evictedTimes: a
// record is lost only when this many others of its bucket are still
// pending, and a lookup reads one bucket (64 bytes, a cache line).
const evictedWays = 4

// evictedRecordsPerScope is how many records an evictedTimes holds per
// scope of its shard's share of MaxScopes.
const evictedRecordsPerScope = 4

// evictedTimes is a fixed-size table of the times evicted scopes may next
// start, keyed by the hash of their keys: buckets of evictedWays records
// of 16 bytes. A new record takes, in its key's bucket, the slot of the
// same key, else a free or expired one, else the one that ends first
// (that record is lost, and counted). So a record is kept until its time
// passes, unless evictedWays later-ending records of other keys come to
// its bucket meanwhile. The zero value is empty; its slots are made at the
// first record, for a shard's share of MaxScopes.
type evictedTimes struct {
	slots []evictedSlot
	base  time.Time // the records' times are offsets from it
	// lost counts the records replaced while still pending: hosts that
	// may be sent a request before their wait ends.
	lost uint64
}

// evictedSlot is one record: tag is the key's hash with bit 0 set (0: a
// free slot) and bit 1 saying the wait is a server gate; at is when the
// wait ends, as an offset from the table's base (exact whatever the
// clock's epoch).
type evictedSlot struct {
	tag uint64
	at  time.Duration
}

const (
	evictedUsed = 1 << 0
	evictedGate = 1 << 1
)

// bucket returns the records that key hash h may take.
func (t *evictedTimes) bucket(h uint64) []evictedSlot {
	// The shard was chosen by h modulo at most 64: the bucket by
	// the high half.
	i := int((h >> 32) % uint64(len(t.slots)/evictedWays))
	return t.slots[i*evictedWays : (i+1)*evictedWays]
}

// put records that the scope of key hash h may next start at at, held by
// a server gate when gate. limit is the shard's share of MaxScopes, which
// sizes the table when it is made.
func (t *evictedTimes) put(h uint64, at time.Time, gate bool, now time.Time, limit int) {
	if t.slots == nil {
		t.slots = make([]evictedSlot, evictedWays*max(1, limit*evictedRecordsPerScope/evictedWays))
		t.base = now
	}
	tag := h | evictedUsed
	if gate {
		tag |= evictedGate
	} else {
		tag &^= evictedGate
	}
	b, cur := t.bucket(h), now.Sub(t.base)
	victim, free := 0, false
	for i := range b {
		switch {
		case b[i].tag|evictedGate == tag|evictedGate:
			b[i] = evictedSlot{tag: tag, at: at.Sub(t.base)}
			return
		case free:
		case b[i].tag == 0 || b[i].at <= cur:
			victim, free = i, true
		case b[i].at < b[victim].at:
			victim = i
		}
	}
	if !free {
		t.lost++
	}
	b[victim] = evictedSlot{tag: tag, at: at.Sub(t.base)}
}

// take removes the record of key hash h, and returns it if its time is
// after now.
func (t *evictedTimes) take(h uint64, now time.Time) (at time.Time, gate, ok bool) {
	if t.slots == nil {
		return time.Time{}, false, false
	}
	b := t.bucket(h)
	for i := range b {
		if b[i].tag|evictedGate == h|evictedUsed|evictedGate {
			sl := b[i]
			b[i] = evictedSlot{}
			if sl.at <= now.Sub(t.base) {
				return time.Time{}, false, false
			}
			return t.base.Add(sl.at), sl.tag&evictedGate != 0, true
		}
	}
	return time.Time{}, false, false
}
