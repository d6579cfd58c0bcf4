package throttle

// Rampup's pace controller (tests: rampup*_test.go): one rate R per scope,
// from the configured pace to what the server allows. G is the fastest
// rate the server accepted long enough to prove it, B the slowest refused
// since (0: none); slots carry R at twice the least latency. A round (the
// answers to requests started since R last changed) proves R with 2 or
// more answers (4 near B) over 100 ms and the last wait, no refusal, R pacing.
//  1. Climb. A proven round sets G = R and raises R: doubling until a
//     first refusal (TCP's slow start), then halfway to B on a log scale,
//     then past B by 2 %, doubled per proof up to 25 % (CUBIC). A climb
//     holds the proof time: the longest the server took to refuse a rise
//     (over 2 minutes and 100 successes: 5 s), its wait, a round at least.
//  2. Probe. With G within 2 % under B, climbs wait the proof time x2
//     per failed probe in a row, a Window per MaxSignals refusals the last
//     cost, 50x the time it left all refused (it wins 2 %); 10 Windows max.
//     Else a search climb waits a failure's dead time x G/2(B-G), 2 min max.
//  3. Refusal. One event per round trip (requests sent before R last fell
//     answer the old rate). Above G: B = R; R returns to G, once a drain saw
//     later requests refused (a counter of refusals), after as long under G
//     as it was over (1 s at most, BBR's drain: its refusals are the climb's).
//     At or below G: G and R fall to what the server delivered since G (a
//     cut G not yet held: the G cut) was set (2 % at least; under 5 s, half
//     and a held G it rose from at most), B the rate refused; a G a climb
//     raised, refused later than its proof, goes back to the G before; rules
//     5 and 7's G, or one cut under 5 s ago, stays. Refused first: R halves.
//  4. Drain. Until the next success, each round of refusals halves R,
//     down to two per time since the event; the success returns R to G,
//     which holds the drain's time and a proof time if R went under it.
//  5. Quota. A drain of 1 s or more, longer than what the server
//     accepted before it (10 successes), with refusals over 1 s or a
//     later cycle agreeing, ends a window: its successes set G and a
//     bound B, passed (8 %) once G is within 10 %; climbs hold 2 cycles.
//  6. Outage. Four 5xx in a row, no 2xx or 429 between: undone (to a G
//     held 5 s at most), backoff probes; a 2xx sent since resumes at G
//     (measured, rule 3, if held), one sent in the run redoes it; a run
//     a minute after either, or in the slow start, is a limiter's.
//  7. Stated. A RateLimit policy is a ceiling 2 % under it; so is a window's
//     (a reset two answers a second apart share, none left; under 4 B and
//     what a window let pass), tried after 30 s, climbs past it held two
//     windows (B = G x quota/used if 10 % left); a moving reset: B in slow start.
// R stays in [1/Backoff.MaxDelay, the slots' and Rampup.MaxRate's cap].

import (
	"math"
	"time"
)

// RampupConfig configures rampup, for paid APIs and other servers that
// should be used as fast as their rate limit allows: the scope's start
// rate climbs from the configured pace (1/Delay; with Delay 0,
// Concurrency requests per latency) to what the server accepts, holds
// just under it, and keeps probing above it; it follows a limit below
// the configured pace down to one request per Backoff.MaxDelay. The
// scope gets the slots that rate needs (twice the rate times the least
// latency of the last minute), up to MaxConcurrency. Rampup owns the rate signals (429, and
// 5xx between successes); backoff keeps timeouts and outages. While
// rampup is on, jitter never shortens a gap and lengthens it by 2 % at
// most: a rate limiter refuses what comes early.
//
// A zero RampupConfig is invalid (MinSignals must be >= 1, even with
// Enabled false), except in a Config.Scopes entry or a SetScopeConfig
// argument, where it stands for Default's; start from
// DefaultConfig().Default.Rampup. A plain value: copy it freely, but don't
// change it while another goroutine reads it.
type RampupConfig struct {
	// Enabled turns rampup on. Default false.
	Enabled bool
	// MinSignals and MaxSignals are the refusals per Window the steady
	// state may spend probing for a limit that rose: probes come further
	// apart when they cost more than MaxSignals. Default 1 and 1.
	// MinSignals must be >= 1, MaxSignals >= MinSignals.
	MinSignals, MaxSignals int
	// MaxRate caps the start rate, in requests a second. Default 0 (no
	// cap). Must be >= 0.
	MaxRate float64
	// MaxConcurrency caps the slots. Default 0, which means the manager's
	// GlobalConcurrency.
	MaxConcurrency int
}

// defaultRampupConfig returns the rampup defaults, off:
// DefaultConfig().Default.Rampup.
func defaultRampupConfig() RampupConfig {
	return RampupConfig{MinSignals: 1, MaxSignals: 1}
}

func (c RampupConfig) validate(prefix string) error {
	if c.MinSignals < 1 {
		return &ConfigError{Field: prefix + ".MinSignals", Reason: "must be >= 1"}
	}
	if c.MaxSignals < c.MinSignals {
		return &ConfigError{Field: prefix + ".MaxSignals", Reason: "must be >= MinSignals"}
	}
	if !(c.MaxRate >= 0) || math.IsInf(c.MaxRate, 1) {
		return &ConfigError{Field: prefix + ".MaxRate", Reason: "must be >= 0 and finite"}
	}
	if c.MaxConcurrency < 0 {
		return &ConfigError{Field: prefix + ".MaxConcurrency", Reason: "must be >= 0"}
	}
	return nil
}

