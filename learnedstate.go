package throttle

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
	"github.com/crawlerkit/throttle/store"
)

// learnedState is what the default policy of a scope has learned: its
// AutoThrottle delay, its backoff episode and its rampup rate, with the
// window counters that drive them. It is what a Store shares between
// workers (as JSON) and what Export saves. What configure derives from the
// ScopeConfig (minStatus, the rampup ladder) is not part of it.
//
// Times are Unix nanoseconds (0: the zero time), so the encoding is small
// and exact; a Store's workers all use the store's time.
type learnedState struct {
	V    int            `json:"v"`
	Auto *learnedAuto   `json:"a,omitempty"`
	Back *learnedBack   `json:"b,omitempty"`
	Ramp *learnedRampup `json:"r,omitempty"`
}

// learnedVersion is the record's format. 2: rampup steers a rate (it
// stepped levels in 1); a record of another version is refused whole.
const learnedVersion = 2

type learnedAuto struct {
	Delay time.Duration `json:"d"`
	Seen  bool          `json:"s,omitempty"`
}

type learnedBack struct {
	Delay       time.Duration `json:"d,omitempty"`
	Concurrency int           `json:"c,omitempty"`
	Bad         time.Duration `json:"bad,omitempty"`
	HasBad      bool          `json:"hb,omitempty"`
	Safe        time.Duration `json:"safe,omitempty"`
	Base        time.Duration `json:"base,omitempty"`
	LastStep    int64         `json:"ls,omitempty"`
	Stepped     bool          `json:"st,omitempty"`
	Outage      bool          `json:"o,omitempty"`
	Outaged     bool          `json:"od,omitempty"`
	Settled     int           `json:"se,omitempty"`
	Win         int64         `json:"w,omitempty"`
	WinSignals  int           `json:"ws,omitempty"`
	WinOK       int           `json:"wo,omitempty"`
}

type learnedRampup struct {
	Rate       float64       `json:"r,omitempty"`
	Good       float64       `json:"g,omitempty"`
	Bad        float64       `json:"bad,omitempty"`
	Lat        time.Duration `json:"l,omitempty"`
	Changed    int64         `json:"ch,omitempty"`
	Settled    bool          `json:"se,omitempty"`
	Paused     bool          `json:"pa,omitempty"`
	PausedAt   int64         `json:"pt,omitempty"`
	NoOutage   bool          `json:"no,omitempty"`
	Dead       bool          `json:"de,omitempty"`
	Released   int64         `json:"re,omitempty"`
	Cycle      int64         `json:"cy,omitempty"`
	CycleOK    int           `json:"co,omitempty"`
	Run        int           `json:"ru,omitempty"`
	Dip        bool          `json:"dp,omitempty"`
	Stated     float64       `json:"sr,omitempty"`
	Memory     time.Duration `json:"me,omitempty"`
	Run429     bool          `json:"r4,omitempty"`
	Climb      float64       `json:"cl,omitempty"`
	Span       time.Duration `json:"sp,omitempty"`
	CycleLen   time.Duration `json:"cyl,omitempty"`
	Proven     float64       `json:"pr,omitempty"`
	RFirst     int64         `json:"rf,omitempty"`
	RLast      int64         `json:"rl,omitempty"`
	ROK        int           `json:"ro,omitempty"`
	RSig       int           `json:"rs,omitempty"`
	Win        int64         `json:"w,omitempty"`
	WinSignals int           `json:"ws,omitempty"`
	WinCur     int           `json:"wc,omitempty"`
	WinProbe   bool          `json:"wp,omitempty"`
	WinGated   bool          `json:"wg,omitempty"`
	WinGate    time.Duration `json:"wt,omitempty"`
	GateEnd    int64         `json:"ge,omitempty"`
	Skip       int           `json:"sk,omitempty"`
	Fails      int           `json:"fa,omitempty"`
	WinOK      int           `json:"wo,omitempty"`
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n)
}

