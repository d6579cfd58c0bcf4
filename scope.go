package throttle

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
)

// A ScopeManager is the policy of one scope: a state machine that decides
// when the scope admits a request and learns from feedback. Every method is
// given the time; none reads a clock, sleeps or locks. The ThrottlingManager
// serialises calls to one ScopeManager, so implementations need no locking.
//
// A custom ScopeManager may wrap the default one (NewDefaultScopeManager)
// and change what it answers. The manager treats any ScopeManager of a
// type other than the default's as opaque, and gives it:
//
//   - Politeness: a scope not configured explicitly keeps the robots.txt
//     Crawl-delay of its host, and a key evicted under MaxScopes with a
//     wait pending keeps that wait; the manager holds starts back for
//     both in front of Admit.
//   - A guard: a panic in a method leaves no lock held and no slot taken,
//     and reaches the caller as a *ScopeManagerPanic.
//   - Stats: the counts, InFlight, Waiting, Reason and ReadyAt. The
//     default policy's fields (Concurrency, Delay, backoff, rampup) and
//     Pace are zero: unknown. Signals counts the Feedbacks its Finish
//     leaves with Backoff set for the scope.
//   - Hooks: Admitted and Released; no DelayChanged, Backoff or GateSet,
//     which report the default policy's changes.
//   - Export and Import: nothing; its learned state is its own.
//   - A Store: none. New refuses Config.Store with a custom ScopeManager,
//     since the store enforces limits the manager cannot state.
//
// Finish gets a Feedback of its own, on the heap; what it changes reaches
// the request's later scopes (sorted by key).
//
// A ScopeManagerFactory must not return nil: Acquire would panic with a
// *ScopeManagerPanic.
type ScopeManager interface {
	// Admit tells when a request of the given cost may start. An Admission
	// with Reason ReasonNone admits it now; one with a non-zero At is the
	// earliest time worth asking again; one with a zero At waits for a
	// Release (a free slot, a quota correction).
	Admit(now time.Time, cost int64) Admission
	// Start records a start at now that Admit allowed, and returns what
	// Finish needs to undo it.
	Start(now time.Time, cost int64) Ticket
	// Finish gives a started request's slot back and learns from fb.
	// The scope's key is the one given to the factory; fb.BackoffScopes
	// and fb.Quota may name other scopes of the same request.
	Finish(now time.Time, t Ticket, fb *Feedback)
	// SetConfig replaces the scope's configuration at run time; learned
	// state is kept where it still makes sense.
	SetConfig(now time.Time, cfg ScopeConfig)
	// Idle tells whether the scope can be forgotten at now.
	Idle(now time.Time) Idleness
}

// Admission is a ScopeManager's answer to "may a request start now?". The
// zero Admission admits the request now. A plain value: copy it freely, but
// don't change it while another goroutine reads it.
type Admission struct {
	// At is the earliest time worth asking again; zero when unknown.
	At time.Time
	// Reason is why the request waits; ReasonNone admits it.
	Reason Reason
}

// Ticket is what a ScopeManager gives at Start and gets back at Finish. The
// manager gives Finish the Ticket that Start returned, so a zero Ticket
// reaches a ScopeManager only if its Start made one. A plain value: copy it
// freely, but don't change it while another goroutine reads it.
type Ticket struct {
	Slot        int       // the slot the request holds
	Cost        int64     // the cost counted at admission
	WindowIndex int64     // which quota window the cost was counted in (0 from the scope's first start)
	Start       time.Time // when the request started
}

// Idleness tells whether a scope holds anything worth keeping. The zero
// value is Busy.
type Idleness uint8

const (
	// Busy: permits held, or a start time, gate or window still pending.
	Busy Idleness = iota
	// IdleLearned: nothing pending, but learned state (a raised delay, a
	// backoff or rampup rate): kept for Config.LearnedIdleTimeout.
	IdleLearned
	// IdleEmpty: nothing at all: kept for Config.IdleTimeout.
	IdleEmpty
)