// The numbers of rampup, and why they are these:
const (
	// rampupRound is the least answers that end a round: two, so one
	// lucky answer proves nothing; four once a refused rate is known,
	// where a token bucket answers the first requests of a probe from
	// its burst.
	rampupRound      = 2
	rampupRoundNearB = 4
	// rampupRoundMin is the least time a round's requests span: at 1 ms
	// latency two answers come back within a millisecond, and a burst of
	// 50 would prove rate after rate up to thousands a second. 100 ms
	// lets a burst of B hide rates up to about 5B a second, no more.
	rampupRoundMin = 100 * time.Millisecond
	// rampupEffect is the share of R a round's starts must reach for it
	// to prove R: 70 % leaves room for jitter and for the first start's
	// wait for the pace.
	rampupEffect = 0.7
	// rampupEpsilon is the margin below a rate the server states, the
	// end of the bisection (G and B within 2 %), the first step of a
	// climb past B, and the least step down at a refusal: finer than
	// that, the noise of a real server's clock decides.
	rampupEpsilon = 0.02
	// rampupMaxStep caps a climb's step: doubling.
	rampupMaxStep = 1.0
	// rampupMaxMemory caps the proof time and the server's waits a round
	// spans: two minutes, two windows of a quota per minute (rule 5).
	rampupMaxMemory = 2 * time.Minute
	// rampupLateOK: a refusal that comes more than rampupMaxMemory and
	// this many successes after the rise it ends teaches a memory of
	// rampupTrust only, not the two minutes of the cap. No hold the
	// memory allows would have waited for it: it is a burst that hid a
	// small excess for minutes, or a change of the server's (a blip, a
	// neighbour filling a shared limit). Holding every later climb two
	// minutes for it slowed the way back from a blip: one 429 after three
	// minutes at 50 req/s held the scope at 64 % of that rate for four
	// minutes. Holding them none sent a burst's later climbs too often:
	// nginx in delay mode with a burst of 6-8 drew 6 refusals a minute
	// (field draws). Under 100 successes, a slow server's counter may
	// still be what answered (1 request per 8 s is 15 in two minutes):
	// it is learned whole, as any.
	rampupLateOK = 100
	// rampupCycleMin is the least time a drain refuses everything, past
	// the server's gates, for rule 5 to bound G: a second, so a bucket
	// refilling is not a quota.
	rampupCycleMin = time.Second
	// rampupCycleOK is the least successes a cycle needs for rule 5 to
	// read it.
	rampupCycleOK = 10
	// rampupBoundNear: rule 5's B, the cycle's successes over its
	// shortest span, is an estimate no refusal confirmed: bisecting
	// towards it ends once G is within 10 % of it, not 2 %, and the
	// climb past it starts at 8 %, not 4 %. A counter that counts its
	// refusals (HAProxy) stays shut longer for the drain's knocks, so
	// its first cycle reads a B under its limit (0.98 against 1.22 req/s
	// for 11 per 9 s), and each 2 % of the way was a climb held two
	// cycles. (Four grids: cold starts 22 shapes faster by over 10 s, the
	// worst 470 -> 457 s, none slower; field draws' 5th percentile 0.82
	// -> 0.87.)
	rampupBoundNear = 0.1
	// rampupProbeStep caps a climb's step once the server has refused
	// once: BBR probes 25 % above what it measured.
	rampupProbeStep = 0.25
	// rampupTrust and rampupTrustOK are the least span, and successes in
	// it, the delivered rate is trusted over whole: with less, a refusal
	// at G halves G at most.
	rampupTrust   = 5 * time.Second
	rampupTrustOK = 10
	// rampupMaxProbeWindows caps the time between probes: 10 Windows.
	// A learned ceiling is re-probed within it, and a steady state's
	// probes cost at most a tenth of their refusals a Window.
	rampupMaxProbeWindows = 10
	// rampupMaxFails caps the doublings of the probe interval.
	rampupMaxFails = 16
	// rampupKnocks is how many requests a drain sends at least per time
	// since it began: two, so its end is seen within half the time it
	// took.
	rampupKnocks = 2
	// rampupConcGain sizes the slots: twice the rate times the latency,
	// as BBR sizes its window at twice the bandwidth-delay product.
	rampupConcGain = 2
	// rampupJitterMax is the widest jitter under rampup (rampupJitter).
	rampupJitterMax = 0.02
	// rampupMinLatWindow is how long the least latency counts
	// (slotLatency): a minute. BBR keeps its least round trip ten seconds
	// and drains its queue to measure it again; rampup drains only at a
	// refusal, so it keeps it longer, and a latency that rose for good
	// sizes the slots within a minute.
	rampupMinLatWindow = time.Minute
	// rampupFirstLatency is the latency assumed before the first answer,
	// to size the slots: with one slot and a server that takes 2 s, the
	// first round would be paced by the slot, not the rate.
	rampupFirstLatency = time.Second
	// rampupSameReset is how close two resets are the same window's end:
	// resets are whole seconds.
	rampupSameReset = 500 * time.Millisecond
	// rampupSoftHold is the least time 2 % under a window's limit (rule
	// 7) holds with no refusal before the scope probes above it: half a
	// minute, a few of the windows such servers count.
	rampupSoftHold = 30 * time.Second
	// rampupHintOverB is how far above the slowest rate refused since
	// (B) a window's limit may be and still be settled at (rule 7): a
	// window spent early refuses a slower rate than its own, by 2 or 4
	// as the slow start doubled past it, not more.
	rampupHintOverB = 4
	// rampupMaxRate bounds the rate (one start per microsecond).
	rampupMaxRate = 1e6
	// outageRun is how many 5xx in a row, with no success and no 429
	// between, make an outage rather than a rate limit: a limiter
	// refuses runs of about R/limit - 1 between successes, and rampup
	// climbs at most to twice a proven rate, so runs of one or two.
	outageRun = 4
	// outageRecur: a run of 5xx that begins this soon after an outage
	// ended (at a probe, or redone) is a limiter's, not another outage.
	// HAProxy answering 503 refuses everything while its counter, which counts
	// refusals, is over the limit: the run looks like an outage, its
	// first probe a minute later is accepted, and at G the counter fills
	// again within seconds (15 % of the limit, a run and a minute's pause
	// each cycle). A server that is really down again after coming back
	// is still backed off, by the drain's halving.
	outageRecur = time.Minute
	// outageSlowRun: a run that begins in the slow start this soon after
	// its last rise (and two latencies) is the limit's answer to it
	// (runSlow): a limiter's window, the ten seconds the longest counting
	// periods of HAProxy that crawlers meet. Later, the rise took effect
	// long ago or never (a crawl its workers bound, on a server without a
	// limit), and a run is an outage as any.
	outageSlowRun = 10 * time.Second
)

