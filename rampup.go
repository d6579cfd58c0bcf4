package throttle

import (
	"math"
	"net/http"
	"time"
)

// RampupConfig configures rampup, for paid APIs and other servers that
// should be used as fast as their rate limit allows.
//
// Rampup steers one number, the scope's start rate, from the configured
// pace (1/Delay; with Delay 0, Concurrency requests per latency) up to what
// the server allows, and gives the scope as many slots as that rate needs
// at the latency seen (twice the rate times the latency, as BBR sizes its
// window at twice the bandwidth-delay product), up to MaxConcurrency. It
// owns the scope's rate-limit signals in both directions: a server whose
// limit is below the configured pace is followed down, to one request per
// Backoff.MaxDelay at the slowest. Backoff keeps what is not a rate limit:
// transport timeouts and outages.
//
// It has two speeds, because a cold start and a steady state ask different
// questions:
//
//   - Search, in rounds. A round is the answers to the requests started
//     since the rate last changed; it ends after two answers (four once a
//     refusing rate is known) spanning at least 100 ms and the server's
//     last Retry-After, or at once on a refusal of a rate above the last
//     good one. A round without a backoff signal, in which the rate took
//     effect (its starts came at least 70 % as fast as the rate: not held
//     back by another rule, another scope, a gate or a lack of requests),
//     proves the rate good. Until a rate draws a signal, each good round
//     doubles the rate: TCP's slow start, one doubling per round trip, so
//     a 1 req/s start reaches 50 req/s in seconds rather than the minutes
//     that one step per window took. A refused probe returns to the last
//     good rate at once and becomes the known bad rate; between the two,
//     rampup bisects geometrically (sqrt(good*bad): rates span orders of
//     magnitude) until they are within 2 %. When a round at or below the
//     good rate draws signals, the good rate was an illusion (a token
//     bucket's burst answered it): the rate falls to what the server
//     delivered in that round (the rate times its share of 2xx answers,
//     the limit of a drained token bucket), and the search goes on.
//   - Steady state, in windows (Window, default 60 s). Once the search has
//     converged, the rate is judged once per window, aiming at MinSignals
//     to MaxSignals backoff signals per window: a window with fewer probes
//     the bad rate (spending about one signal a window to follow a limit
//     that rises), and once that proves good, climbs by 5, 10, then 20 %
//     per window; a refused probe returns to half the good rate until the
//     next success, then to the good rate (a limiter that counts refused
//     requests too stays shut while the client knocks near its limit);
//     failed probes come 1, 3, 7 ... windows apart, and at
//     least as far apart as their cost in signals (half of rate x latency
//     against a strict limiter). A window with more signals than the
//     target steps the rate down by 5 %, or to just below the 2xx rate it
//     delivered when that is lower; a window with MaxSignals+4 ends early.
//
// Some servers say more than refusals. A server that states its limit
// (RateLimit-Policy, or X-RateLimit-Limit over its reset: Feedback's
// StatedRate) is paced 2 % below it from its first response, never above.
// A quota counted per minute shows as periods of nothing but 429s: each
// such period's end is the start of the quota's next window, and the
// successes from one end to the next, over that time, are its rate; the
// scope settles just below it. The first estimate, counted from the first
// request, can be low (a limiter that counts refused requests too, like
// HAProxy's stick tables, stays shut while the search knocks): it is
// judged, and climbed from, in windows of one cycle; and a later cycle
// never settles below a rate that a quiet steady window of a cycle or
// more proved. A success whose headers say the quota is spent is a rate
// signal too, when the quota is of fixed windows (a sliding one says "0
// remaining" at every success near its limit; see Feedback.Exhausted).
// A server that states its limit and refuses just below it steps the
// rate down by 5 % a window of refusals, not to the pace its
// Retry-After gates left.
//
// Signals: 429, and 503 and the other backoff statuses, count alike when
// they come interleaved with successes: many servers, nginx's limit_req
// among them, limit with 503. Two 5xx in a row at the steady rate halve it
// until the next answer; four in a row with no success and no 429 between
// are an outage, not a rate limit: rampup pauses without marking any rate
// bad, backoff probes the outage (after 5 s, then one request per
// Backoff.OutageProbe), and the first success returns the scope to the
// pace it had (one within 10 s says it was a rate limit after all: the
// search goes on from half the rate). A round of nothing but 429s (a quota
// spent until its window ends, a limiter that counts refused requests too)
// halves the rate each round, down to the configured pace, without taking
// it for a limit. Responses to requests started before the rate last
// changed answer the old rate and move nothing. Server-given waits still
// gate the scope. While rampup is on, jitter never shortens a gap and
// lengthens it by 2 % at most: a rate limiter refuses what comes early.
//
// A zero RampupConfig is invalid (MinSignals must be >= 1, even with
// Enabled false), except in a Config.Scopes entry or a SetScopeConfig
// argument, where it stands for Default's; start from
// DefaultConfig().Default.Rampup. A plain value: copy it freely, but don't
// change it while another goroutine reads it.
type RampupConfig struct {
	// Enabled turns rampup on. Default false.
	Enabled bool
	// MinSignals and MaxSignals are the target number of backoff signals
	// per Window in the steady state. Default 1 and 1. MinSignals must be
	// >= 1, MaxSignals >= MinSignals.
	MinSignals, MaxSignals int
	// MinDelay is the floor of the delay between starts: 1/MinDelay caps
	// the rate. Default 0 (no cap).
	MinDelay time.Duration
	// MaxConcurrency caps the concurrency. Default 0, which means the
	// manager's GlobalConcurrency.
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
	if err := checkDuration(prefix+".MinDelay", c.MinDelay); err != nil {
		return err
	}
	if c.MaxConcurrency < 0 {
		return &ConfigError{Field: prefix + ".MaxConcurrency", Reason: "must be >= 0"}
	}
	return nil
}

