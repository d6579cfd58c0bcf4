package throttle

// This file holds the series of the busiest scopes: for at most
// SeriesScopes scopes at a time, their 2xx responses and backoff signals
// over the last SeriesLen steps of SeriesStep, for Stats.Series (and the
// status page's charts), once RecordSeries is called. It follows
// releases through the seam (observers.go, afterRelease).
//
// Which scopes are charted is decided in bounded memory: the table counts
// the answers of the charted scopes and of seriesCandidates more, with
// the Space-Saving algorithm (Metwally, Agrawal and El Abbadi, 2005): a
// scope not counted yet takes the place of the candidate with the fewest
// answers, and inherits its count as its error, so a scope that answers
// more often than one in seriesCandidates stays counted; a newcomer
// takes that place only if it wins a draw (see seriesTable.least). The
// counted scopes are found by their key's hash in a small open-addressing
// index, so an answer costs the same with ten scopes or a million. The
// counts decay by an eighth every step (a half-life of about 52 s), so
// they follow recent answers. At each step the candidate with the
// highest lower bound (count less error) takes the place of the charted
// scope with the lowest count, when it is a quarter higher: the charts
// don't flap between scopes of about the same rate. While fewer than
// SeriesScopes scopes are charted, a scope is charted from its first
// answer.
//
// A charted scope has a ring of SeriesLen buckets. Its buckets are read
// from the scope's own counters (Counts.Responses[2], Counts.Signals),
// which its lock guards: at each of its releases the table reads them,
// and adds what changed since the last reading to the bucket of the
// answer's time (its request's start plus its latency; the table never
// goes back, so a late answer counts in the latest step seen). So the
// series counts exactly what Counts count, robots.txt fetches excluded,
// and a scope's policy alone says what a signal is. Any other scope costs
// nothing: no ring, no field in the scope.

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// The series' shape (Stats.Series).
const (
	// SeriesStep is the length of one bucket of a ScopeSeries.
	SeriesStep = 10 * time.Second
	// SeriesLen is the number of buckets of a ScopeSeries: 15 minutes.
	SeriesLen = 90
	// SeriesScopes is the most scopes charted at once.
	SeriesScopes = 12
)

// seriesCandidates is how many scopes the table counts beyond the charted
// ones, without a ring, to find the busiest.
const seriesCandidates = 36

// seriesUnit is one answer in the decayed counts: a count decays by an
// eighth a step (c -= c>>3), and the unit keeps that from stopping at 7.
const seriesUnit = 1 << 8

// SeriesBucket is one step of a ScopeSeries: the answers that came in it
// (an answer comes at its request's start plus its latency).
type SeriesBucket struct {
	OK      uint32 // 2xx responses (as Counts.Responses[2])
	Signals uint32 // backoff signals (as Counts.Signals): 429, 503, timeouts ...
}

// ScopeSeries is one busy scope's answers over the last SeriesLen steps
// of SeriesStep (15 minutes), oldest first. Stats.Series leaves out a
// charted scope with no answer in them. A plain value.
type ScopeSeries struct {
	Key string
	// Start is the start of Buckets[0]: bucket i holds the answers that
	// came in [Start + i·SeriesStep, Start + (i+1)·SeriesStep). The last
	// bucket holds Stats.At, so it is still filling.
	Start time.Time
	// Since is when the scope began to be charted: the buckets before it
	// are zero for want of data, not for want of answers.
	Since time.Time
	// Recent is the scope's answers per second (its rank among the
	// busiest), averaged with a half-life of about 52 s.
	Recent  float64
	Buckets [SeriesLen]SeriesBucket
}

// seriesTable is a manager's series: the charted scopes and the
// candidates, and the index that finds them by key. Guarded by mu; a
// scope's lock may be taken under mu, never mu under a scope's lock.
type seriesTable struct {
	on     atomic.Bool // RecordSeries was called
	mu     sync.Mutex
	bucket int64         // the latest step seen: Unix time / SeriesStep
	shown  []seriesSlot  // the charted scopes; at most SeriesScopes, allocated at the first answer
	cands  []seriesCount // at most seriesCandidates
	seed   maphash.Seed
	// least is the index of the candidate with the lowest count, -1 when
	// unknown. A newcomer takes its place only with probability
	// 1/(its count + 1) in answers (Ben Basat et al.'s randomized
	// admission, 2017): a busy scope comes again and soon wins, while
	// the many scopes that answer once in a while no longer push each
	// other out at every answer, each at the cost of a scan.
	least int
	rng   uint64 // draw's state
	// index holds, by linear probing from a key's hash, where each
	// counted scope is: i+1 for shown[i], -(i+1) for cands[i], 0 for
	// none. Less than half full, so a probe is short.
	index [seriesIndexSize]int8
}