// rampup is the learned rampup state of one scope: the pace controller
// described at the top of this file, with time passed in.
type rampup struct {
	rate     float64   // R, starts per second; 0 before the first answer (the configured pace)
	good     float64   // G: the fastest rate proven; 0: none
	bad      float64   // B: the slowest rate refused since; 0: none
	prevG    float64   // G before it last rose
	prevGAt  time.Time // and its gAt and gOK then
	prevGOK  int
	best     float64       // the highest G ever
	held     float64       // the highest G ever held (trusted, half of it delivered)
	gAt      time.Time     // when G was last set
	gOK      int           // successes since gAt
	measured bool          // G was measured (rule 5, 7), not proven by a round
	lat      time.Duration // smoothed latency of successes
	latMin   time.Duration // the least latency of a success since latMinAt (0: none)
	latMinAt time.Time
	step     float64 // the next climb above G past B (a fraction); 0: slow start

	changed time.Time     // when R last changed: the round's start
	cut     time.Time     // when R last fell: older refusals are the event answered
	okCut   bool          // a success of a request started after cut came
	reprove time.Duration // the last drain went under G: G holds that long, and a proof time, before a climb
	under   time.Time     // R stays under G until then, after a failed climb
	cutAt   time.Time     // when rule 3 last cut G to what the server delivered
	// cutSpanAt and cutSpanOK: the span that cut measured (from when the
	// G it cut was set) and the successes in it
	cutSpanAt time.Time
	cutSpanOK int
	counts    bool      // a drain saw refusals of requests sent after its event
	rise      time.Time // when the rate G last rose to began
	raised    bool      // G rose since the last refusal event

	// the round: answers to requests started since changed
	rFirst, rLast time.Time
	rOK, rSig     int

	probeAt  time.Time     // no climb from a settled G before it (rule 2)
	fails    int           // climbs refused in a row
	memory   time.Duration // the longest from a rise to the refusal it drew
	wait     time.Duration // the server's last wait: rounds span it
	stated   float64       // the lowest rate the server stated; 0: none
	hintAt   time.Time     // the reset named with a stated rate that is no policy
	hintSeen time.Time     // when
	hintOK   int           // successes answered since
	hintRem  int64         // the count it said was left; -1: none
	hint     float64       // the lowest such rate
	hinted   float64       // the lowest such rate settled at; 0: none
	hintMem  time.Duration // the longest wait such a reset named: a window
	hintLeft int64         // the least count left named since settling at a window's limit; -1: none
	soft     bool          // stated is such a rate: a ceiling until it held a proof time unrefused
	windows  bool          // such resets are a window's end: the rate is stated
	drain    bool          // rule 4: from a refusal event to the next success
	drainAt  time.Time     // when the drain began
	lastNo   time.Time     // the latest start of a refused request
	cost     int           // refusals since the last failed climb, until its drain ended
	costing  bool          // counting cost
	lost     time.Duration // how long the last failed probe's drain refused everything
	probe    bool          // R is a probe of a settled G
	// climbLost is how long the last failed climb of the search (not
	// the slow start's) left the server refusing everything, until a
	// climb holds (repay); climbFail: its drain is not over yet.
	climbLost time.Duration
	climbFail bool

	first time.Time // the first answer, or the end of the last outage
	// the last drain's cycle as rule 5 measured it, to be confirmed by
	// the next (0: none)
	cycLo, cycHi float64
	bRule5       bool      // B is rule 5's bound, which no climb has met: G reaching it goes on past it
	accAt        time.Time // the end of the last drain (first, before any)
	accOK        int       // successes since accAt

	run    int     // 5xx in a row, no success and no 429 between
	runG   float64 // G and B when the run began
	runB   float64
	runMem time.Duration
	runAt  time.Time // the start of the run's first request
	// runSlow: the run began in the slow start, above G, soon after a
	// rise (outageSlowRun): it is the limit's answer to the doubling,
	// never an outage. HAProxy answering 503, whose counter counts
	// refusals, refuses every request of the slow start's overshoot;
	// taken for an outage, the scope waited a minute for its second
	// probe and resumed at a G proven inside the counter's allowance
	// (hundreds a second against tens), to drain through dozens of
	// refusals. An outage at that very moment is drained as a limit is
	// (rule 4).
	runSlow  bool
	paused   bool // an outage: backoff probes it
	pausedAt time.Time
	resumed  time.Time // when the last outage ended at a success (a probe's, or one that redid it)
}

// bound keeps the counters of an imported state within what the rules
// make of them.
func (r *rampup) bound() {
	r.fails = min(r.fails, rampupMaxFails)
	r.memory, r.wait = min(r.memory, rampupMaxMemory), min(r.wait, rampupMaxMemory)
	r.reprove = min(r.reprove, rampupMaxMemory)
	r.run = min(r.run, outageRun)
	r.step = min(r.step, rampupMaxStep)
}

// configure keeps the state within cfg's bounds.
func (r *rampup) configure(cfg *ScopeConfig, globalCap int) {
	if r.rate != 0 {
		r.rate = r.clamp(cfg, globalCap, r.rate)
	}
}

// start is the configured pace, where rampup begins: 1/Delay, or with
// Delay 0 Concurrency requests per latency.
func (r *rampup) start(cfg *ScopeConfig) float64 {
	if cfg.Delay > 0 {
		return float64(time.Second) / float64(cfg.Delay)
	}
	if r.lat > 0 {
		return float64(cfg.Concurrency) * float64(time.Second) / float64(r.lat)
	}
	return rampupMaxRate
}

// minRate is the slowest rampup goes: one start per Backoff.MaxDelay.
func (r *rampup) minRate(cfg *ScopeConfig) float64 {
	return float64(time.Second) / float64(max(cfg.Backoff.MaxDelay, time.Second))
}

// ceiling is the fastest rate rampup may try: 2 % under a rate the
// server states, Rampup.MaxRate, and what MaxConcurrency slots carry
// at the least latency of the last minute.
func (r *rampup) ceiling(cfg *ScopeConfig, globalCap int) float64 {
	c := float64(rampupMaxRate)
	if r.stated > 0 {
		c = r.stated * (1 - rampupEpsilon)
	}
	if m := cfg.Rampup.MaxRate; m > 0 {
		c = min(c, m)
	}
	if l := r.slotLatency(); l > 0 {
		c = min(c, float64(r.maxConc(cfg, globalCap))*float64(time.Second)/float64(l))
	}
	return max(c, r.minRate(cfg))
}

func (r *rampup) maxConc(cfg *ScopeConfig, globalCap int) int {
	if c := cfg.Rampup.MaxConcurrency; c > 0 {
		return max(c, cfg.Concurrency)
	}
	return max(globalCap, cfg.Concurrency)
}

func (r *rampup) clamp(cfg *ScopeConfig, globalCap int, rate float64) float64 {
	return max(min(rate, r.ceiling(cfg, globalCap)), r.minRate(cfg))
}

// current is the rate in effect: the configured pace until the first
// answer.
func (r *rampup) current(cfg *ScopeConfig) float64 {
	if r.rate == 0 {
		return r.start(cfg)
	}
	return r.rate
}

// delay is the delay between starts at the current rate; ok=false when
// rampup is off.
func (r *rampup) delay(cfg *ScopeConfig) (time.Duration, bool) {
	if r == nil {
		return 0, false
	}
	if r.rate == 0 {
		return cfg.Delay, true // exactly the configured pace, without rounding
	}
	if r.rate >= rampupMaxRate {
		return 0, true
	}
	return time.Duration(float64(time.Second) / r.rate), true
}

// concurrency is the slots the current rate needs: twice the rate times
// the least latency of the last minute (slotLatency), at least the
// configured concurrency, at most the cap.
func (r *rampup) concurrency(cfg *ScopeConfig, globalCap int) (int, bool) {
	if r == nil {
		return 0, false
	}
	lat := r.slotLatency()
	if lat == 0 {
		lat = rampupFirstLatency
	}
	need := math.Ceil(rampupConcGain * r.current(cfg) * lat.Seconds())
	return max(cfg.Concurrency, int(min(need, float64(r.maxConc(cfg, globalCap))))), true
}

// slotLatency is the latency the slots carry the rate at: the least of
// the last minute, as BBR sizes its window by the least round trip, not
// the smoothed one: a server that queues what comes early (nginx's delay
// mode) answers later the more is in flight, and slots sized by that
// latency would buy the queue more requests, and its overflow refusals.
func (r *rampup) slotLatency() time.Duration {
	if r.latMin > 0 {
		return r.latMin
	}
	return r.lat
}

// learned reports whether rampup holds anything worth keeping.
func (r *rampup) learned() bool { return r != nil && (r.rate != 0 || r.good != 0 || r.bad != 0) }

// set changes the rate and starts a new round; a lower rate is a cut
// (rule 3).
func (r *rampup) set(now time.Time, cfg *ScopeConfig, globalCap int, rate float64) {
	rate = r.clamp(cfg, globalCap, rate)
	if rate < r.rate {
		r.cut, r.okCut = now, false
	}
	if rate != r.rate {
		r.rate, r.changed = rate, now
	}
	r.clearRound()
}

// clearRound empties the round: the answers counted so far prove nothing.
func (r *rampup) clearRound() {
	r.rOK, r.rSig = 0, 0
	r.rFirst, r.rLast = time.Time{}, time.Time{}
}

