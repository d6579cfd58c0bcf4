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

// learnedVersion is the record's format. 3: rampup's pace controller
// (its rules at the top of rampup.go); a record of another version is
// refused whole.
const learnedVersion = 3

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
	Iso         bool          `json:"i,omitempty"`
	IsoOK       int           `json:"io,omitempty"`
	Probation   int64         `json:"pr,omitempty"`
}

type learnedRampup struct {
	Rate      float64       `json:"r,omitempty"`
	Good      float64       `json:"g,omitempty"`
	Bad       float64       `json:"bad,omitempty"`
	PrevG     float64       `json:"pg,omitempty"`
	PrevGAt   int64         `json:"qa,omitempty"`
	PrevGOK   int           `json:"qk,omitempty"`
	Best      float64       `json:"be,omitempty"`
	Held      float64       `json:"hf,omitempty"`
	GAt       int64         `json:"ga,omitempty"`
	GOK       int           `json:"gk,omitempty"`
	Measured  bool          `json:"mz,omitempty"`
	Lat       time.Duration `json:"l,omitempty"`
	LatMin    time.Duration `json:"lm,omitempty"`
	LatMinAt  int64         `json:"lma,omitempty"`
	Step      float64       `json:"st,omitempty"`
	Changed   int64         `json:"ch,omitempty"`
	Cut       int64         `json:"cu,omitempty"`
	OKCut     bool          `json:"oc,omitempty"`
	Reprove   time.Duration `json:"rv,omitempty"`
	Under     int64         `json:"un,omitempty"`
	Counts    bool          `json:"cn,omitempty"`
	Rise      int64         `json:"ri,omitempty"`
	Raised    bool          `json:"rd,omitempty"`
	RFirst    int64         `json:"rf,omitempty"`
	RLast     int64         `json:"rl,omitempty"`
	ROK       int           `json:"ro,omitempty"`
	RSig      int           `json:"rs,omitempty"`
	ProbeAt   int64         `json:"pa,omitempty"`
	Fails     int           `json:"fa,omitempty"`
	Memory    time.Duration `json:"me,omitempty"`
	Wait      time.Duration `json:"wa,omitempty"`
	Stated    float64       `json:"sr,omitempty"`
	HintAt    int64         `json:"ha,omitempty"`
	HintSeen  int64         `json:"hs,omitempty"`
	HintOK    int           `json:"hk,omitempty"`
	HintRem   int64         `json:"hw,omitempty"`
	Hint      float64       `json:"hi,omitempty"`
	Hinted    float64       `json:"hd,omitempty"`
	HintMem   time.Duration `json:"xw,omitempty"`
	HintLeft  int64         `json:"xl,omitempty"`
	Soft      bool          `json:"so,omitempty"`
	Windows   bool          `json:"wi,omitempty"`
	Drain     bool          `json:"dr,omitempty"`
	DrainAt   int64         `json:"da,omitempty"`
	Cost      int           `json:"co,omitempty"`
	Costing   bool          `json:"cg,omitempty"`
	Lost      time.Duration `json:"lt,omitempty"`
	Probe     bool          `json:"pb,omitempty"`
	ClimbLost time.Duration `json:"kl,omitempty"`
	ClimbFail bool          `json:"kf,omitempty"`
	LastNo    int64         `json:"ln,omitempty"`
	First     int64         `json:"fi,omitempty"`
	CycLo     float64       `json:"cl,omitempty"`
	CycHi     float64       `json:"cy,omitempty"`
	BRule5    bool          `json:"b5,omitempty"`
	CutAt     int64         `json:"ca,omitempty"`
	CutSpanAt int64         `json:"cs,omitempty"`
	CutSpanOK int           `json:"ck,omitempty"`
	AccAt     int64         `json:"aa,omitempty"`
	AccOK     int           `json:"ak,omitempty"`
	Run       int           `json:"ru,omitempty"`
	RunG      float64       `json:"rg,omitempty"`
	RunB      float64       `json:"rb,omitempty"`
	RunMem    time.Duration `json:"rm,omitempty"`
	RunAt     int64         `json:"ra,omitempty"`
	RunSlow   bool          `json:"rw,omitempty"`
	Paused    bool          `json:"ps,omitempty"`
	PausedAt  int64         `json:"pt,omitempty"`
	Resumed   int64         `json:"rz,omitempty"`
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
			Win: unixNano(b.winEnd.Add(-s.cfg.Window)), WinSignals: b.winSignals, WinOK: b.winOK,
			Iso: b.iso, IsoOK: int(b.isoOK), Probation: unixNano(b.probation)}
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
		st.Ramp = &learnedRampup{Rate: r.rate, Good: r.good, Bad: r.bad, PrevG: r.prevG, PrevGAt: unixNano(r.prevGAt), PrevGOK: r.prevGOK, Best: r.best, Held: r.held, GAt: unixNano(r.gAt), GOK: r.gOK, Measured: r.measured, Lat: r.lat, LatMin: r.latMin, LatMinAt: unixNano(r.latMinAt), Step: r.step, Changed: unixNano(r.changed), Cut: unixNano(r.cut), OKCut: r.okCut, Reprove: r.reprove, Under: unixNano(r.under), Counts: r.counts, Rise: unixNano(r.rise), Raised: r.raised, RFirst: unixNano(r.rFirst), RLast: unixNano(r.rLast), ROK: r.rOK, RSig: r.rSig, ProbeAt: unixNano(r.probeAt), Fails: r.fails, Memory: r.memory, Wait: r.wait, Stated: r.stated, HintAt: unixNano(r.hintAt), HintSeen: unixNano(r.hintSeen), HintOK: r.hintOK, HintRem: r.hintRem, Hint: r.hint, Hinted: r.hinted, HintMem: r.hintMem, HintLeft: r.hintLeft, Soft: r.soft, Windows: r.windows, Drain: r.drain, DrainAt: unixNano(r.drainAt), Cost: r.cost, Costing: r.costing, Lost: r.lost, Probe: r.probe, ClimbLost: r.climbLost, ClimbFail: r.climbFail, LastNo: unixNano(r.lastNo), First: unixNano(r.first), CycLo: r.cycLo, CycHi: r.cycHi, BRule5: r.bRule5, CutAt: unixNano(r.cutAt), CutSpanAt: unixNano(r.cutSpanAt), CutSpanOK: r.cutSpanOK, AccAt: unixNano(r.accAt), AccOK: r.accOK, Run: r.run, RunG: r.runG, RunB: r.runB, RunMem: r.runMem, RunAt: unixNano(r.runAt), RunSlow: r.runSlow, Paused: r.paused, PausedAt: unixNano(r.pausedAt), Resumed: unixNano(r.resumed)}
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
		if b.Delay < 0 || b.Bad < 0 || b.Safe < 0 || b.Base < 0 || b.Concurrency < 0 || b.Settled < 0 || b.WinSignals < 0 || b.WinOK < 0 || b.IsoOK < 0 {
			return bad("negative backoff value")
		}
	}
	if r := st.Ramp; r != nil {
		for _, f := range []float64{r.Rate, r.Good, r.Bad, r.PrevG, r.Best, r.Stated, r.Hint, r.Hinted, r.RunG, r.RunB, r.Held, r.CycLo, r.CycHi} {
			if f < 0 || f > rampupMaxRate || math.IsNaN(f) {
				return bad("rampup rate out of range")
			}
		}
		if r.Step < 0 || r.Step > rampupMaxStep || math.IsNaN(r.Step) {
			return bad("rampup step out of range")
		}
		if r.GOK < 0 || r.AccOK < 0 || r.Lat < 0 || r.Run < 0 || r.ROK < 0 || r.RSig < 0 || r.Fails < 0 || r.Cost < 0 ||
			r.Memory < 0 || r.Wait < 0 || r.RunMem < 0 || r.Reprove < 0 {
			return bad("negative rampup value")
		}
	}
	return nil
}