// The numbers of rampup, and why they are these:
const (
	// rampupRoundFast and rampupRoundSlow are the answers that end a
	// search round: two while no rate was refused (one doubling per round
	// trip needs the first answers, and two rather than one so a single
	// lucky answer proves nothing), four while bisecting (the probes are
	// close to the limit, where a token bucket answers the first requests
	// of a probe from its burst). rampupRoundSteady is the round of the
	// steady state, which only watches for a limit that fell (more than
	// half refused) or an outage: eight answers.
	rampupRoundFast = 2
	// rampupRoundMin is the least time a round's requests span: at
	// 1 ms latency two answers come back within a millisecond, and a
	// server's burst allowance (50 requests at once) would prove rate
	// after rate up to thousands a second. Rounds of 100 ms at least let
	// a burst of B hide rates up to about 5B a second, not any rate.
	rampupRoundMin    = 100 * time.Millisecond
	rampupRoundSlow   = 4
	rampupRoundSteady = 8
	// rampupMaxMemory caps how long a round must last after server waits
	// (see onAnswer).
	rampupMaxMemory = 10 * time.Second
	// rampupCycleMin and rampupCycleMinOK: a refusal cycle (from the end
	// of one period of nothing but 429s to the end of the next, see
	// endCycle) is measured when it lasts at least 5 s with at least 10
	// successes; shorter ones are a token bucket's, which rounds find.
	rampupCycleMin   = 5 * time.Second
	rampupCycleMinOK = 10
	// rampupSteadyRefusals signals in a steady round of eight (a quarter
	// refused) say the limit fell: the search starts again from what the
	// server delivered. The steady state spends about one signal a
	// window; two in eight answers are not that.
	rampupSteadyRefusals = 2
	// rampupEffect is the share of the rate a round's (or a window's)
	// starts must reach for it to prove the rate: 70 % leaves room for
	// jitter (±10 %) and for the first start's wait for the pace.
	rampupEffect = 0.7
	// rampupEpsilon is the margin below a rate the server states or a
	// quota cycle proved, and the steady state's bisection end: good
	// and bad within 2 %.
	rampupEpsilon = 0.02
	// rampupBisectEnd ends the search's bisection: good and bad within
	// 4 %. Each failed probe costs the cold start about one answer in a
	// round trip's worth (a refused request, and the token it spoiled
	// against a bucket with no burst), and the last ones, at 1, 2 and 4 %
	// above the good rate, gained less than they cost: at 1 req/s seven
	// probes (2, 1.41, 1.19, 1.09, 1.04, 1.02, 1.01) cost the first minute
	// 90 % of the limit (82 s to reach it); five, 58.6 s. The steady
	// state finishes the bisection, a window at a time. Only where a
	// failed probe is cheap (see bisectEnd): at 50 req/s and 2 s one
	// costs about 50 refusals, better spent in the search than in the
	// steady state's windows.
	rampupBisectEnd = 0.04
	// rampupStepDown is the step down of a window over the target: 5 %
	// of the rate.
	rampupStepDown = 0.05
	// rampupClimb is the first climb of a quiet steady window once the
	// bad rate proved good (the limit rose): 5 %, doubling per window up
	// to rampupClimbMax.
	rampupClimb = 0.05
	// rampupClimbMax caps those climbs at 20 % a window. Doubling without
	// a cap reached 40 % by the fourth window climbing from a low first
	// estimate (63 % of HAProxy's limit: 5, 10, 20, then 40 % over 88 %),
	// a probe 23 % over a limiter that counts refused requests too, whose
	// refusals cost 6 signals in the minute (the field suite's haproxy-429
	// case, once in four runs). At 20 % a probe overshoots a limit by 20 %
	// at most, and a limit that doubled is still found in five windows.
	rampupClimbMax = 0.2
	// rampupConcGain sizes the slots: twice the rate times the latency.
	rampupConcGain = 2
	// rampupJitterMax is the widest jitter under rampup (see rampupJitter).
	rampupJitterMax = 0.02
	// rampupFirstLatency is the latency assumed before the first answer,
	// to size the slots: with one slot and a server that takes 2 s, the
	// first round would be paced by the slot, not the rate, and prove
	// nothing (TCP likewise starts with several segments in flight).
	rampupFirstLatency = time.Second
	// rampupEarlyWindow: a steady window with this many signals more than
	// MaxSignals ends at once rather than at its end. A token bucket
	// drained by a rate a few percent too high refuses one request in
	// many, evenly, which no steady round of eight sees twice; a minute
	// of it costs dozens of signals at tens of requests a second.
	rampupEarlyWindow = 3
	// rampupOutageConfirm: an outage that ends within 10 s, at backoff's
	// first probe (backoff.onOutage), was a rate limit.
	rampupOutageConfirm = 10 * time.Second
	// rampupMinWindow is the least time over which a window's 2xx rate
	// caps a steady rate that drew too many signals (see endWindow): 10 s,
	// long enough that a burst of a few requests moves the rate by little
	// (5 s measured worse); half that where the server's own waits paced
	// the window.
	rampupMinWindow = 10 * time.Second
	// rampupMaxSkip caps the steady windows skipped between probes after
	// a costly one (see endWindow): half an hour at the default Window,
	// so a limit that rose is found within about that.
	rampupMaxSkip = 30
	// rampupMaxRate bounds the rate (one start per microsecond).
	rampupMaxRate = 1e6
	// outageRun is how many backoff signals in a row, with no success and
	// no 429 between, make an outage rather than a rate limit. A rate
	// limiter refuses runs of about rate/limit - 1 requests between its
	// successes, and rampup probes at most twice a rate proven good, so
	// runs of one or two; four in a row is a server failing everything.
	outageRun = 4
)