// settleAt settles at 2 % under a rate s the server states (rule 7).
func (r *rampup) settleAt(now time.Time, cfg *ScopeConfig, gc int, s float64) {
	r.bad, r.bRule5 = s, false
	r.setGood(now, s*(1-rampupEpsilon))
	r.measured = true
	r.probeAt = now.Add(r.probeInterval(cfg))
	if r.soft {
		r.probeAt = now.Add(max(r.proofTime(), rampupSoftHold)) // a window's limit is tried once it held
		r.hintLeft = -1
	}
	r.set(now, cfg, gc, r.good)
}

// trusted reports whether G has held long enough (a few seconds, round
// trips and successes) for what the server delivered since to measure
// it.
func (r *rampup) trusted(now time.Time) bool { return r.heldLong(r.gAt, r.gOK, now) }

// heldLong reports whether a G set at at, with ok successes by until, held
// long enough to be trusted (trusted).
func (r *rampup) heldLong(at time.Time, ok int, until time.Time) bool {
	return ok >= rampupTrustOK && until.Sub(at) >= max(rampupTrust, 4*r.lat)
}

// setGood sets G at now.
func (r *rampup) setGood(now time.Time, g float64) {
	r.good, r.gAt, r.gOK, r.measured = g, now, 0, false
}

// rampupVerdict is what rampup did with an answer, for backoff.
type rampupVerdict uint8

const (
	rampupLeft   rampupVerdict = iota // not taken: backoff learns from it as without rampup
	rampupTook                        // a rate signal rampup acted on: backoff must not step
	rampupOutage                      // an outage begins: backoff probes it from now
	// rampupStale: a success of a request sent before the outage began,
	// answered while rampup has it paused. It says nothing of the outage,
	// to rampup or to backoff, whose probing must go on: were backoff to
	// end the outage on it while rampup stays paused, the refusals after
	// would come to backoff as a new episode (a delay of Backoff.MinDelay,
	// recovered a Window at a time), not to rampup.
	rampupStale
)

// onAnswer learns from one answer at now (nothing from a transport
// error: rampup steers a rate, and a timeout says nothing of it). A
// success whose headers say a fixed quota is spent (see spentQuota) is a
// success: the server gate it sets holds the scope until the quota's
// reset, and the rate that spent it is one the server accepted.
func (r *rampup) onAnswer(now time.Time, cfg *ScopeConfig, ans *answer) rampupVerdict {
	if r == nil || ans.status == 0 {
		return rampupLeft
	}
	gc := ans.globalCap
	refused := ans.signal
	if r.rate == 0 {
		r.rate = r.clamp(cfg, gc, r.start(cfg))
		r.changed, r.cut, r.first, r.accAt = ans.started, ans.started, now, ans.started
	}
	if refused && ans.gated {
		r.wait = min(ans.gate, rampupMaxMemory)
	}
	if !refused && ans.latency > 0 {
		if r.latMin == 0 || ans.latency <= r.latMin || now.Sub(r.latMinAt) >= rampupMinLatWindow {
			r.latMin, r.latMinAt = ans.latency, now
		}
		if r.lat == 0 {
			r.lat = ans.latency
		} else {
			r.lat += (ans.latency - r.lat) / 8
		}
	}
	// Two answers a second or more apart that name the same reset: the
	// end of a window, not a time that moves with each request; and
	// from then on every such statement is the window's.
	if !ans.reset.IsZero() {
		r.hintMem = max(r.hintMem, min(ans.reset.Sub(now), rampupMaxMemory))
	}
	if !ans.reset.IsZero() && !r.windows {
		// A token bucket's time until full stands still too while it
		// refills unused (a Retry-After's silence), but then what is left
		// grows; a window's only shrinks. Without a count left, the
		// server must have accepted what would have moved a bucket's
		// reset by a second.
		same := !r.hintAt.IsZero() && now.Sub(r.hintSeen) >= time.Second &&
			absDuration(ans.reset.Sub(r.hintAt)) < rampupSameReset
		if ans.remaining >= 0 && r.hintRem >= 0 {
			r.windows = same && ans.remaining <= r.hintRem
		} else {
			r.windows = same && float64(r.hintOK) >= max(2, ans.stated)
		}
		if r.hintAt.IsZero() || now.Sub(r.hintSeen) >= time.Second {
			r.hintAt, r.hintSeen, r.hintOK, r.hintRem = ans.reset, now, 0, ans.remaining
		}
		if s := ans.stated; s > 0 && (r.hint == 0 || s < r.hint) {
			r.hint = s // the lowest seen: a reset is at most a window away
		}
	}
	if r.soft && ans.remaining >= 0 && (r.hintLeft < 0 || ans.remaining < r.hintLeft) {
		r.hintLeft = ans.remaining
	}
	// A window's limit (rule 7): the lowest stated, news unless G was
	// proven above a lower one already settled at.
	h := min(ans.stated, r.hint)
	window := !ans.policy && r.windows && (r.hinted == 0 || h < r.hinted && r.good <= r.hinted*(1+1e-9))
	switch s := ans.stated; {
	case s <= 0 || s >= rampupMaxRate:
	case ans.policy && (r.stated == 0 || r.soft || s < r.stated):
		r.stated, r.soft = s, false // rule 7: the ceiling is 2 % under it
		r.settleAt(now, cfg, gc, s)
	case window && r.overWindow(now, h):
		// A window's limit under what the server let through over a
		// window or more (overWindow) is no limit of its own: a leaky
		// bucket's X-RateLimit-Reset, the time its burst takes to
		// drain, read as a window's end. It is remembered as if
		// settled at, so that it is not settled at later either, once
		// an outage or a drain has cut the spans that refute it short.
		// (nginx at 7 per minute, burst 10, read as stating 7 per 98 s,
		// held 60 % of its limit from minute 6 to the outage at 15;
		// HAProxy's 1 per 7 s stating X-RateLimit-* reached 90 % of its
		// limit after 457 s, now 103 s.)
		r.hinted = h
	case window && (r.bad == 0 || h < rampupHintOverB*r.bad):
		// A window's limit: settle 2 % under it, and never above
		// unless that held a proof time with no refusal (servers mean
		// their reset differently: two windows ahead makes it half).
		// A lower one (a reset rounded up a second more) is no news
		// once G is proven above the last: settled again, HAProxy's
		// 4 per 10 s, stated as 4 in 20 s, fell from 0.37 to 0.19 req/s
		// and climbed back for two and a half minutes.
		//
		// Unless the server refused a rate under a quarter of it since
		// (B): then it is no window's limit (a leaky bucket's
		// X-RateLimit-Reset, the time its burst takes to drain, looks
		// like one), or another client spends the window, and either way
		// not a rate to settle at. (A window spent early, by the slow
		// start's excess, refuses any rate until it resets, so B may
		// fall under the window's rate, but not by 4: under B itself,
		// 28 more cold starts of 800 missed their target. A token
		// bucket of 1.22 req/s stating X-RateLimit-* had G jump from
		// 1.27 to 29.9 req/s, 1.30 refused, twice in 8 minutes: 10.9
		// refusals a minute; on eight grids, 4 shapes of bucket, GCRA
		// and nginx stating X-RateLimit-* leave the refusal target's
		// misses thus, and no target is missed more.)
		r.hint = h
		r.hinted, r.stated, r.soft = h, h, true
		r.settleAt(now, cfg, gc, r.hint)
	case !ans.policy && r.step == 0 && s > r.good && (r.bad == 0 || s < r.bad) && !r.windows:
		// A hint, in the slow start: bisect towards it rather than
		// double past it (a rate the server accepts past it is climbed
		// to as past any ceiling).
		r.bad, r.bRule5 = s, false
	}
	if v, done := r.outage(now, cfg, ans, refused); done {
		return v
	}
	if refused {
		if r.costing {
			r.cost++
		}
		if ans.started.Before(r.cut) {
			return rampupTook // rule 3: the event already answered
		}
		r.count(ans.started, false)
		r.lastNo = later(r.lastNo, ans.started)
		switch {
		case r.drain && !r.okCut:
			r.counts = true            // it refused what came after the event
			r.drainRound(now, cfg, gc) // rule 4
		case ans.started.Before(r.under) && r.rate < r.good:
			r.underRefused(now) // rule 3
		default:
			r.refusal(now, cfg, gc)
		}
		return rampupTook
	}
	r.gOK++
	r.accOK++
	r.hintOK++
	// Held: trusted, and at least half of G delivered. A G that only
	// outlived a drain (a success now and then at a fraction of it, the
	// rest refused) was not, and an outage is not undone to it (rule 6):
	// HAProxy answering 503 at 9 per 9 s let the slow start prove 8 req/s
	// inside its allowance, its drain of 17 s counted as holding it, and
	// each run of 503s after was undone to 8 (seen with a slow start a
	// second quicker than this one; with this one, 7 of 6400 field draws
	// change, 4 of them with fewer refusals, and an outage at 76 per 7 s
	// is no longer undone to G = 256 req/s).
	if r.good > r.held && r.trusted(now) && r.delivered(now) >= r.good/2 {
		r.held = r.good
	}
	if !ans.started.Before(r.cut) {
		r.okCut = true
		if r.drain {
			r.endDrain(now, ans.started, cfg, gc)
		}
	}
	if !ans.started.Before(r.changed) {
		r.count(ans.started, true)
		r.endRound(now, cfg, gc)
	}
	if r.rate == r.good && r.settled() && !now.Before(r.probeAt) {
		if r.soft && r.good >= r.stated*(1-rampupEpsilon)*(1-1e-9) && now.Sub(r.gAt) >= max(r.proofTime(), rampupSoftHold) &&
			r.lastNo.Before(r.gAt) {
			// 2 % under a window's limit held half a minute (and a
			// proof time) with no refusal: the server may allow more
			// than its reset implied.
			r.stated, r.soft = 0, false
			// And if the count the server said was left stayed over
			// 10 % of its quota (the rate times the longest reset) all
			// that while, its window is shorter than its reset implied:
			// the quota, over what of it G used, bounds B (rule 5's kind,
			// unconfirmed). HAProxy's 18 per 10 s, stated with a reset of
			// its counter's two periods, read 0.9 req/s and left 9: B =
			// 1.7, and 90 % of the limit came after 233 s, not 457.
			// (At most 4 G: the first climb doubles, as the slow start;
			// a count left of the quota or more is no count.)
			if q, left := r.hint*math.Ceil(r.hintMem.Seconds()), float64(r.hintLeft); r.hintLeft >= 0 && left > rampupBoundNear*q && left < q {
				r.bad, r.bRule5 = r.good*min(q/(q-left), 4), true
			}
		}
		r.probe = true
		r.set(now, cfg, gc, r.climbTo()) // rule 2: probe
	}
	return rampupLeft
}

