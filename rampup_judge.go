// This file holds rampup's judgments: of a search round (endRound), of a
// quota's refusal cycle (endCycle) and of a steady window (tick,
// endWindow), with the window's helpers and rampupJitter.

package throttle

import (
	"math"
	"time"
)

// endRound judges the round just answered.
func (r *rampup) endRound(now time.Time, cfg *ScopeConfig, globalCap int) {
	switch {
	case r.rOK == 0:
		// Nothing but refusals, 429s among them: a spent quota or a limiter that counts the
		// refused requests too. The server's memory, not this rate,
		// refuses: halve, but not below the configured pace, which keeps
		// asking often enough to see the quota come back.
		r.dead = true
		r.set(now, cfg, globalCap, max(r.rate/2, min(r.rate, r.start(cfg))))
	case r.settled && r.rSig < rampupSteadyRefusals, r.rSig > 0 && now.Sub(r.released) < rampupCycleMin:
		// The window decides; or the server's memory is still letting
		// go after a period of refusals (a sliding window frees what was
		// taken in a burst, request by request): no rate to blame.
		r.set(now, cfg, globalCap, r.rate)
	case r.rSig > 0:
		// The good rate was not (a burst answered it, or the limit
		// fell): go to what the server delivered in this round, the
		// limit of a drained token bucket.
		delivered := r.rate * float64(r.rOK) / float64(r.rOK+r.rSig)
		r.bad, r.good, r.settled = r.rate, 0, false
		r.set(now, cfg, globalCap, min(0.9*r.rate, 0.97*delivered))
	case r.settled:
		r.set(now, cfg, globalCap, r.rate)
	case !r.tookEffect():
		r.set(now, cfg, globalCap, r.rate) // something else held it back: proves nothing
	default:
		r.good = r.rate
		if r.bad != 0 && r.bad <= r.good {
			r.bad = 0
		}
		switch {
		case r.bad == 0:
			r.set(now, cfg, globalCap, 2*r.rate) // slow start
		case r.bad > r.good*(1+r.bisectEnd()):
			r.set(now, cfg, globalCap, math.Sqrt(r.good*r.bad))
		}
		if r.rate == r.good {
			r.settle(now, cfg, globalCap) // converged, or at the ceiling
		}
	}
}

// endCycle is called at the first success after a period of nothing but
// 429s: the server's memory let go, at the start of a quota's new window
// (rampup kept asking at the configured pace at least, so it sees that
// moment). From the previous such moment to this one the server allowed
// the successes counted since: a quota of N per minute, N in a minute,
// whenever within the minute they were asked for. When the cycle is long
// enough to say so, the rate settles just below that; it reports whether
// it did.
//
// The first cycle runs from the first request, so its estimate may be off
// either way. It is high after a partial window of a fixed quota (the
// whole quota spent in less than a window): the next window's refusals
// then come sooner, and the next cycle corrects it. It is low where the
// server counts refused requests too (HAProxy's stick table on
// http_req_rate): the client's own knocking, and the slow first seconds
// of the search, lengthen the cycle, and at the low rate no refusal comes
// to correct it. So the steady state judges the first estimate in
// windows of one cycle rather than of Window, and climbs from it (5, 10,
// then 20 %) a cycle apart, not a minute apart; and it keeps to windows
// of one cycle once a climb is refused, so the bisection between the last
// good and the refused rate goes on a cycle apart too (it went back to
// Window, a minute, before: 90 % of the limit after 280 s and 93.9 %
// steady; now 129 s and 98.9 %, with 0.5 signals a minute). Later cycles
// settle at no less than the rate a quiet steady window of a cycle or
// more proved. Against 50 requests in any 10 s, refused ones counted, the
// first estimate is 75 % of the limit; the scope held 64-77 % for minutes
// before these rules (internal/sim, cold-50per10s-counting).
func (r *rampup) endCycle(now time.Time, cfg *ScopeConfig, globalCap int, first bool) bool {
	el := now.Sub(r.cycle).Seconds()
	n := r.cycleOK
	r.cycle, r.cycleOK = now, 0
	if el < rampupCycleMin.Seconds() || n < rampupCycleMinOK {
		return false
	}
	// A rate that a steady window of a whole cycle or more ran at with
	// no refusal is allowed: the server counts at most a cycle back, so
	// a rate above its limit draws a refusal within any such window. The
	// cycle's average is lower when the cycle holds the climb to that
	// rate, or the refusals of a failed probe above it.
	allowed := max(float64(n)/el, r.proven)
	r.proven = 0
	// The server's memory (a quota's window, a sliding window's length)
	// is at most about the shortest cycle.
	if d := time.Duration(el * float64(time.Second)); r.cycleLen == 0 || d < r.cycleLen {
		r.cycleLen = d
	}
	r.bad, r.good = allowed*(1+rampupEpsilon), allowed*(1-rampupEpsilon)
	r.settle(now, cfg, globalCap)
	if first {
		// Unproven either way: climb from it rather than bisect
		// towards a bad rate no request was refused at.
		r.span, r.bad = time.Duration(el*float64(time.Second)), 0
	}
	return true
}