// latest returns the latest time in st, in Unix nanoseconds (0: none).
func (st *learnedState) latest() int64 {
	var t int64
	for _, p := range st.times() {
		t = max(t, *p)
	}
	return t
}

// shift moves every time in st back by d nanoseconds (0, the zero time,
// stays 0).
func (st *learnedState) shift(d int64) {
	for _, t := range st.times() {
		if *t != 0 {
			*t -= d
		}
	}
}

// times returns pointers to every time in st.
func (st *learnedState) times() []*int64 {
	var ts []*int64
	if b := st.Back; b != nil {
		ts = append(ts, &b.LastStep, &b.Win, &b.Probation)
	}
	if r := st.Ramp; r != nil {
		ts = append(ts, &r.Changed, &r.Cut, &r.CutAt, &r.CutSpanAt, &r.Rise, &r.GAt, &r.First, &r.AccAt, &r.ProbeAt, &r.PausedAt, &r.Resumed,
			&r.DrainAt, &r.RFirst, &r.RLast, &r.LastNo, &r.HintAt, &r.HintSeen, &r.RunAt, &r.Under, &r.LatMinAt, &r.PrevGAt)
	}
	return ts
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
			winSet: b.Win != 0, winSignals: b.WinSignals, winOK: b.WinOK,
			iso: b.Iso, isoOK: uint8(min(b.IsoOK, isolatedQuiet)), probation: fromUnixNano(b.Probation)}
		if b.Win != 0 {
			s.backoff.winEnd = fromUnixNano(b.Win).Add(s.cfg.Window)
		}
	}
	if r := st.Ramp; r != nil {
		// A latency above MaxDelay, the longest wait any policy sets,
		// would cap the rate below one start per MaxDelay for as many
		// responses as its average takes to come down.
		rr := &rampup{rate: r.Rate, good: r.Good, bad: r.Bad, prevG: r.PrevG, prevGAt: fromUnixNano(r.PrevGAt), prevGOK: r.PrevGOK, best: r.Best, held: r.Held, gAt: fromUnixNano(r.GAt), gOK: r.GOK, measured: r.Measured, lat: min(r.Lat, s.cfg.Backoff.MaxDelay), latMin: min(r.LatMin, s.cfg.Backoff.MaxDelay), latMinAt: fromUnixNano(r.LatMinAt), step: r.Step, changed: fromUnixNano(r.Changed), cut: fromUnixNano(r.Cut), okCut: r.OKCut, reprove: r.Reprove, under: fromUnixNano(r.Under), counts: r.Counts, rise: fromUnixNano(r.Rise), raised: r.Raised, rFirst: fromUnixNano(r.RFirst), rLast: fromUnixNano(r.RLast), rOK: r.ROK, rSig: r.RSig, probeAt: fromUnixNano(r.ProbeAt), fails: r.Fails, memory: r.Memory, wait: r.Wait, stated: r.Stated, hintAt: fromUnixNano(r.HintAt), hintSeen: fromUnixNano(r.HintSeen), hintOK: r.HintOK, hintRem: r.HintRem, hint: r.Hint, hinted: r.Hinted, hintMem: r.HintMem, hintLeft: r.HintLeft, soft: r.Soft, windows: r.Windows, drain: r.Drain, drainAt: fromUnixNano(r.DrainAt), cost: r.Cost, costing: r.Costing, lost: r.Lost, probe: r.Probe, climbLost: r.ClimbLost, climbFail: r.ClimbFail, lastNo: fromUnixNano(r.LastNo), first: fromUnixNano(r.First), cycLo: r.CycLo, cycHi: r.CycHi, bRule5: r.BRule5, cutAt: fromUnixNano(r.CutAt), cutSpanAt: fromUnixNano(r.CutSpanAt), cutSpanOK: r.CutSpanOK, accAt: fromUnixNano(r.AccAt), accOK: r.AccOK, run: r.Run, runG: r.RunG, runB: r.RunB, runMem: r.RunMem, runAt: fromUnixNano(r.RunAt), runSlow: r.RunSlow, paused: r.Paused, pausedAt: fromUnixNano(r.PausedAt), resumed: fromUnixNano(r.Resumed)}
		rr.bound()
		s.rampup = rr
	}
	s.setConfig(s.cfg) // clamp to this scope's bounds, recompute the effective values
	return nil
}

// version returns the store's version of the learned state the policy
// holds (0: none yet); setVersion sets it.
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
// It returns whether fb was a backoff signal for the scope.
func (s *defaultScope) sharedLearn(now time.Time, t Ticket, fb *Feedback, out *store.ReleaseScope, first bool) (signal bool) {
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
		return s.lastSignal // nothing new: most releases (compared as values, not encoded to compare)
	}
	data, err := json.Marshal(st)
	if err != nil {
		return s.lastSignal // cannot happen: plain values
	}
	out.Learned, out.Data, out.Delay, out.Concurrency = true, data, d, c
	s.shared = &sharedRecord{version: s.version(), data: data, state: st, delay: d, conc: c}
	return s.lastSignal
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