// count adds an answer to the round.
func (r *rampup) count(started time.Time, ok bool) {
	if r.rOK+r.rSig == 0 || started.Before(r.rFirst) {
		r.rFirst = started
	}
	if started.After(r.rLast) {
		r.rLast = started
	}
	if ok {
		r.rOK++
	} else {
		r.rSig++
	}
}

// delivered is the rate of successes since G was set (rule 3).
func (r *rampup) delivered(now time.Time) float64 {
	return float64(r.gOK) / max(now.Sub(r.gAt).Seconds(), 1e-3)
}

// outage applies rule 6 to the answer. It reports the verdict and true
// when the answer is the outage's.
func (r *rampup) outage(now time.Time, cfg *ScopeConfig, ans *answer, refused bool) (rampupVerdict, bool) {
	switch {
	case r.paused && refused:
		return rampupLeft, true // backoff probes the outage
	case r.paused && ans.started.Before(r.runAt):
		return rampupStale, true // sent before the outage: says nothing of it
	case r.paused && ans.started.Before(r.pausedAt):
		// The server accepted a request sent during the run: its 5xx
		// were a rate limit's (nginx's 503s between its 2xx, four in a
		// row by chance among many in flight), not an outage. Keep
		// what the refusals did and follow them as any are
		// (internal/sim's TestGridShapesThatBroke, its first shape).
		r.paused, r.run = false, 0
		// A limiter's: its next run too (outageRecur). nginx in delay
		// mode at 2 s latency answers its refusals at once and its
		// queued 2xx late, so its runs are four long between them: each
		// was an outage redone at G, 5 refusals a second for minutes.
		r.resumed = now
		r.good, r.runG = r.runG, r.good
		r.bad, r.runB = r.runB, r.bad
		r.memory, r.runMem = r.runMem, r.memory
		r.bRule5 = false
		r.drain = true
		r.set(now, cfg, ans.globalCap, nonzero(r.good, r.rate))
		return rampupLeft, false
	case r.paused:
		// The first success of a request sent since resumes at G (a
		// limiter's run of refusals that looked like an outage is
		// followed from there as any refusal is). Measure afresh: the
		// outage's time says nothing of the rate.
		r.paused, r.run, r.drain, r.first, r.accAt = false, 0, false, now, now
		r.resumed = now
		r.setGood(now, r.good)
		// A G the server held before the outage counts as measured: a
		// refusal before it has held again drains (rule 3), rather than
		// halving a G that has not been measured since.
		r.measured = r.good <= r.held
		r.set(now, cfg, ans.globalCap, nonzero(r.good, r.rate))
		return rampupLeft, true
	case !refused:
		if !ans.started.Before(r.runAt) {
			r.run = 0 // (an answer to a request sent before the run began, delayed, does not end it)
		}
		return rampupLeft, false
	case ans.limitStatus:
		r.run = 0 // a rate limit: never an outage
		return rampupLeft, false
	}
	if r.run == 0 {
		r.runG, r.runB, r.runMem, r.runAt = r.good, r.bad, r.memory, ans.started // what the run may undo
		r.runSlow = r.step == 0 && r.rate > r.good && now.Sub(r.changed) < outageSlowRun+2*r.lat
	}
	r.run = min(r.run+1, outageRun)
	if r.run < outageRun || r.runSlow || (!r.resumed.IsZero() && now.Sub(r.resumed) < outageRecur) {
		return rampupLeft, false // a rate limit's refusals (outageRecur)
	}
	// An outage, not a rate: undo what its first failures did to G and
	// B, and resume where it found the scope. (The run's fields keep
	// what they did, should a success show it was a rate limit.)
	r.paused, r.pausedAt = true, now
	if r.runG > r.held*(1+rampupEpsilon) {
		// A G the server never held (proven inside a counter's
		// allowance, in the slow start) is not where to resume: what
		// the refusals made of it stands. (HAProxy counting refusals,
		// 7 per 9 s: G = 4 req/s was proven by the slow start's first
		// seven requests; undone at each run, it was refused for a
		// minute and a half.)
		r.runG, r.runB, r.runMem = r.good, r.bad, r.memory
	}
	r.good, r.runG = r.runG, r.good
	r.bad, r.runB = r.runB, r.bad
	r.memory, r.runMem = r.runMem, r.memory
	r.drain, r.costing, r.bRule5 = false, false, false
	r.rate = max(r.rate, r.good)
	return rampupOutage, true
}