// seriesIndexSize is the size of seriesTable.index: a power of two, more
// than twice SeriesScopes + seriesCandidates.
const seriesIndexSize = 128

// seriesCount is a scope's decayed count of answers, in seriesUnits, and
// Space-Saving's error: how much of count it may never have had.
type seriesCount struct {
	s          *scope
	hash       uint64 // of s.key, with the table's seed
	count, err uint64
}

// seriesSlot is a charted scope.
type seriesSlot struct {
	seriesCount
	since int64        // the step it was charted from
	head  int64        // the latest step written in ring
	seen  SeriesBucket // the scope's counters at the last reading
	ring  [SeriesLen]SeriesBucket
}

// RecordSeries starts recording Stats.Series: from then on, the manager
// counts the answers of its busiest scopes, at a cost to every Release
// (see BenchmarkStatsSeries) and in bounded memory (a ring of SeriesLen
// buckets for each of at most SeriesScopes scopes). Before it is called,
// Stats.Series is empty and releases pay nothing for it. The status page
// (package status) calls it when it is made. Safe to call any number of
// times, from any goroutine.
func (m *ThrottlingManager) RecordSeries() {
	if m.series.on.CompareAndSwap(false, true) {
		m.obs.subscribeReleased(rankSeries, m.recordSeries)
	}
}

// recordSeries counts the answer p got in each of its scopes, at the
// time it came: when p's request started, plus its latency. No clock is
// read: the start is in p.
func (m *ThrottlingManager) recordSeries(p *Permit, fb Feedback, _ hookEvents) {
	if p.robotsFetch {
		return // not in Counts either
	}
	at := p.acquired()
	if e := p.ext; e != nil && e.shared {
		at = e.local // p.acquired is the store's time
	}
	n := at.UnixNano()
	if fb.Latency > 0 && fb.Latency < SeriesLen*SeriesStep { // a custom Feedback's may be anything
		n += int64(fb.Latency)
	}
	t := &m.series
	t.mu.Lock()
	t.advance(seriesStep(n))
	for i := range p.scopes() {
		t.count(p.scopes()[i].s, &fb)
	}
	t.mu.Unlock()
}

// seriesStep is the step that holds the Unix time n (nanoseconds).
func seriesStep(n int64) int64 {
	q := n / int64(SeriesStep)
	if n%int64(SeriesStep) < 0 {
		q--
	}
	return q
}

// count counts one answer of s, whose Feedback was fb, in the current
// step.
func (t *seriesTable) count(s *scope, fb *Feedback) {
	if t.shown == nil {
		t.shown = make([]seriesSlot, 0, SeriesScopes)
		t.cands = make([]seriesCount, 0, seriesCandidates)
		t.seed = maphash.MakeSeed()
		t.rng = maphash.String(t.seed, "rng") | 1
		t.least = -1
	}
	h := maphash.String(t.seed, s.key)
	pos, code := t.find(s.key, h)
	switch {
	case code > 0:
		sl := &t.shown[code-1]
		sl.count += seriesUnit
		if sl.s != s { // forgotten for idleness and made again: charted on
			sl.s = s
			sl.seen = sl.rebase(fb)
		}
		sl.read(t.bucket)
	case code < 0:
		c := &t.cands[-code-1]
		c.count += seriesUnit
		c.s = s
		if int(-code-1) == t.least {
			t.least = -1 // no longer the least, maybe
		}
	case len(t.shown) < SeriesScopes:
		t.shown = append(t.shown, seriesSlot{})
		sl := &t.shown[len(t.shown)-1]
		sl.seriesCount = seriesCount{s: s, hash: h, count: seriesUnit}
		sl.since, sl.head = t.bucket, t.bucket
		sl.seen = sl.rebase(fb)
		sl.read(t.bucket)
		t.index[pos] = int8(len(t.shown))
	case len(t.cands) < seriesCandidates:
		t.cands = append(t.cands, seriesCount{s: s, hash: h, count: seriesUnit})
		t.index[pos] = -int8(len(t.cands))
	default:
		// Space-Saving: the newcomer takes the least counted place, if
		// it wins a draw (see seriesTable.least).
		least := t.leastCand()
		c := &t.cands[least]
		if t.draw()%(c.count+seriesUnit) >= seriesUnit {
			return
		}
		t.remove(t.at(c))
		*c = seriesCount{s: s, hash: h, count: c.count + seriesUnit, err: c.count}
		pos, _ = t.find(s.key, h) // the removal may have moved the free place
		t.index[pos] = -int8(least + 1)
		t.least = -1
	}
}