// Reason says why a request waits. The zero value is ReasonNone. String
// returns it in words, e.g. "slot delay". (It is declared once for the
// module, in internal/admission; store.Reason is the same type, so a
// Store's reasons are the manager's as they are.)
type Reason = admission.Reason

// The reasons a request waits, from the scope's policy or the manager.
const (
	ReasonNone         = admission.None         // it may start now
	ReasonConcurrency  = admission.Concurrency  // every slot of the scope is taken
	ReasonDelay        = admission.Delay        // the scope's delay since its last start
	ReasonSlotDelay    = admission.SlotDelay    // the free slots' delay since their last start
	ReasonGate         = admission.Gate         // a server-given wait (Retry-After, RateLimit)
	ReasonQuota        = admission.Quota        // the window's quota is spent
	ReasonRobots       = admission.Robots       // robots.txt Crawl-delay or Request-rate
	ReasonBackoff      = admission.Backoff      // the delay raised by backoff signals
	ReasonGlobal       = admission.Global       // Config.GlobalConcurrency is reached
	ReasonQueue        = admission.Queue        // earlier callers wait for the same scope
	ReasonRampup       = admission.Rampup       // rampup's rate: the fastest it has proven, or is probing
	ReasonAutoThrottle = admission.AutoThrottle // AutoThrottle's delay: latency / TargetConcurrency
)

// ScopeParams is what a ScopeManagerFactory gets for one scope. The manager
// always fills Key, Config, Logger and GlobalConcurrency; from a zero
// ScopeParams, NewDefaultScopeManager makes a scope with Concurrency 0,
// which admits nothing. A plain value, but copies share Rand, which is not
// safe for concurrent use.
type ScopeParams struct {
	Key    string      // the scope key
	Config ScopeConfig // validated configuration
	// Explicit reports whether Config came from Config.Scopes or
	// Config.ScopeConfigFunc rather than Config.Default.
	Explicit bool
	// Rand is the scope's random source when Config.JitterSeed is set;
	// nil means math/rand/v2's global source.
	Rand *rand.Rand
	// Logger is the manager's logger.
	Logger *slog.Logger
	// GlobalConcurrency is the manager's cap, the default cap of rampup.
	GlobalConcurrency int
}

// A ScopeManagerFactory makes the ScopeManager of one scope. Callers that
// see a new scope at once may each call it for the same key: the manager
// keeps one of the ScopeManagers and drops the others unused. It may be
// called from several goroutines at once, for one key or several.
// Config.NewScopeManager nil means NewDefaultScopeManager;
// ScopeConfig.NewManager nil means Config.NewScopeManager.
type ScopeManagerFactory func(p ScopeParams) ScopeManager

// NewDefaultScopeManager returns the default policy: slots, delay, slot
// delay, jitter, quota, server gates, AutoThrottle, backoff and rampup.
//
// How the parts combine (the Pace type says it whole): the delay between
// starts is the largest of the configured Delay (or, with rampup on,
// 1/rampup's rate, which replaces it), the robots.txt delay, the
// AutoThrottle delay and the backoff delay; the concurrency is the
// configured one (or the slots rampup's rate needs), 1 under a robots.txt
// delay, and backoff's reduced one when lower. Server gates (Retry-After
// and friends) are separate clocks that hold every start until they pass.
// Jitter is drawn once per start, from Backoff.Jitter while the backoff
// delay is the largest, else from Jitter; with rampup on, it never
// shortens a gap and lengthens it by 2 % at most.
func NewDefaultScopeManager(p ScopeParams) ScopeManager {
	s := &defaultScope{key: p.Key, rng: p.Rand, log: p.Logger, globalCap: p.GlobalConcurrency}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.setConfig(p.Config)
	return s
}