// refusal is rule 3: a refusal event.
func (r *rampup) refusal(now time.Time, cfg *ScopeConfig, gc int) {
	r.bRule5 = false
	from, next := r.rate, r.good
	switch {
	case r.good == 0 && r.bad == 0 && r.accOK == 0:
		// Refused before the server accepted anything: it is refusing
		// now, but not necessarily R (another client filled the
		// limiter, or the limiter still holds an earlier crawl's
		// requests). R halves, as at any first refusal, but B stays
		// unknown and the slow start goes on: taken as B = R, one
		// refused first page held the climb under R for a minute of
		// bisection in 2 % steps.
		next = from / 2
	case r.good == 0:
		// The first answers refused: no rate proven yet. (No climb was
		// refused either: how long since R last changed is no time the
		// server took to refuse a rise; at a low rate it is the wait
		// for the next answer.)
		r.bad, next = from, from/2
		r.failed(0)
	case from > r.good:
		// A climb or probe refused. Once a drain has seen the server
		// refuse what came after its event, as BBR drains the queue its
		// probe built, R goes as far under G as the climb went over it,
		// for as long as the climb went (a second at most: longer, a
		// drain is rule 5's): a limiter that counts what it refuses
		// (HAProxy) is over its limit by the climb's excess, and at G
		// it refused on, three or four times per failed climb. (Of 2000
		// random draws of the field suite's nginx and HAProxy shapes,
		// those above 6 refusals a minute went from 27 to 8.)
		r.bad = from
		if r.counts {
			// (From the climb's start to that of the refused request:
			// what came after is answered by the drain.)
			r.under = now.Add(min(max(r.lastNo.Sub(r.changed), 0), rampupCycleMin))
			next = r.good * r.good / from
		}
		r.failed(now.Sub(r.changed))
	case r.raised && r.prevG > 0:
		// The climb that raised G refused later than its proof: back to
		// the rate before it; the server's memory is that long (taught).
		r.bad, next = r.good, r.prevG
		took := r.taught(now, r.rise)
		r.setGood(now, r.prevG)
		r.failed(took)
	case r.measured && !r.trusted(now),
		!r.cutAt.IsZero() && now.Sub(r.cutAt) < rampupTrust:
		// G was measured (a quota's cycle, a stated rate, or what the
		// server delivered, cut to less than 5 s ago), not proven by a
		// round: refused before it held long enough to measure again,
		// the server's memory is still letting go (a sliding window
		// frees its slots as it took them). (Cut again at each refusal,
		// an untrusted G halved four times in a second: a sliding window
		// of 2312 per 54 s, full of a climb's excess, held at 5 req/s
		// against 42.8, its climbs back held 110 s each: 22 % of the
		// limit over minutes 5-15.) G stays; a drain begins, or
		// goes on: the refusals of requests sent from now on halve the
		// rate per round of them (rule 4). (Without a cut and a new
		// round, each later refusal came back here and the rate stayed
		// at G with every request refused: HAProxy answering 503 at 57
		// req/s, a limit of 12, for a minute. The round starts at the
		// event: a success of a request sent before it, answered after,
		// counted in it kept it from ever being all refusals, the same
		// freeze.)
		if !r.drain {
			r.drain, r.drainAt = true, now
		}
		if r.okCut || r.rOK > 0 {
			r.cut, r.okCut, r.changed = now, false, now
			r.clearRound()
		}
		return
	default:
		// The server refuses a rate it accepted: its limit is lower, at
		// what it delivered since G was set (over a few seconds, round
		// trips and successes; over less, it falls by half at most, and
		// no lower than the G a climb raised it from if that one held so
		// long: the climb's proof let an excess through that the server
		// counted later, as the case above, whose mark a later climb's
		// refusal took. HAProxy's 18 per 3 s refused a climb to 6.45 req/s
		// from G = 6.10, proven a second before, then G: cut to what 4
		// successes in a second made of it, 3.43, with a memory of 16 s
		// for the climbs back; on four grids 9 shapes leave the share's
		// misses, none joins them, the lowest share 77.3 -> 79.3 %.)
		if !r.counts && !r.cutAt.IsZero() && r.cutAt.Equal(r.gAt) && !r.trusted(now) {
			// G is a cut's, refused before it held: the same episode
			// (a sliding window still full of a climb's excess lets
			// go of it over its length, refusing G now and then), so
			// what the server delivered is measured since the G that
			// cut came from, over the whole episode. Measured over each
			// few seconds instead, each refusal could halve G: a
			// sliding window of 51 per 51 s went 1.01 -> 0.96 -> 0.48
			// req/s within 15 s of a failed climb, and its climbs back
			// held two minutes each: 89.8 % of the limit over minutes
			// 5-15, now 95.2 %. (One more halving in that cascade, on
			// another timing, left it at 45 %.) Not once a drain saw
			// later requests refused: a counter of refusals (HAProxy)
			// refuses G itself, and measured over the episode, G stayed
			// over its limit longer (of 2000 field draws, 60 shares
			// fell by over 2 points and 45 rose).
			r.gAt, r.gOK = r.cutSpanAt, r.cutSpanOK+r.gOK
		}
		r.cutSpanAt, r.cutSpanOK = r.gAt, r.gOK
		floor, fromPrev := from/2, false
		if r.trusted(now) {
			floor = 0
		} else if r.prevG > floor && r.prevG < r.good && r.heldLong(r.prevGAt, r.prevGOK, r.rise) {
			floor, fromPrev = r.prevG, true
		}
		r.bad = from
		// And the server took that long to refuse it: climbs are held
		// as long (a quota or counter fills after a while at any rate).
		r.memory = max(r.memory, min(r.taught(now, later(r.rise, r.first)), rampupMaxMemory))
		ok := r.gOK
		r.setGood(now, max(floor, min(from*(1-rampupEpsilon), r.delivered(now))))
		if fromPrev && r.good == floor {
			// Back at the G before, what the server delivered is
			// counted from when that G was set: refused there too (it
			// was over the limit as well), G falls by what it delivered
			// since, not by half again. (HAProxy answering 503, 2 per
			// 3 s: G fell 0.69 -> 0.68 -> 0.34 req/s, 53 % of the limit
			// over the field suite's last third.)
			r.gAt, r.gOK = r.prevGAt, r.prevGOK+ok
		}
		r.cutAt = now
		next = r.good
	}
	r.raised = false
	r.drain, r.drainAt = true, now
	r.set(now, cfg, gc, next)
	if r.settled() {
		r.probeAt = later(r.probeAt, now.Add(r.probeInterval(cfg)))
	}
}