// leastCand returns the index of the candidate with the lowest count.
func (t *seriesTable) leastCand() int {
	if t.least < 0 {
		cs := t.cands
		least, lc := 0, cs[0].count
		for i := 1; i < len(cs); i++ {
			if c := cs[i].count; c < lc {
				least, lc = i, c
			}
		}
		t.least = least
	}
	return t.least
}

// draw returns a pseudo-random number (xorshift64*).
func (t *seriesTable) draw() uint64 {
	x := t.rng
	x ^= x >> 12
	x ^= x << 25
	x ^= x >> 27
	t.rng = x
	return x * 0x2545F4914F6CDD1D
}

// entry returns the counted scope an index code names.
func (t *seriesTable) entry(code int8) *seriesCount {
	if code > 0 {
		return &t.shown[code-1].seriesCount
	}
	return &t.cands[-code-1]
}

// find returns where key, of hash h, is in the index and its code, or
// the free place where it would go and 0.
func (t *seriesTable) find(key string, h uint64) (int, int8) {
	for i := int(h % seriesIndexSize); ; i = (i + 1) % seriesIndexSize {
		c := t.index[i]
		if c == 0 {
			return i, 0
		}
		if e := t.entry(c); e.hash == h && e.s.key == key {
			return i, c
		}
	}
}

// at returns the place of the counted scope e in the index.
func (t *seriesTable) at(e *seriesCount) int {
	i, _ := t.find(e.s.key, e.hash)
	return i
}

// remove empties the index's place i, moving back the entries after it
// that probing would no longer find (linear probing's deletion).
func (t *seriesTable) remove(i int) {
	t.index[i] = 0
	for j := (i + 1) % seriesIndexSize; t.index[j] != 0; j = (j + 1) % seriesIndexSize {
		home := int(t.entry(t.index[j]).hash % seriesIndexSize)
		// The entry at j stays unless its home is cyclically outside (i, j].
		if i <= j && (home <= i || home > j) || i > j && home <= i && home > j {
			t.index[i], t.index[j] = t.index[j], 0
			i = j
		}
	}
}

// rebase returns the scope's counters less the answer fb, which they
// already count (sl.s is charted from that answer on); the scope's
// policy said, at its release, whether fb was a signal. Charting from
// the first answer keeps the first answer.
func (sl *seriesSlot) rebase(fb *Feedback) SeriesBucket {
	s := sl.s
	s.mu.Lock()
	cur := s.seriesCounts()
	signal := s.signal
	s.mu.Unlock()
	base := cur
	if fb.Err == nil && fb.Status >= 200 && fb.Status < 300 && cur.OK > 0 {
		base.OK--
	}
	if signal && cur.Signals > 0 {
		base.Signals--
	}
	return base
}

// read adds what sl's scope counted since the last reading to the bucket
// of step.
func (sl *seriesSlot) read(step int64) {
	s := sl.s
	s.mu.Lock()
	cur := s.seriesCounts()
	s.mu.Unlock()
	d := SeriesBucket{OK: cur.OK - sl.seen.OK, Signals: cur.Signals - sl.seen.Signals}
	sl.seen = cur
	sl.roll(step)
	b := &sl.ring[seriesIndex(step)]
	b.OK += d.OK
	b.Signals += d.Signals
}

// roll moves sl's ring on to step, emptying the buckets it passes.
func (sl *seriesSlot) roll(step int64) {
	if step <= sl.head {
		return
	}
	if step-sl.head >= SeriesLen {
		sl.ring = [SeriesLen]SeriesBucket{}
	} else {
		for x := sl.head + 1; x <= step; x++ {
			sl.ring[seriesIndex(x)] = SeriesBucket{}
		}
	}
	sl.head = step
}