// rampup is the learned rampup state of one scope: a rate controller with
// time passed in (see RampupConfig).
type rampup struct {
	rate     float64       // starts per second now; 0 before the first answer (the configured pace)
	good     float64       // highest rate proven good; 0: none
	bad      float64       // lowest rate that drew signals; 0: none
	lat      time.Duration // smoothed latency of good answers
	changed  time.Time     // when rate last changed
	settled  bool          // the search is over: steady state, judged per window
	paused   bool          // an outage: backoff probes it, the first success resumes
	pausedAt time.Time     // when
	noOutage bool          // a run is no outage until the search settles (see onAnswer)
	dead     bool          // in a period of nothing but 429s
	released time.Time     // when the last such period ended
	cycle    time.Time     // when the last such period ended (the first answer, before any)
	cycleOK  int           // successes since
	run      int           // backoff signals in a row, no success between
	dip      bool          // halved (two 5xx at the steady rate, a refused steady probe) until the next success
	stated   float64       // the lowest rate the server stated it allows; 0: none
	memory   time.Duration // the last server-given wait: rounds last at least as long
	run429   bool          // the run holds a 429: a rate limit, not an outage
	climb    float64       // the next steady climb above good (a fraction)
	span     time.Duration // the steady window of one cycle, from a first cycle's estimate to the next cycle's end; 0: Window
	cycleLen time.Duration // the shortest cycle measured
	proven   float64       // the fastest rate a quiet steady window of a cycle or more proved; 0: none

	// the round: answers to the requests started since changed, and the
	// first and last of their starts (answers, not starts, are counted:
	// with a Store, other processes start requests this one never sees)
	rFirst, rLast time.Time
	rOK, rSig     int

	// the window: every answer of the current Window
	win        time.Time
	winSet     bool
	winSignals int
	winCur     int           // signals at the current rate (after changed)
	winProbe   bool          // a steady probe failed in the window
	winGated   bool          // a signal in the window carried a server-given wait
	winGate    time.Duration // how long server waits held the scope in the window
	gateEnd    time.Time     // the end of the last server wait
	skip       int           // steady windows still to pass before the next probe
	fails      int           // steady probes failed in a row
	winOK      int
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

// ceiling is the fastest rate rampup may try: 1/Rampup.MinDelay, and what
// MaxConcurrency slots carry at the latency seen.
func (r *rampup) ceiling(cfg *ScopeConfig, globalCap int) float64 {
	c := float64(rampupMaxRate)
	if r.stated > 0 {
		c = r.stated // the rate the server states
	}
	if d := cfg.Rampup.MinDelay; d > 0 {
		c = float64(time.Second) / float64(d)
	}
	if r.lat > 0 {
		c = min(c, float64(r.maxConc(cfg, globalCap))*float64(time.Second)/float64(r.lat))
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
// the latency, at least the configured concurrency, at most the cap.
func (r *rampup) concurrency(cfg *ScopeConfig, globalCap int) (int, bool) {
	if r == nil {
		return 0, false
	}
	lat := r.lat
	if lat == 0 {
		lat = rampupFirstLatency
	}
	need := math.Ceil(rampupConcGain * r.current(cfg) * lat.Seconds())
	return max(cfg.Concurrency, int(min(need, float64(r.maxConc(cfg, globalCap))))), true
}

// learned reports whether rampup holds anything worth keeping.
func (r *rampup) learned() bool { return r != nil && (r.rate != 0 || r.good != 0 || r.bad != 0) }

// set changes the rate and starts a new round.
func (r *rampup) set(now time.Time, cfg *ScopeConfig, globalCap int, rate float64) {
	rate = r.clamp(cfg, globalCap, rate)
	if rate != r.rate {
		r.rate, r.changed = rate, now
	}
	r.rOK, r.rSig = 0, 0
	r.rFirst, r.rLast = time.Time{}, time.Time{}
}

// rampupVerdict is what rampup did with an answer, for backoff.
type rampupVerdict uint8

const (
	rampupLeft   rampupVerdict = iota // not taken: backoff learns from it as without rampup
	rampupTook                        // a rate signal rampup acted on: backoff must not step
	rampupOutage                      // an outage begins: backoff probes it from now
)

// onAnswer learns from one answer at now (nothing from a transport
// error: rampup steers a rate, and a timeout says nothing of it). A
// success whose headers say the quota is spent (of fixed windows, see
// spentQuota) counts as a rate signal, which came before the 429: rampup
// aims at few of them too; it is never an outage, as a 429 is not.
func (r *rampup) onAnswer(now time.Time, cfg *ScopeConfig, ans *answer) rampupVerdict {
	if r == nil || ans.status == 0 {
		return rampupLeft
	}
	globalCap, started, latency := ans.globalCap, ans.started, ans.latency
	signal := ans.signal || ans.spent // a rate signal
	is429 := ans.status == http.StatusTooManyRequests || ans.spent
	var waited time.Duration // the server-given wait it gated the scope with
	if ans.gated {
		waited = ans.gate
	}
	if signal {
		if r.released.IsZero() || now.Sub(r.released) >= rampupCycleMin {
			// (Not the refusals just after a period of them ended: the
			// server's memory still letting go, as a sliding window
			// frees what a burst took at the pace it was taken; no rate
			// to blame, as endRound says.)
			r.winSignals++
		}
		r.winGated = r.winGated || waited > 0 && !ans.spent
		if end := now.Add(waited); waited > 0 && end.After(r.gateEnd) {
			r.winGate += end.Sub(later(now, r.gateEnd)) // gates overlap: count each instant once
			r.gateEnd = end
		}
		if waited > 0 {
			// Rounds must outlast the server's waits: between two gates
			// a rate the server refuses looks good for a second.
			r.memory = min(waited, rampupMaxMemory)
		}
	} else {
		r.winOK++
		r.cycleOK++
		if latency > 0 {
			if r.lat == 0 {
				r.lat = latency
			} else {
				r.lat += (latency - r.lat) / 8
			}
		}
	}
	if r.rate == 0 {
		r.rate, r.changed = r.clamp(cfg, globalCap, r.start(cfg)), started
		r.cycle = started
	}
	if s := ans.stated; s > 0 && s < rampupMaxRate && (r.stated == 0 || s < r.stated) {
		// The server states its limit: pace just below it from now on,
		// never above, and search no more.
		r.stated = s
		r.good, r.bad = s*(1-rampupEpsilon), s
		r.settle(now, cfg, globalCap)
	}
	switch {
	case r.paused && signal:
		return rampupLeft // backoff probes the outage
	case r.paused:
		r.paused, r.run, r.run429 = false, 0, false
		if now.Sub(r.pausedAt) < rampupOutageConfirm {
			// Back at the first probe: the "outage" was a rate limiter
			// refusing a run of requests at a rate far above its limit
			// (a token bucket's burst made that rate look good). Search
			// down from half of it, and take no run for an outage again
			// until the search has settled.
			r.noOutage, r.settled = true, false
			r.bad, r.good = r.rate, 0
			r.set(now, cfg, globalCap, r.rate/2)
			return rampupLeft
		}
		// The server answers again: back to the rate the outage found.
		r.set(now, cfg, globalCap, r.rate)
		return rampupLeft
	}
	// The run of failures counts every answer, whatever rate its request
	// was sent at: an outage fails them all.
	if !signal {
		r.run, r.run429 = 0, false
		if r.dip {
			// The dip's 5xx was a refusal among successes, not an
			// outage: back to the good rate.
			r.dip = false
			if !r.dead { // else the period of refusals ends below, at the good rate or a cycle's
				r.set(now, cfg, globalCap, max(r.rate, r.good))
			}
		}
	} else {
		r.run = min(r.run+1, outageRun)
		r.run429 = r.run429 || is429
		if r.run >= outageRun && !r.run429 && !r.noOutage {
			r.paused, r.pausedAt, r.dip = true, now, false
			if r.good > 0 {
				r.rate = max(r.rate, r.good) // resume where the outage found it
			}
			return rampupOutage
		}
		if r.settled && r.run >= 2 && !r.run429 && !r.noOutage && r.rate <= r.good {
			// Two 5xx in a row at the steady rate: the start of an
			// outage, or a rare pair of refusals. Halve until the next
			// answer tells which: a success restores the rate at once,
			// four in a row are an outage, reached with fewer requests
			// sent meanwhile.
			r.dip = true
			r.set(now, cfg, globalCap, r.rate/2)
			return rampupTook
		}
	}
	if started.Before(r.changed) {
		if signal {
			return rampupTook // it answers an older rate, already acted on
		}
		return rampupLeft
	}
	if r.rOK+r.rSig == 0 || started.Before(r.rFirst) {
		r.rFirst = started
	}
	if started.After(r.rLast) {
		r.rLast = started
	}
	if signal && waited >= rampupCycleMin && !r.dead {
		// A refusal that names its end (Retry-After, a RateLimit reset):
		// the gate holds the scope until then, and the first success
		// after it ends a cycle like a period of refusals does.
		r.dead = true
	}
	if !signal {
		if r.dead {
			first := r.released.IsZero()
			r.dead, r.released = false, now
			long := now.Sub(r.cycle) >= rampupCycleMin
			if r.endCycle(now, cfg, globalCap, first) {
				return rampupLeft
			}
			if !long {
				// Refused again soon after the last refusals ended:
				// the rate before them was not one the server allows.
				r.good, r.settled = 0, false
			}
			// Back to the good rate, in a new round so the refusals
			// before count against nothing.
			r.set(now, cfg, globalCap, max(r.rate, r.good))
		}
		r.rOK++
	} else {
		r.rSig++
	}
	if signal && r.rate > r.good && r.good > 0 {
		// A probe above the last good rate failed: back there at once.
		r.bad, r.winProbe = r.rate, r.settled
		if r.settled {
			// Probe less often after each failed probe: 1, 3, 7 ...
			// windows between them, and at least as many windows as
			// the probe cost signals over the target. A probe costs
			// the requests it had in flight when the first refusal came
			// back, about half of rate x latency against a token bucket
			// with no burst: 50 at 50 req/s and 2 s.
			r.fails = min(r.fails+1, 5)
			cost := math.Ceil(r.rate * r.lat.Seconds() / 2 / float64(cfg.Rampup.MaxSignals))
			r.skip = int(min(max(float64(int(1)<<r.fails-1), cost-1), rampupMaxSkip))
			// And at half the good rate until the next success: a
			// limiter that counts refused requests too (HAProxy's
			// stick tables) stays shut after a probe over its limit
			// for as long as the client knocks at nearly that rate,
			// and each knock is one more refusal (4-6 per failed probe
			// at the good rate in the field suite's haproxy-429 case).
			// A token bucket answers the next request at the good rate
			// anyway: the first success restores it (see dip). Not for
			// a success that says the quota is spent: the server's own
			// gate holds the scope until its reset, and the spent
			// answers that come before it in a row would end a round
			// at the halved rate and take it for the limit.
			if !ans.spent {
				r.dip = true
				r.set(now, cfg, globalCap, r.good/2)
				return rampupTook
			}
		}
		r.set(now, cfg, globalCap, r.good)
		return rampupTook
	}
	need := rampupRoundFast
	switch {
	case r.settled:
		need = rampupRoundSteady
		if signal {
			r.winCur++
		}
		if signal && r.rOK > 0 && r.winCur > cfg.Rampup.MaxSignals+rampupEarlyWindow && !r.dead && now.Sub(r.released) >= rampupCycleMin {
			r.endWindow(now, cfg, globalCap)
			r.newWindow(now)
			return rampupTook
		}
	case r.bad > 0:
		need = rampupRoundSlow
	}
	if r.rOK+r.rSig >= need && r.rLast.Sub(r.rFirst) >= max(rampupRoundMin, r.memory) && (r.rOK > 0 || r.run429 || r.noOutage) {
		// (A round of nothing but 5xx stays open: four in a row are an
		// outage, not a rate to halve.)
		r.endRound(now, cfg, globalCap)
	}
	if signal {
		return rampupTook
	}
	return rampupLeft
}