// taught is how long the server took to refuse the rate G rose to at
// rise, as a memory to learn from a refusal at G now (rule 3): the time
// since, or rampupTrust for a refusal that late (rampupLateOK).
func (r *rampup) taught(now, rise time.Time) time.Duration {
	took := now.Sub(rise)
	if took > rampupMaxMemory && r.gOK >= rampupLateOK {
		return rampupTrust
	}
	return took
}

// failed notes a climb refused took after it began.
func (r *rampup) failed(took time.Duration) {
	r.memory = max(r.memory, min(took, rampupMaxMemory))
	r.fails = min(r.fails+1, rampupMaxFails)
	r.climbFail = r.step != 0 // the search's, not the slow start's
	r.step = rampupEpsilon
	if r.probe {
		r.cost, r.costing = 1, true // what a probe of the steady state costs
	}
	r.probe = false
}

// underRefused is rule 3's answer to a refusal of a request sent while
// R was under G after a failed climb: the server still counts the
// climb's excess (a sliding window of 124 per 14 s refused the rate
// under G a second after the climb's refusal), so it is the climb's
// event, not a new one at a rate under G. Taken as new, it set B there
// and G 2 % under it: 63-71 % of the limit, settled, for minutes. The
// drain goes on from here, as at any event.
func (r *rampup) underRefused(now time.Time) {
	if !r.drain {
		r.drain, r.drainAt = true, now
	}
	r.cut, r.okCut, r.changed = now, false, now
	r.clearRound()
}

// repay is how long G holds after a failed climb of the search before
// the next climb (rule 2): what the failure left the server refusing
// everything (climbLost), over twice the share of G the gap to B could
// win, as rule 2 spaces probes by what they win; two minutes at most,
// the longest a proof time holds. A climb whose failure costs the
// server's whole dead time (a counter's period, a quota's window, a
// Retry-After) is not worth repeating soon for a few per cent: HAProxy
// at 2 s latency refused a hundred requests per failed climb, five
// climbs in three minutes, to win the last 2 % of its limit. (Half of
// the share G could win: on four grids, climbs spaced by a quarter, a
// half and all of it missed 298, 292 and 293 targets of 800, the last
// with 49 shares under 95 % against 40. The slow start's first refusal
// is not repaid: it is how every search begins.)
func (r *rampup) repay() time.Duration {
	if r.climbLost <= 0 || r.bad <= r.good {
		return 0
	}
	d := r.climbLost.Seconds() * r.good / (2 * (r.bad - r.good))
	return time.Duration(min(d, rampupMaxMemory.Seconds()) * float64(time.Second))
}

// drainRound is rule 4: a refusal in a drain ends a round of nothing but
// refusals once it holds two, which halves the rate.
func (r *rampup) drainRound(now time.Time, cfg *ScopeConfig, gc int) {
	if r.rSig < rampupRound || r.rOK > 0 {
		return
	}
	knock := rampupKnocks / max(now.Sub(r.drainAt).Seconds(), 1e-3)
	r.set(now, cfg, gc, max(r.rate/2, min(r.rate, knock)))
}

// endDrain is the first success after a refusal event: the drain is
// over (rule 4) and the rate goes back to G, no higher than rule 5
// allows.
func (r *rampup) endDrain(now, started time.Time, cfg *ScopeConfig, gc int) {
	r.drain = false
	if r.climbFail {
		r.climbFail, r.climbLost = false, started.Sub(r.drainAt)
	}
	if r.costing {
		r.costing, r.lost = false, started.Sub(r.drainAt)
		if r.settled() {
			r.probeAt = now.Add(r.probeInterval(cfg))
		}
	}
	// The drain ended between the start of the last refused request
	// and that of this success (started).
	accept, dead := max(r.drainAt.Sub(r.accAt), 0), started.Sub(r.drainAt)
	deadLo := max(r.lastNo.Sub(r.drainAt), 0)
	n := r.accOK - 1 // this success opens the next cycle
	r.accAt, r.accOK = started, 1
	if n >= rampupCycleOK && (dead <= accept || dead < rampupCycleMin) {
		r.cycLo, r.cycHi = 0, 0 // a cycle that was no quota's: what rule 5 kept is forgotten
	}
	if dead > accept && dead >= rampupCycleMin && n >= rampupCycleOK {
		// Rule 5: the server refused everything for longer than it
		// accepted before, and a second or more (a quota spent, a
		// counter full): what it accepted from the end of the last
		// drain to the end of this one, over that time, is the most it
		// allows: G and B are that rate over the longest and the
		// shortest the cycle can have been. A climb that starts within
		// one of the quota's windows is first refused in the next:
		// climbs are held for two cycles.
		lo, hi := float64(n)/(accept+dead).Seconds(), float64(n)/(accept+deadLo).Seconds()
		// One such cycle is no quota yet: a rate limiter's one refusal
		// and its Retry-After look the same (nginx at 13 req/s sending
		// Retry-After: 5 refused the slow start's 32 once; read as a
		// quota, its cycle of 3 s of successes and 5 s of wait bounded
		// G and B at 1.6 and 4.2, a third of the limit, for two
		// minutes of climbs held 16 s each). It is a quota's when the
		// drain's own refusals span a second or more (the server
		// refused what came after its wait, at rates under G), or
		// when a later cycle measures a rate the first allows: then G
		// and B are what both allow.
		cycLo, cycHi := r.cycLo, r.cycHi
		r.cycLo, r.cycHi = lo, hi
		again := cycHi > 0 && lo <= cycHi*(1+rampupEpsilon) && cycLo <= hi*(1+rampupEpsilon)
		if again {
			lo, hi = max(lo, cycLo), min(hi, cycHi)
		}
		confirmed := again || deadLo >= rampupCycleMin
		if confirmed {
			r.memory = max(r.memory, min(2*(accept+dead), rampupMaxMemory))
		}
		if confirmed && lo*(1-rampupEpsilon) != r.good {
			if b := min(nonzero(r.bad, r.good), max(hi, lo*(1+rampupEpsilon))); b != r.bad {
				r.bad, r.bRule5 = b, true // never refused
			}
			r.setGood(now, lo*(1-rampupEpsilon))
			r.measured = true
			r.probeAt = now.Add(r.probeInterval(cfg))
			r.set(now, cfg, gc, r.good)
			return
		}
	}
	if r.good > 0 {
		r.reprove = 0
		if r.rate < r.good {
			r.reprove = min(dead, rampupMaxMemory) // as long as the server refused what came at or under G
		}
		to := r.good
		if now.Before(r.under) {
			to = min(r.good, max(r.rate, r.good*r.good/nonzero(r.bad, r.good)))
		}
		r.set(now, cfg, gc, to)
		return
	}
	// No rate proven yet: the next round starts now (the drain's
	// refusals in it would keep it from ever proving R).
	r.set(now, cfg, gc, r.rate)
}