// seriesIndex is step's place in a ring.
func seriesIndex(step int64) int {
	i := step % SeriesLen
	if i < 0 {
		i += SeriesLen
	}
	return int(i)
}

// seriesCounts returns s's counters the series reads (s locked).
func (s *scope) seriesCounts() SeriesBucket {
	return SeriesBucket{OK: s.counts.responses[2], Signals: s.counts.signals}
}

// advance moves the table on to step: the counts decay an eighth per step
// passed, and the candidates that outgrew charted scopes take their
// places. A step before the table's (a Clock gone back) counts as the
// table's.
func (t *seriesTable) advance(step int64) {
	if step <= t.bucket {
		return
	}
	passed := step - t.bucket
	t.bucket = step
	if len(t.shown) == 0 {
		return
	}
	decay := func(c *seriesCount) {
		for range min(passed, 64) { // (7/8)^64 of any count is < 2^-12 of it: gone
			c.count -= c.count >> 3
			c.err -= c.err >> 3
		}
		if c.count < seriesUnit/8 {
			c.count, c.err = 0, 0
		}
	}
	for i := range t.shown {
		decay(&t.shown[i].seriesCount)
	}
	for i := range t.cands {
		decay(&t.cands[i])
	}
	for range SeriesScopes {
		if !t.promote(step) {
			break
		}
	}
}

// promote charts the candidate with the highest lower bound in place of
// the charted scope with the lowest count, when it is a quarter higher;
// the charted scope becomes a candidate with its count. It reports
// whether it did.
func (t *seriesTable) promote(step int64) bool {
	best := -1
	for i := range t.cands {
		if c := &t.cands[i]; c.count-c.err >= seriesUnit && (best < 0 || c.count-c.err > t.cands[best].count-t.cands[best].err) {
			best = i
		}
	}
	if best < 0 {
		return false
	}
	worst := 0
	for i := range t.shown {
		if t.shown[i].count < t.shown[worst].count {
			worst = i
		}
	}
	c, sl := t.cands[best], &t.shown[worst]
	if c.count-c.err <= sl.count+sl.count/4 {
		return false
	}
	t.least = -1
	cpos, spos := t.at(&t.cands[best]), t.at(&sl.seriesCount)
	t.cands[best] = sl.seriesCount
	t.cands[best].err = 0
	*sl = seriesSlot{seriesCount: c, since: step, head: step}
	t.index[cpos], t.index[spos] = int8(worst+1), -int8(best+1)
	c.s.mu.Lock()
	sl.seen = c.s.seriesCounts()
	c.s.mu.Unlock()
	return true
}

// snapshot writes the charted scopes' series at now into dst, busiest
// first, reusing its memory.
func (t *seriesTable) snapshot(dst []ScopeSeries, now time.Time) []ScopeSeries {
	dst = dst[:0]
	step := seriesStep(now.UnixNano())
	t.mu.Lock()
	defer t.mu.Unlock()
	t.advance(step)
	step = t.bucket // a Clock gone back: the table's step
	order := make([]int, 0, SeriesScopes)
	for i := range t.shown {
		j := len(order)
		order = append(order, i)
		for ; j > 0 && t.shown[order[j-1]].count < t.shown[i].count; j-- {
			order[j] = order[j-1]
		}
		order[j] = i
	}
	first := step - (SeriesLen - 1)
	for _, i := range order {
		sl := &t.shown[i]
		sl.roll(step)
		dst = append(dst, ScopeSeries{})
		out := &dst[len(dst)-1]
		var some bool
		for k := range SeriesLen {
			if x := first + int64(k); x >= sl.since {
				out.Buckets[k] = sl.ring[seriesIndex(x)]
				some = some || out.Buckets[k] != SeriesBucket{}
			}
		}
		if !some {
			dst = dst[:len(dst)-1] // no answer since charted, in 15 minutes: nothing to show
			continue
		}
		out.Key = sl.s.key
		out.Start = seriesTime(first, now)
		out.Since = seriesTime(max(sl.since, first), now)
		out.Recent = float64(sl.count-sl.err) / seriesUnit / 8 / SeriesStep.Seconds()
	}
	return dst
}

// seriesTime is the start of step, in now's location.
func seriesTime(step int64, now time.Time) time.Time {
	return time.Unix(step*int64(SeriesStep/time.Second), 0).In(now.Location())
}