// exportLearned returns the scope's learned state.
func (s *defaultScope) exportLearned() learnedState {
	st := learnedState{V: learnedVersion}
	if s.cfg.AutoThrottle.Enabled {
		st.Auto = &learnedAuto{Delay: s.auto.delay, Seen: s.auto.seen}
	}
	if b := &s.backoff; s.cfg.Backoff.Enabled {
		st.Back = &learnedBack{Delay: b.delay, Concurrency: b.concurrency, Bad: b.bad, HasBad: b.hasBad,
			Safe: b.safe, Base: b.base, LastStep: unixNano(b.lastStep), Stepped: b.stepped,
			Outage: b.outage, Outaged: b.outaged, Settled: b.settled,
			Win: unixNano(b.win), WinSignals: b.winSignals, WinOK: b.winOK}
		if !b.winSet {
			st.Back.Win = 0
		}
		if !b.learned() && !b.outage {
			// Outside an episode the window's counts decide nothing:
			// leaving them out keeps the record unchanged from one
			// response to the next, so a Store has nothing to write.
			st.Back.WinSignals, st.Back.WinOK = 0, 0
		}
	}
	if r := s.rampup; r != nil {
		st.Ramp = &learnedRampup{Rate: r.rate, Good: r.good, Bad: r.bad, Lat: r.lat, Changed: unixNano(r.changed),
			Settled: r.settled, Paused: r.paused, PausedAt: unixNano(r.pausedAt), NoOutage: r.noOutage, Dead: r.dead,
			Released: unixNano(r.released), Cycle: unixNano(r.cycle), CycleOK: r.cycleOK, Run: r.run, Dip: r.dip,
			Stated: r.stated, Memory: r.memory, Run429: r.run429, Climb: r.climb, Span: r.span,
			CycleLen: r.cycleLen, Proven: r.proven,
			RFirst: unixNano(r.rFirst), RLast: unixNano(r.rLast), ROK: r.rOK, RSig: r.rSig,
			Win: unixNano(r.win), WinSignals: r.winSignals, WinCur: r.winCur, WinProbe: r.winProbe, WinGated: r.winGated,
			WinGate: r.winGate, GateEnd: unixNano(r.gateEnd),
			Skip: r.skip, Fails: r.fails, WinOK: r.winOK}
		if !r.winSet {
			st.Ramp.Win = 0
		}
	}
	return st
}

// errLearned is wrapped by every error about learned state that can't be
// used.
var errLearned = errors.New("throttle: invalid learned state")

// check refuses values no policy could have produced, so a corrupt or
// hostile record can't set a negative delay or an absurd level.
func (st *learnedState) check() error {
	bad := func(what string) error { return fmt.Errorf("%w: %s", errLearned, what) }
	if st.V != learnedVersion {
		return fmt.Errorf("%w: version %d, want %d", errLearned, st.V, learnedVersion)
	}
	if a := st.Auto; a != nil && a.Delay < 0 {
		return bad("negative AutoThrottle delay")
	}
	if b := st.Back; b != nil {
		if b.Delay < 0 || b.Bad < 0 || b.Safe < 0 || b.Base < 0 || b.Concurrency < 0 || b.Settled < 0 || b.WinSignals < 0 || b.WinOK < 0 {
			return bad("negative backoff value")
		}
	}
	if r := st.Ramp; r != nil {
		for _, f := range []float64{r.Rate, r.Good, r.Bad, r.Climb, r.Stated, r.Proven} {
			if f < 0 || f > rampupMaxRate || math.IsNaN(f) {
				return bad("rampup rate out of range")
			}
		}
		if r.Lat < 0 || r.Run < 0 || r.ROK < 0 || r.RSig < 0 || r.WinSignals < 0 || r.WinOK < 0 ||
			r.CycleOK < 0 || r.WinCur < 0 || r.Skip < 0 || r.Fails < 0 {
			return bad("negative rampup value")
		}
	}
	return nil
}

// latest returns the latest time in st, in Unix nanoseconds (0: none).
func (st *learnedState) latest() int64 {
	var t int64
	if b := st.Back; b != nil {
		t = max(t, b.LastStep, b.Win)
	}
	if r := st.Ramp; r != nil {
		t = max(t, r.Changed, r.Win, r.PausedAt, r.Released, r.Cycle, r.RFirst, r.RLast)
	}
	return t
}

// importLearned replaces the scope's learned state with st's parts that
// its configuration uses, then reapplies the configuration's bounds.
func (s *defaultScope) importLearned(st *learnedState) error {
	if err := st.check(); err != nil {
		return err
	}
	if a := st.Auto; a != nil {
		s.auto = autoThrottle{delay: a.Delay, seen: a.Seen}
	}
	if b := st.Back; b != nil {
		s.backoff = backoff{minStatus: s.backoff.minStatus, delay: b.Delay, concurrency: b.Concurrency,
			bad: b.Bad, hasBad: b.HasBad, safe: b.Safe, base: b.Base, lastStep: fromUnixNano(b.LastStep),
			stepped: b.Stepped, outage: b.Outage, outaged: b.Outaged, settled: b.Settled,
			win: fromUnixNano(b.Win), winSet: b.Win != 0, winSignals: b.WinSignals, winOK: b.WinOK}
	}
	if r := st.Ramp; r != nil {
		s.rampup = &rampup{rate: r.Rate, good: r.Good, bad: r.Bad, lat: r.Lat, changed: fromUnixNano(r.Changed),
			settled: r.Settled, paused: r.Paused, pausedAt: fromUnixNano(r.PausedAt), noOutage: r.NoOutage, dead: r.Dead,
			released: fromUnixNano(r.Released), cycle: fromUnixNano(r.Cycle), cycleOK: r.CycleOK, run: min(r.Run, outageRun),
			dip: r.Dip, stated: r.Stated, memory: min(max(r.Memory, 0), rampupMaxMemory), run429: r.Run429, climb: r.Climb, span: max(r.Span, 0),
			cycleLen: max(r.CycleLen, 0), proven: r.Proven,
			rFirst: fromUnixNano(r.RFirst), rLast: fromUnixNano(r.RLast), rOK: r.ROK, rSig: r.RSig,
			win: fromUnixNano(r.Win), winSet: r.Win != 0, winSignals: r.WinSignals, winCur: r.WinCur, winProbe: r.WinProbe,
			winGated: r.WinGated, winGate: max(r.WinGate, 0), gateEnd: fromUnixNano(r.GateEnd), skip: min(r.Skip, rampupMaxSkip), fails: r.Fails, winOK: r.WinOK}
	}
	s.setConfig(s.cfg) // clamp to this scope's bounds, recompute the effective values
	return nil
}