// endRound judges the round (rule 1) once it is complete.
func (r *rampup) endRound(now time.Time, cfg *ScopeConfig, gc int) {
	need := rampupRound
	if r.bad > 0 {
		need = rampupRoundNearB
	}
	if r.rSig > 0 || r.rOK < need || r.rLast.Sub(r.rFirst) < max(rampupRoundMin, r.wait) {
		return
	}
	switch {
	case r.rate < r.good && now.Before(r.under):
		return // under G after a failed climb (rule 3)
	case r.rate < r.good:
		// Below G outside a drain (a ceiling that rose: the slots' at a
		// latency that came down): back to G.
		r.set(now, cfg, gc, r.good)
		return
	case !r.tookEffect() || r.rate == r.good && r.settled():
		r.set(now, cfg, gc, r.rate) // nothing to prove, or to wait for the probe: a new round
		return
	case r.rate == r.good && r.reprove > 0 && now.Sub(r.changed) < max(r.reprove, r.proofTime()):
		return // rule 4: G holds the drain's time and a proof time before the next climb
	case r.rate == r.good && now.Sub(r.changed) < r.repay():
		return // rule 2: a failed climb is repaid before the next
	}
	if r.rate > r.good {
		if now.Sub(r.changed) < r.proofTime() {
			return // a climb is held for the proof time
		}
		if r.rate > r.best {
			r.best, r.fails = r.rate, 0 // a new high: the limit rose
		}
		r.prevG, r.prevGAt, r.prevGOK = r.good, r.gAt, r.gOK
		r.setGood(now, r.rate)
		r.rise, r.raised = r.changed, true
		r.climbLost = 0 // repaid: the climb held
		r.reprove = 0   // the server held a rate above the drained G
	}
	switch {
	case r.bRule5 && r.bad > r.good && r.good >= r.bad*(1-rampupBoundNear):
		// A bound no climb met, near: climb past it (convex), from
		// twice the first step past a refused B.
		r.bad, r.bRule5 = 0, false
		r.step = max(r.step, 2*rampupEpsilon)
	case r.settled():
		r.probeAt = now.Add(r.probeInterval(cfg) / 2)
		r.set(now, cfg, gc, r.good)
		return
	case r.bad > 0 && r.bad <= r.good:
		r.bad = 0 // past the old ceiling: climb convex
		r.step = max(r.step, rampupEpsilon)
	}
	if r.bad == 0 && r.step > 0 {
		r.step = min(2*r.step, rampupProbeStep)
	}
	r.set(now, cfg, gc, r.climbTo())
}

// overWindow reports whether the server let more through than a window
// of rate hint allows (rule 7), since the last drain ended or since G was
// set, over at least the window (the longest wait for its reset the
// server named): over a span T of a window W or more, a window's count
// lets through at most its quota in each window T touches, hint x (T +
// W), as the quota of the window that ends and of the one that begins
// both fall in T.
func (r *rampup) overWindow(now time.Time, hint float64) bool {
	w := max(r.hintMem, time.Second)
	over := func(at time.Time, ok int) bool {
		t := now.Sub(at)
		return !at.IsZero() && t >= w && float64(ok) > hint*(t+w).Seconds()*(1+rampupEpsilon)
	}
	return over(r.accAt, r.accOK) || over(r.gAt, r.gOK)
}

// settled reports whether G is within 2 % under B: the search is over,
// and G waits for the probe time (rule 2).
func (r *rampup) settled() bool {
	// (The factor of 1+1e-9 lets G = B x 0.98 be within 2 % despite
	// rounding.)
	return r.bad > r.good && r.good > 0 && r.bad*(1-rampupEpsilon) <= r.good*(1+1e-9)
}

// climbTo is the rate of the next climb from G (rule 1): halfway to B on
// a log scale while B is above, at least 2 % up; else G raised by the
// step, doubled in slow start.
func (r *rampup) climbTo() float64 {
	if r.bad > r.good {
		return max(math.Sqrt(r.good*r.bad), r.good*(1+rampupEpsilon))
	}
	step := r.step
	if step == 0 {
		step = rampupMaxStep // slow start: doubling
	}
	return r.good * (1 + step)
}

// proofTime is how long a climb must hold: the longest the server took
// to refuse a rise, its last wait, a round at least; and from 2 % under a
// window's stated limit up, two of its windows (rule 7).
//
// The window is the longest wait for its reset the server named: it
// counts that long, and a sliding count (go-chi/httprate's) weighs the
// window before too, so a rise shows in two. Held a round instead, the
// climb past httprate's stated 93 per 9 s (10.3 req/s, 10.28 admitted)
// went to 17 req/s within a second and was refused for seconds: 90 % of
// the limit came after 249 s. Held two windows, after 56 s; on four grids
// 31 cold starts fewer miss their target, 62 are faster by 10 s or more
// and 5 slower (HAProxy's 82 per 3 s stated in 6 s windows: 170 -> 244 s).
func (r *rampup) proofTime() time.Duration {
	d := max(rampupRoundMin, r.memory, r.wait)
	if r.windows && r.hint > 0 && r.rate > r.hint*(1-rampupEpsilon) {
		d = max(d, 2*r.hintMem)
	}
	return d
}

// probeInterval is the time from a failed probe to the next (rule 2):
// the proof time doubled per failed climb in a row, and the Windows that
// spend the last one's refusals at MaxSignals a Window, at most
// rampupMaxProbeWindows Windows.
func (r *rampup) probeInterval(cfg *ScopeConfig) time.Duration {
	d := max(r.proofTime(), time.Second).Seconds() * math.Exp2(float64(max(r.fails-1, 0)))
	if r.cost > 0 {
		// A probe that cost n refusals comes n/MaxSignals Windows later
		// at least: MaxSignals a Window.
		d = max(d, cfg.Window.Seconds()*float64(r.cost)/float64(max(cfg.Rampup.MaxSignals, 1)))
		// A probe of a settled G can win 2 % (B is that close); one
		// that left the server refusing everything for a while cost all
		// of that while: the next comes 50 times as late, so probes never
		// cost more than they can win. (A sliding log of 659 per 52 s
		// gates a scope 50 s per refused probe: probed every minute or
		// two, it delivered 82 % of its limit over minutes 5-15.)
		d = max(d, r.lost.Seconds()/rampupEpsilon)
	}
	return time.Duration(min(d, rampupMaxProbeWindows*cfg.Window.Seconds()) * float64(time.Second))
}

// tookEffect reports whether the round's requests started at least
// rampupEffect as fast as the rate: the rate, not something else, paced
// them.
func (r *rampup) tookEffect() bool {
	n := r.rOK + r.rSig
	if n < 2 {
		return false
	}
	span := r.rLast.Sub(r.rFirst).Seconds()
	return span <= 0 || float64(n-1)/span >= rampupEffect*r.rate
}

// rampupJitter is the jitter of a scope under rampup: it never shortens
// a gap, and lengthens it by at most 2 % (less if j is narrower; none if
// j is off). Rampup paces at the server's limit, where a rate limiter
// refuses a request that comes early: nginx's limit_req with no burst
// refuses any gap shorter than 1/rate.
func rampupJitter(j Jitter) Jitter {
	return Jitter{Max: min(j.Max-j.Min, rampupJitterMax)}
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func nonzero(a, b float64) float64 {
	if a != 0 {
		return a
	}
	return b
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