// defaultScope is the default ScopeManager.
//
// Its fields are ordered for a scope not in cache (a crawl over many
// hosts). It is allocated in the 704-byte size class, whose objects start
// on a cache line, after the allocator's 8-byte header (a size over 512
// bytes, with pointers). What an admission and a release read when no
// episode runs then lies in six lines: two of cfg (Quota to
// Backoff.Enabled; Rampup.Enabled), lim to plainGap, adm's first,
// backoff's first, and rampup with quota's first. Keep them so
// (TestScopeLayout).
type defaultScope struct {
	key string
	rng *rand.Rand
	cfg ScopeConfig

	// effective values, recomputed by refresh when a part changes: the
	// limits admission reads (the concurrency, the gap after the
	// previous start, the rule that set the delay, the slot delay), and
	// the delay
	lim      admission.Limits
	effDelay time.Duration
	jitter   float64 // factor drawn at the previous start
	// lastSignal says the last response learned from was a backoff
	// signal; backoffJitter that the previous start drew its jitter from
	// Backoff.Jitter (see gap).
	lastSignal    bool
	backoffJitter bool
	// robotsStart says the previous start was a robots.txt fetch whose gap
	// is still zero, until setRobotsDelay says what robots.txt asks (see
	// startRobots).
	robotsStart bool
	// plainGap says the gap after a start is the delay itself: no jitter
	// to draw (jitterRange is empty, the delay not backoff's, whose gap
	// has a floor of its own) and no robots.txt floor. refresh keeps it;
	// startLatest reads it.
	plainGap bool

	adm admission.State

	// learned state, one part a file
	backoff     backoff
	rampup      *rampup // nil while rampup is off: most scopes never use it
	quota       spentQuota
	robotsDelay time.Duration // robots.txt delay (0: none)
	auto        autoThrottle

	log       *slog.Logger
	globalCap int
	shared    *sharedRecord // with a Store: the learned state it holds; nil without
}

func (s *defaultScope) setConfig(cfg ScopeConfig) {
	oldWindow := s.cfg.Window
	s.cfg = cfg
	s.lim.SlotDelay = cfg.SlotDelay
	s.auto.configure(&s.cfg)
	s.backoff.configure(&s.cfg, oldWindow)
	switch {
	case !cfg.Rampup.Enabled:
		s.rampup = nil
	case s.rampup == nil:
		s.rampup = &rampup{}
	default:
		s.rampup.configure(&s.cfg, s.globalCap)
	}
	s.refresh()
}

// SetConfig implements ScopeManager.
func (s *defaultScope) SetConfig(now time.Time, cfg ScopeConfig) { s.reconfigure(now, cfg) }

// reconfigure is SetConfig for the coordinator (policy.go).
func (s *defaultScope) reconfigure(now time.Time, cfg ScopeConfig) {
	s.tick(now)
	s.setConfig(cfg)
	if s.shared != nil {
		s.shared.conc = -1 // the next release sends the new limits to the store
	}
}

// setRobotsDelay sets the delay robots.txt asks for; 0 removes it. Called
// after a robots.txt fetch of the scope (see startRobots), a delay makes
// that fetch a start for it: the next request waits the delay after the
// fetch started, as a Crawl-delay asks.
func (s *defaultScope) setRobotsDelay(d time.Duration) {
	s.robotsDelay = d
	s.refresh()
	if d > 0 && !s.cfg.IgnoreRobotsTxt {
		s.robotsCounts()
	}
	s.robotsStart = false
}