// sharedPolicy is what a ScopeManager must offer for its scope to live in a
// Store: the limits to send with an admission, learning that reports what
// the store must apply, and learned state in and out. The default policy
// implements it.
type sharedPolicy interface {
	ScopeManager
	sharedLimits(now time.Time, sc *store.Scope)
	sharedLearn(now time.Time, t Ticket, fb *Feedback, out *store.ReleaseScope, first bool)
	sharedImport(data []byte) error
	sharedWhy(r Reason) Reason
	// version and setVersion: the store's version of the learned state
	// the policy holds (0: none yet).
	version() int64
	setVersion(v int64)
}

func (s *defaultScope) version() int64 {
	if s.shared == nil {
		return 0
	}
	return s.shared.version
}

func (s *defaultScope) setVersion(v int64) {
	if s.shared == nil {
		s.shared = &sharedRecord{}
	}
	s.shared.version = v
}

// sharedLimits fills sc with the scope's limits at now.
func (s *defaultScope) sharedLimits(now time.Time, sc *store.Scope) {
	s.tick(now)
	sc.Concurrency = s.concurrency()
	sc.Delay, _ = s.delay()
	sc.Jitter = s.drawJitter()
	if _, why := s.delay(); why == ReasonBackoff && sc.Delay > 0 {
		// As gap does locally: backoff's narrower jitter never brings a
		// start closer than the scope's own Delay*(1+Jitter.Min).
		own, _ := s.ownDelay()
		sc.Jitter = max(sc.Jitter, float64(admission.ScaleDuration(own, 1+s.cfg.Jitter.Min))/float64(sc.Delay))
	}
	sc.SlotDelay = s.cfg.SlotDelay
	if s.cfg.Quota > 0 {
		sc.Quota, sc.Window = s.cfg.Quota, s.cfg.Window
	}
	sc.MaxWait, sc.MaxConcurrency = s.sharedBounds(sc.Delay)
}

// sharedWhy refines a store's ReasonDelay into the part that set the delay.
func (s *defaultScope) sharedWhy(r Reason) Reason {
	if r == ReasonDelay {
		_, why := s.delay()
		return why
	}
	return r
}

// sharedLearn learns from fb like Finish, without the slot accounting the
// store does, and fills out with what the store must apply: on the first
// attempt the gate and quota corrections, and always the learned state.
func (s *defaultScope) sharedLearn(now time.Time, t Ticket, fb *Feedback, out *store.ReleaseScope, first bool) {
	s.tick(now)
	if first {
		out.QuotaFloor = -1
		if s.cfg.Quota > 0 {
			out.QuotaWindow = s.cfg.Window
			out.QuotaDelta, out.QuotaFloor = quotaCorrection(s.key, s.cfg.Quota, &t, fb)
		}
	}
	if gate, ok := s.learn(now, t, fb); ok && first {
		out.Gate = gate
	}
	st := s.exportLearned()
	d, _ := s.delay()
	c := s.concurrency()
	if r := s.shared; first && r != nil && st.same(&r.state) && d == r.delay && c == r.conc {
		return // nothing new: most releases (compared as values, not encoded to compare)
	}
	data, err := json.Marshal(st)
	if err != nil {
		return // cannot happen: plain values
	}
	out.Learned, out.Data, out.Delay, out.Concurrency = true, data, d, c
	s.shared = &sharedRecord{version: s.version(), data: data, state: st, delay: d, conc: c}
}

// sharedRecord is the learned state last sent to or received from a Store:
// a release that learned nothing new sends nothing.
type sharedRecord struct {
	version int64
	data    []byte
	state   learnedState // data decoded; V == 0 when unknown
	delay   time.Duration
	conc    int
}

// same tells whether two learned states hold the same values.
func (a *learnedState) same(b *learnedState) bool {
	return a.V == b.V && samePointee(a.Auto, b.Auto) && samePointee(a.Back, b.Back) && samePointee(a.Ramp, b.Ramp)
}

func samePointee[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// sharedImport replaces the learned state with a store's record.
func (s *defaultScope) sharedImport(data []byte) error {
	var st learnedState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("%w: %v", errLearned, err)
	}
	if err := s.importLearned(&st); err != nil {
		return err
	}
	// The store's effective delay and concurrency are the ones the last
	// release sent, which this record does not know: -1 makes the next
	// release send this scope's (a SetScopeConfig on another worker, or
	// this one, changes them without changing the learned state).
	s.shared = &sharedRecord{version: s.version(), data: data, state: st, delay: -1, conc: -1}
	return nil
}