// window is the steady state's window: Window, or one cycle from a first
// cycle's estimate until the next cycle ends (see endCycle).
func (r *rampup) window(cfg *ScopeConfig) time.Duration {
	if r.span > 0 {
		return min(r.span, cfg.Window)
	}
	return cfg.Window
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

// bisectEnd is how close the search's bisection brings the good and bad
// rates: rampupBisectEnd where a failed probe is cheap in signals (rate x
// latency of 2 or less: one refusal or so), else rampupEpsilon, since the
// steady state would then probe the bad rate, the costliest probe, in its
// measured windows rather than during the start.
func (r *rampup) bisectEnd() float64 {
	if r.rate*r.lat.Seconds() <= 2 {
		return rampupBisectEnd
	}
	return rampupEpsilon
}

// settle ends the search at the good rate.
func (r *rampup) settle(now time.Time, cfg *ScopeConfig, globalCap int) {
	r.settled, r.climb, r.noOutage, r.span = true, 0, false, 0
	r.set(now, cfg, globalCap, r.good)
	r.newWindow(now)
}

// newWindow starts a window at now.
func (r *rampup) newWindow(now time.Time) {
	r.win, r.winSet = now, true
	r.winSignals, r.winOK, r.winCur, r.winProbe, r.winGated, r.winGate = 0, 0, 0, false, false, 0
}

// quiet reports whether tick has nothing to do at now: rampup is off, or
// now is inside the current window.
func (r *rampup) quiet(now time.Time, cfg *ScopeConfig) bool {
	return r == nil || r.winSet && now.Sub(r.win) < r.window(cfg)
}

// tick closes the windows that ended before now. It reports whether the
// rate changed.
func (r *rampup) tick(now time.Time, cfg *ScopeConfig, globalCap int) bool {
	if r == nil {
		return false
	}
	if !r.winSet {
		r.win, r.winSet = now, true
		return false
	}
	w := r.window(cfg)
	if now.Sub(r.win) < w {
		return false
	}
	before := r.rate
	if now.Sub(r.win) < 2*w { // else the scope sat idle: nothing to judge
		r.endWindow(now, cfg, globalCap)
	}
	r.win = r.win.Add(now.Sub(r.win) / w * w)
	r.winSignals, r.winOK, r.winCur, r.winProbe, r.winGated, r.winGate = 0, 0, 0, false, false, 0
	return r.rate != before
}

// endWindow judges a window: the steady state's rule, and the cap that
// ends a search rounds cannot finish.
func (r *rampup) endWindow(now time.Time, cfg *ScopeConfig, globalCap int) {
	rc := cfg.Rampup
	if r.rate == 0 || r.paused || r.winOK+r.winSignals == 0 {
		return
	}
	secs := min(r.window(cfg), now.Sub(r.win)).Seconds()
	if secs <= 0 {
		return
	}
	if r.winSignals > rc.MaxSignals {
		if r.settled && r.winProbe && (r.winCur <= rc.MaxSignals || r.cycleLen > 0) {
			// A failed probe's own cost: not a reason to step down.
			// Signals at the good rate after it are, but for a quota
			// (cycleLen: its refusals come at its window's end, which
			// endCycle judges): winCur counts the answers to the rate
			// in effect, and a token bucket's burst can prove a rate
			// 2 % over its limit good for a window, then refuse it
			// after the probe above (2.4 signals a minute at 20 req/s
			// with a burst of 10; 1.5 with this rule).
			return
		}
		if r.settled {
			// Over the target: step down 5 %, or to just below what the
			// window delivered when that is lower: the server accepted
			// that much while refusing the rest (its own waits held
			// back nothing it would have accepted).
			r.bad = min(nonzero(r.bad, r.rate), r.rate)
			r.good = r.rate * (1 - rampupStepDown)
			r.proven = 0 // the limit fell
			switch {
			case r.stated > 0:
				// The server states its limit, and refuses just below
				// it (go-chi/httprate rounds its sliding count): a step
				// down, not the pace its waits left, which a Retry-After
				// of its whole window after each refusal makes low.
			case r.winGated && secs >= rampupMinWindow.Seconds()/2:
				// The server's own waits (a Retry-After after each
				// refusal) paced the window: what it accepted over the
				// whole window, gates included, is its pace.
				r.good = min(r.good, float64(r.winOK)/secs*(1-rampupEpsilon))
			case secs >= rampupMinWindow.Seconds():
				r.good = min(r.good, float64(r.winOK)/secs*(1-rampupStepDown))
			}
			r.set(now, cfg, globalCap, r.good)
			return
		}
		return // searching: the rounds decide
	}
	if !r.settled {
		return // the rounds decide
	}
	if r.winSignals >= rc.MinSignals {
		return // on target
	}
	if r.skip > 0 {
		r.skip--
		return
	}
	if float64(r.winOK+r.winSignals) < rampupEffect*r.rate*secs {
		return // held back by something else: proves nothing
	}
	// Fewer signals than the target: the rate is proven; probe above it.
	r.good = max(r.good, r.rate)
	if r.span == 0 && r.cycleLen > 0 && secs >= r.cycleLen.Seconds() {
		// (Not a window of one first cycle: that cycle may be a part of
		// a quota's window, too short to prove a rate.)
		r.proven = max(r.proven, r.rate)
	}
	switch {
	case r.bad > r.good*(1+rampupEpsilon):
		r.set(now, cfg, globalCap, math.Sqrt(r.good*r.bad))
	case r.bad > r.good:
		r.set(now, cfg, globalCap, r.bad) // spend the target signal on the bad rate
	default:
		r.bad, r.fails = 0, 0 // the bad rate proved good: the limit rose
		r.climb = min(max(2*r.climb, rampupClimb), rampupClimbMax)
		r.set(now, cfg, globalCap, r.good*(1+r.climb))
	}
}

// rampupJitter is the jitter of a scope under rampup: it never shortens
// a gap, and lengthens it by at most 2 % (less if j is narrower; none if
// j is off). Rampup paces at the server's limit, where a rate limiter
// refuses a request that comes early: nginx's limit_req with no burst
// refuses any gap shorter than 1/rate, so symmetric ±10 % jitter held a
// rate at 89 % of such a limit, and ±50 % lower still.
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