// startRobots is start for the manager's robots.txt fetch: it takes a slot
// and counts in the quota window, but it is no start for the delay or the
// slot delay, so the first page of an origin need not wait a whole Delay
// behind its robots.txt. The fetch's start is recorded as the previous
// start with a gap of zero after it (a jitter factor of 0), which keeps
// its time for robotsCounts: it becomes a start for the delay, the gap
// drawn as after any start, when its answer is a backoff signal
// (finishRobots), when the scope is in backoff after it (learn draws the
// gap of a backoff delay) or when robots.txt asks for a delay
// (setRobotsDelay). A
// robots.txt fetch is admitted like any request, so it starts only once
// the gap after the previous start has passed: moving the previous start
// to it with no gap after it holds no later request back. A fetch again
// after TTL, of a site that asked for a delay before, is the one
// exception: the gap after it is that delay at least, a floor under every
// gap of the scope.
//
// Under rampup the fetch is a start for the delay from the outset:
// rampup paces at the server's limit, and the limiter counts the fetch
// as any request. With the first page right behind it, an nginx without
// burst refused that page, and the refusal was taken for the limit's
// answer to the configured pace.
func (s *defaultScope) startRobots(t *Ticket, now time.Time, cost int64) {
	now, raised := s.adm.LatestRaised(now) // as in Admit
	t.Slot, t.WindowIndex = s.adm.StartUncountedLatest(now, raised, &s.lim, s.cfg.Quota, s.cfg.Window, cost)
	t.Cost, t.Start = cost, now
	s.adm.Started, s.adm.LastStart = true, now
	s.jitter, s.backoffJitter, s.robotsStart = 0, false, true
	s.lim.Gap = s.robotsFloor() // 0 unless robots.txt asked a delay before (a fetch again after TTL)
	if s.rampup != nil {
		s.robotsCounts()
	}
}

// finishRobots is Finish for the manager's robots.txt fetch: it learns
// from the answer as from any, and a backoff signal (a 429, a 503 ...)
// makes the fetch a start for the delay, so the raised delay holds the
// next request back from the fetch's start.
func (s *defaultScope) finishRobots(now time.Time, t Ticket, fb *Feedback) {
	s.finishRobotsIn(now, &t, fb)
}

// finishRobotsIn is finishRobots with the Ticket by pointer.
func (s *defaultScope) finishRobotsIn(now time.Time, t *Ticket, fb *Feedback) {
	s.finish(now, t, fb)
	if s.lastSignal {
		s.robotsCounts()
	}
}

// robotsCounts makes the robots.txt fetch that started last, if no request
// started since, a start for the delay: it draws the jitter of the gap
// after it, as start does.
func (s *defaultScope) robotsCounts() {
	if !s.robotsStart {
		return
	}
	s.robotsStart = false
	s.jitter = s.drawJitter()
	s.backoffJitter = s.lim.GapWhy == ReasonBackoff
	s.lim.Gap = s.gap(s.effDelay)
}

// tick rolls the windows of the learned parts forward to now.
func (s *defaultScope) tick(now time.Time) {
	if s.backoff.quiet(now, &s.cfg) {
		// Nearly every call, twice per request: inside the window,
		// where the tick would do nothing, without calling it (and
		// baseDelay). (admit and finish make this test themselves and
		// call tickWindow: quiet inlines, tick does not.)
		return
	}
	s.tickWindow(now)
}

// tickWindow is tick past its quiet test.
func (s *defaultScope) tickWindow(now time.Time) {
	own, _ := s.ownDelay()
	if s.backoff.tick(now, &s.cfg, s.baseDelay(), own) {
		s.refresh()
	}
}

// refresh recomputes the effective delay and concurrency after a change,
// so the hot path reads them instead of combining the parts each time.
func (s *defaultScope) refresh() {
	var why Reason
	s.effDelay, why = s.combineDelay()
	s.lim.GapWhy = why
	s.lim.Conc = int32(min(s.combineConcurrency(), math.MaxInt32))
	s.lim.Gap = s.gap(s.effDelay)
	s.plainGap = why != ReasonBackoff && s.jitterRange(why) == (Jitter{}) && s.robotsFloor() == 0
}

// baseDelay is the delay before robots.txt, AutoThrottle and backoff.
func (s *defaultScope) baseDelay() time.Duration {
	if d, ok := s.rampup.delay(&s.cfg); ok {
		return d
	}
	return s.cfg.Delay
}

// delay returns the delay between starts now, and which part set it.
func (s *defaultScope) delay() (time.Duration, Reason) { return s.effDelay, s.lim.GapWhy }

// concurrency returns how many permits the scope admits at once now.
func (s *defaultScope) concurrency() int { return int(s.lim.Conc) }

func (s *defaultScope) combineDelay() (time.Duration, Reason) {
	d, why := s.ownDelay()
	if b := s.backoff.delay; b > d {
		d, why = b, ReasonBackoff
	}
	return d, why
}

// ownDelay is the delay without backoff: configured (or rampup's),
// robots.txt's or AutoThrottle's, whichever is largest.
func (s *defaultScope) ownDelay() (time.Duration, Reason) {
	d, why := s.cfg.Delay, ReasonDelay
	if rd, ok := s.rampup.delay(&s.cfg); ok {
		d, why = rd, ReasonRampup
	}
	if s.robotsDelay > d && !s.cfg.IgnoreRobotsTxt {
		d, why = s.robotsDelay, ReasonRobots
	}
	if a := s.auto.current(&s.cfg); a > d {
		d, why = a, ReasonAutoThrottle
	}
	return d, why
}

// gap is the least time from the previous start to the next one, with d
// the delay in effect: d times the jitter drawn at the previous start,
// within backoff's bounds when that jitter came from Backoff.Jitter
// (backoff.gapFloor). Without them a backoff delay settled just above the
// configured one (1.03 s for Delay 1 s with Jitter off), or the first
// start after backoff ended, could follow the previous start by less than
// Delay (found by TestStressInvariants; see
// TestBackoffJitterNeverBelowDelay).
//
// A robots.txt delay is a floor under the gap whatever the jitter drew:
// a site's stated delay is a minimum, jitter only lengthens it.
func (s *defaultScope) gap(d time.Duration) time.Duration {
	g := admission.ScaleDuration(d, s.jitter)
	if s.backoffJitter {
		own, _ := s.ownDelay()
		g = s.backoff.gapFloor(&s.cfg, g, d, own)
	}
	return max(g, s.robotsFloor())
}

// robotsFloor is the robots.txt delay in effect (0: none), the least gap
// between two starts of the scope.
func (s *defaultScope) robotsFloor() time.Duration {
	if s.cfg.IgnoreRobotsTxt {
		return 0
	}
	return s.robotsDelay
}

func (s *defaultScope) combineConcurrency() int {
	c := s.cfg.Concurrency
	if rc, ok := s.rampup.concurrency(&s.cfg, s.globalCap); ok {
		c = rc
	}
	if s.robotsDelay > 0 && !s.cfg.IgnoreRobotsTxt {
		c = 1
	}
	if b := s.backoff.concurrency; b > 0 && b < c {
		c = b
	}
	return c
}

// Admit implements ScopeManager.
func (s *defaultScope) Admit(now time.Time, cost int64) Admission { return s.admit(now, cost) }

// admit is Admit for the coordinator (policy.go).
func (s *defaultScope) admit(now time.Time, cost int64) Admission {
	a, _, _ := s.admitLatest(now, cost)
	return a
}

// admitLatest is admit, and also returns the time a start that follows it
// at once, at the same now, takes (Latest's), when same says that time is
// known: the admission changed nothing that time depends on (no rebase,
// no quota window rolled). startLatest then starts at it.
func (s *defaultScope) admitLatest(now time.Time, cost int64) (a Admission, latest time.Time, same bool) {
	now, raised := s.adm.LatestRaised(now) // the manager's clock never goes back: an earlier now is a stale reading
	if !s.backoff.quiet(now, &s.cfg) {     // tick, inlined; backoff's: no change to s.adm
		s.tickWindow(now)
	}
	at, why := s.adm.CheckLatest(now, raised, &s.lim, s.cfg.Quota, s.cfg.Window, cost)
	same = !raised && s.cfg.Quota <= 0
	if why == admission.None {
		return Admission{}, now, same
	}
	return Admission{At: at, Reason: why}, now, same
}

// quotaLeft returns what the window's quota has left at now, and false
// when the scope has no quota. ReadyQueue ranks requests by it.
func (s *defaultScope) quotaLeft(now time.Time) (int64, bool) {
	if s.cfg.Quota <= 0 {
		return 0, false
	}
	s.adm.Quota.Roll(now, s.cfg.Window)
	return s.cfg.Quota - s.adm.Quota.Used, true
}

// Start implements ScopeManager.
func (s *defaultScope) Start(now time.Time, cost int64) Ticket {
	var t Ticket
	s.start(&t, now, cost)
	return t
}

// begin is Start for the coordinator (policy.go), in place; robots marks
// the manager's robots.txt fetch (startRobots).
func (s *defaultScope) begin(t *Ticket, now time.Time, cost int64, robots bool) {
	if robots {
		s.startRobots(t, now, cost)
		return
	}
	s.start(t, now, cost)
}

// start is Start filling *t in place, field by field. The manager calls
// it directly: a Ticket (48 bytes) returned by a call, or assigned from a
// composite literal, is built in a temporary and then copied whole, with
// wide loads of the narrow stores just made, which stall (no store
// forwarding). TestTicketFields keeps the field list here complete.
func (s *defaultScope) start(t *Ticket, now time.Time, cost int64) {
	now, raised := s.adm.LatestRaised(now) // as in Admit
	s.startLatest(t, now, raised, cost)
}

// startLatest is start at now, a time LatestRaised returned with raised
// (or admitLatest, with same: not raised), the state unchanged since.
func (s *defaultScope) startLatest(t *Ticket, now time.Time, raised bool, cost int64) {
	t.Slot, t.WindowIndex = s.adm.StartLatest(now, raised, &s.lim, s.cfg.Quota, s.cfg.Window, cost)
	t.Cost, t.Start = cost, now
	s.robotsStart = false // this start is the previous one now
	if s.plainGap {
		// What the lines below come to without jitter or a floor.
		s.jitter, s.backoffJitter = 1, false
		s.lim.Gap = max(s.effDelay, 0)
		return
	}
	s.jitter = s.drawJitter()
	s.backoffJitter = s.lim.GapWhy == ReasonBackoff // drawJitter took Backoff.Jitter
	s.lim.Gap = s.gap(s.effDelay)
}

// drawJitter draws the factor applied to the delay that follows a start,
// never below the one that keeps the gap at the robots.txt delay (a Store
// scales the delay it is sent by this factor, with no floor of its own).
func (s *defaultScope) drawJitter() float64 {
	f := s.jitterFactor()
	r := s.robotsFloor()
	if r == 0 || admission.ScaleDuration(s.effDelay, f) >= r {
		return f
	}
	f = float64(r) / float64(s.effDelay)
	for admission.ScaleDuration(s.effDelay, f) < r { // rounded a nanosecond short
		f = math.Nextafter(f, 2)
	}
	return f
}

// jitterRange is the jitter range in effect while why holds the delay:
// Backoff.Jitter for backoff's, Jitter narrowed by rampup, or Jitter.
func (s *defaultScope) jitterRange(why Reason) Jitter {
	switch {
	case why == ReasonBackoff:
		return s.cfg.Backoff.Jitter
	case s.cfg.Rampup.Enabled:
		return rampupJitter(s.cfg.Jitter)
	}
	return s.cfg.Jitter
}

// jitterFactor draws the jitter factor from the range in effect.
func (s *defaultScope) jitterFactor() float64 {
	_, why := s.delay()
	j := s.jitterRange(why)
	if j == (Jitter{}) {
		return 1
	}
	var u float64
	if s.rng != nil {
		u = s.rng.Float64()
	} else {
		u = rand.Float64()
	}
	return 1 + j.Min + u*(j.Max-j.Min)
}

// end is Finish for the coordinator (policy.go): robots marks the
// manager's robots.txt fetch (finishRobots). It returns whether fb was a
// backoff signal for the scope; it changes no Feedback.
func (s *defaultScope) end(now time.Time, t *Ticket, fb Feedback, robots bool) (signal bool, changed *Feedback) {
	return s.endIn(now, t, &fb, robots), nil
}

// endIn is end with the Feedback by pointer, which it does not change or
// keep: the release calls it directly for a default scope (see
// localEngine.release).
func (s *defaultScope) endIn(now time.Time, t *Ticket, fb *Feedback, robots bool) (signal bool) {
	if robots {
		s.finishRobotsIn(now, t, fb)
	} else {
		s.finish(now, t, fb)
	}
	return s.lastSignal
}

// Finish implements ScopeManager.
func (s *defaultScope) Finish(now time.Time, t Ticket, fb *Feedback) { s.finish(now, &t, fb) }

// finish is Finish with the Ticket by pointer; it changes neither.
func (s *defaultScope) finish(now time.Time, t *Ticket, fb *Feedback) {
	if !s.backoff.quiet(now, &s.cfg) { // tick, inlined
		s.tickWindow(now)
	}
	s.adm.Finish(t.Slot)
	if s.cfg.Quota > 0 {
		delta, floor := quotaCorrection(s.key, s.cfg.Quota, t, fb)
		s.adm.Quota.Correct(now, s.cfg.Window, t.WindowIndex, delta, floor)
	}
	// learnFrom, its two paths chosen here: most answers take the
	// plain one, without learnAnswer's frame.
	if s.plainSuccess(fb) {
		s.learnPlain(fb)
		return
	}
	s.learnAnswer(now, t, fb)
}

// quotaCorrection sums the quota corrections fb makes to the scope key
// for a start t, under a quota of quota: delta, the actual costs minus the
// admitted one; floor, the count the server's remaining quota implies (-1:
// none).
func quotaCorrection(key string, quota int64, t *Ticket, fb *Feedback) (delta, floor int64) {
	floor = -1
	for _, u := range fb.Quota {
		if u.Scope != "" && u.Scope != key {
			continue
		}
		if u.HasCost && u.Cost >= 0 {
			delta += u.Cost - t.Cost
		}
		if u.HasRemaining && u.Remaining >= 0 && u.Remaining <= quota {
			floor = max(floor, quota-u.Remaining)
		}
	}
	return delta, floor
}

// learn routes feedback to the learned parts and sets server gates.
//
// With rampup on, rampup takes the rate signals (429s, and 5xx that come
// between successes) and backoff what is not a rate limit: transport
// timeouts and outages. Without it, backoff takes every signal.
//
// It returns the server gate it set, if any.
func (s *defaultScope) learn(now time.Time, t Ticket, fb *Feedback) (gate time.Time, gated bool) {
	return s.learnFrom(now, &t, fb)
}

// learnFrom is learn with the Ticket by pointer; it changes neither.
func (s *defaultScope) learnFrom(now time.Time, t *Ticket, fb *Feedback) (gate time.Time, gated bool) {
	if s.plainSuccess(fb) {
		s.learnPlain(fb)
		return gate, gated
	}
	return s.learnAnswer(now, t, fb)
}

// learnPlain is what learnAnswer does with an answer plainSuccess
// accepts, without building it: it is no signal and gates nothing, the
// quota learns nothing from it, and backoff only counts it.
func (s *defaultScope) learnPlain(fb *Feedback) {
	s.lastSignal = false
	if fb.NoAdjust {
		return
	}
	s.backoff.winOK++
	s.rejitter()
}

// learnAnswer is learnFrom's general path.
func (s *defaultScope) learnAnswer(now time.Time, t *Ticket, fb *Feedback) (gate time.Time, gated bool) {
	a := s.answerFor(now, t, fb, s.lastSignal)
	s.lastSignal = a.signal
	if a.gated {
		gate, gated = now.Add(a.gate), true
		s.setGate(gate)
	}
	if fb.NoAdjust {
		return gate, gated
	}
	old := a.delay
	// moved: a part that refresh combines may have changed. A plain
	// success with rampup and AutoThrottle off changes none unless it
	// ends an outage, and most responses are that: refresh is skipped.
	moved := a.signal || s.cfg.Rampup.Enabled || s.cfg.AutoThrottle.Enabled
	if s.rampup != nil { // off: the answer is backoff's (rampupLeft, the zero verdict)
		a.rampup = s.rampup.onAnswer(now, &s.cfg, &a)
	}
	if a.rampup == rampupOutage {
		// Backoff returns to the pace rampup resumes at, not to the
		// halved one of its last answers.
		s.refresh()
		a.delay, _ = s.delay()
	}
	if s.backoff.onAnswer(now, &s.cfg, &a) {
		moved = true
	}
	if s.cfg.AutoThrottle.Enabled {
		s.auto.onAnswer(now, &s.cfg, &a)
	}
	if moved {
		s.refresh()
	}
	s.rejitter()
	nd, why := s.delay()
	if nd != old && s.log.Enabled(context.Background(), slog.LevelDebug) {
		args := []any{"scope", s.key, "in_flight", s.adm.InFlight,
			"delay_ms", nd.Milliseconds(), "change_ms", (nd - old).Milliseconds(),
			"latency_ms", fb.Latency.Milliseconds(), "size", fb.Size, "status", fb.Status,
			"signal", a.signal, "why", why.String()}
		if r := s.rampup; r != nil {
			args = append(args, "rate", r.rate, "good", r.good, "bad", r.bad, "settled", r.settled(), "drain", r.drain, "fails", r.fails, "probe_in", r.probeAt.Sub(now).Seconds(), "mem", r.memory.Seconds(), "paused", r.paused, "run", r.run)
		}
		s.log.Debug("throttle: delay adjusted", args...)
	}
	return gate, gated
}

// plainSuccess reports whether fb is an answer that learnAnswer would
// only count: no transport error, no backoff signal (by flag
// or by status), no server-given wait, quota or rate in its headers, to a
// scope with rampup and AutoThrottle off, no quota test pending or fixed
// quota learned, and backoff neither probing an outage nor on an isolated
// step.
func (s *defaultScope) plainSuccess(fb *Feedback) bool {
	return fb.Err == nil && !fb.Backoff && !fb.HasWait && !fb.Exhausted && !fb.HasRemaining && fb.StatedRate == 0 &&
		s.rampup == nil && !s.cfg.Rampup.Enabled && !s.cfg.AutoThrottle.Enabled &&
		s.quota.probe == 0 && s.quota.kind != quotaFixed &&
		!s.backoff.outage && !s.backoff.iso &&
		!s.backoff.isSignalStatus(&s.cfg, fb.Status)
}

// rejitter draws the jitter factor of the wait after the previous start
// again when the rule that sets the delay went in or out of backoff since
// that start.
func (s *defaultScope) rejitter() {
	if s.adm.Started && s.backoffJitter != (s.lim.GapWhy == ReasonBackoff) { // small enough to inline
		s.redraw()
	}
}

// redraw is rejitter's draw, when the rule that sets the delay went in or
// out of backoff since the previous start.
//
// Out of backoff, the wait after the previous start follows the scope's
// own delay again, with a factor of the scope's jitter (under rampup, one
// that never shortens the gap), not the one Backoff.Jitter gave it. Into
// backoff, it follows the backoff delay: its factor is drawn from
// Backoff.Jitter, as every start in backoff does. The factor drawn at that
// start came from Jitter (±50 %), which put the first wait of a 300 s
// backoff anywhere from 150 s to 450 s, past MaxDelay.
func (s *defaultScope) redraw() {
	nd, why := s.delay()
	s.jitter, s.backoffJitter = s.drawJitter(), why == ReasonBackoff
	s.lim.Gap = s.gap(nd)
}

func (s *defaultScope) setGate(t time.Time) { s.adm.SetGate(t) }

// Idle implements ScopeManager.
func (s *defaultScope) Idle(now time.Time) Idleness { return s.idleness(now) }

// idleness is Idle for the coordinator (policy.go).
func (s *defaultScope) idleness(now time.Time) Idleness {
	s.tick(now)
	if s.adm.InFlight > 0 || now.Before(s.adm.Gate) || s.adm.Quota.Pending(now, s.cfg.Window) {
		return Busy
	}
	if s.adm.Started {
		if now.Before(s.adm.LastStart.Add(s.lim.Gap)) {
			return Busy
		}
	}
	if s.auto.learned(&s.cfg) || s.backoff.learned() || s.rampup.learned() || s.robotsDelay > 0 {
		return IdleLearned
	}
	return IdleEmpty
}
