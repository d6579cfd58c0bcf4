package throttle

import (
	"math"
	"time"
)

// RampupConfig configures rampup (DESIGN rule 10), for paid APIs and other
// servers that should be used as fast as their rate limit allows.
//
// Rampup walks one ladder of levels. Level 0 is the configured Delay and
// Concurrency; each level up halves the delay until it reaches MinDelay (a
// finite number of steps: the last one lands on MinDelay exactly, or on 0
// once below a millisecond), then adds one to the concurrency, up to
// MaxConcurrency. In that concurrency phase starts are paced at the
// smoothed latency divided by the level's concurrency, which moves
// continuously between whole numbers: the slots don't open in lockstep (a
// burst a token bucket would refuse) and the rate is not stuck at steps of
// 1/latency. At the end of each Window with responses:
//
//   - fewer backoff signals than MinSignals: the level is proven good and
//     rampup climbs: while no bad level is known, one delay level a window
//     (each doubles the rate; levels the slots already hold back are
//     skipped), then 1, 2, 4 ... slots a window (slow start); else halfway
//     to the lowest level that drew too many signals (bisection), else to
//     that bad level itself once the two are within 2 % of a step, so it
//     spends about the target number of signals probing;
//   - MinSignals..MaxSignals signals: on target, it stays.
//
// Rampup takes the 429 signals; 5xx and timeouts go to backoff, so an
// outage is probed as without rampup. A 429 at a level above the last good
// one returns there at once and
// marks the level bad; more than MaxSignals at the good level step down by
// a tenth of a level (7 % of the rate), twice as far for each further
// window over the target. At level 0 signals go to backoff as usual. Only requests
// started since the last change of level count, so responses to requests
// sent at the old level don't push it twice. Server-given waits still gate
// the scope. So rampup settles between the last good and the first bad
// level with about the target number of signals per window. While rampup
// is on, jitter is drawn from the narrower of Jitter and Backoff.Jitter.
type RampupConfig struct {
	// Enabled turns rampup on. Default false.
	Enabled bool
	// MinSignals and MaxSignals are the target number of backoff signals
	// per Window. Default 1 and 1. MinSignals must be >= 1, MaxSignals >=
	// MinSignals.
	MinSignals, MaxSignals int
	// MinDelay is the floor of the delay. Default 0.
	MinDelay time.Duration
	// MaxConcurrency caps the concurrency. Default 0, which means the
	// manager's GlobalConcurrency.
	MaxConcurrency int
}

// DefaultRampupConfig returns the rampup defaults, off.
func DefaultRampupConfig() RampupConfig {
	return RampupConfig{MinSignals: 1, MaxSignals: 1}
}

func (c RampupConfig) validate(prefix string) error {
	if c.MinSignals < 1 {
		return &ConfigError{prefix + ".MinSignals", "must be >= 1"}
	}
	if c.MaxSignals < c.MinSignals {
		return &ConfigError{prefix + ".MaxSignals", "must be >= MinSignals"}
	}
	if err := checkDuration(prefix+".MinDelay", c.MinDelay); err != nil {
		return err
	}
	if c.MaxConcurrency < 0 {
		return &ConfigError{prefix + ".MaxConcurrency", "must be >= 0"}
	}
	return nil
}

// rampupEpsilon is how close, in levels, the good and bad levels get
// before bisection stops.
const rampupEpsilon = 0.02

// rampupStepDown is the first step down, in levels, from a good level that
// drew more signals than the target (0.1 level: 7 % of the rate).
const rampupStepDown = 0.1

// rampup is the learned rampup state of one scope.
type rampup struct {
	pos     float64 // current level
	good    float64 // highest level proven good
	bad     float64 // lowest level that drew too many signals
	hasBad  bool
	step    float64       // the next climb while no bad level is known; doubles per quiet window
	lat     time.Duration // smoothed latency of good answers: paces the concurrency phase
	down    float64       // the last step down; doubles while windows stay over target
	changed time.Time     // when the level last changed
	k       float64       // levels in the delay phase
	top     float64       // highest level

	win        time.Time
	winSet     bool
	winSignals int
	winOK      int
}

// configure computes the ladder for cfg and keeps the level within it.
func (r *rampup) configure(cfg *ScopeConfig, globalCap int) {
	rc := cfg.Rampup
	r.k = 0
	if cfg.Delay > rc.MinDelay {
		floor := max(rc.MinDelay, time.Millisecond)
		r.k = math.Ceil(math.Log2(float64(cfg.Delay) / float64(floor)))
		if r.k < 0 {
			r.k = 0
		}
	}
	capC := rc.MaxConcurrency
	if capC == 0 {
		capC = globalCap
	}
	r.top = r.k + float64(max(0, capC-cfg.Concurrency))
	r.pos = min(r.pos, r.top)
	r.good = min(r.good, r.pos)
	if r.hasBad && r.bad > r.top {
		r.hasBad = false
	}
}

// delay is the delay of the current level, ok=false when rampup is off.
func (r *rampup) delay(cfg *ScopeConfig) (time.Duration, bool) {
	if !cfg.Rampup.Enabled {
		return 0, false
	}
	return r.delayAt(cfg, r.pos), true
}

func (r *rampup) delayAt(cfg *ScopeConfig, pos float64) time.Duration {
	if pos >= r.k {
		floor := time.Duration(0)
		if cfg.Rampup.MinDelay >= time.Millisecond || cfg.Delay <= cfg.Rampup.MinDelay {
			floor = min(cfg.Rampup.MinDelay, cfg.Delay)
		}
		// Pace the slots: x requests per latency, evenly spaced, so the
		// slots don't open in lockstep and reach the server as one burst;
		// x moves continuously between concurrencies, so the rate does.
		x := float64(cfg.Concurrency) + (pos - r.k)
		return max(floor, scaleDuration(r.lat, 1/x))
	}
	return max(cfg.Rampup.MinDelay, scaleDuration(cfg.Delay, math.Exp2(-pos)))
}

// concurrency is the concurrency of the current level.
func (r *rampup) concurrency(cfg *ScopeConfig) (int, bool) {
	if !cfg.Rampup.Enabled || r.pos < r.k {
		return 0, false
	}
	return cfg.Concurrency + int(math.Ceil(r.pos-r.k)), true
}

func (r *rampup) learned() bool { return r.pos != 0 || r.hasBad }

func (r *rampup) setLevel(now time.Time, pos float64) {
	pos = min(max(pos, 0), r.top)
	if pos != r.pos {
		r.pos, r.changed = pos, now
	}
}

// onFeedback counts one response. It reports whether it handled a signal
// (by stepping down), so that backoff does not step as well.
func (r *rampup) onFeedback(now time.Time, cfg *ScopeConfig, started time.Time, signal bool, latency time.Duration) bool {
	if !signal {
		r.winOK++
		if latency > 0 {
			if r.lat == 0 {
				r.lat = latency
			} else {
				r.lat += (latency - r.lat) / 8
			}
		}
		return false
	}
	r.winSignals++
	if started.Before(r.changed) {
		return r.pos > 0 // answered by the last change already
	}
	switch {
	case r.pos > r.good: // a probe failed: back to the last good level
		r.bad, r.hasBad, r.step = r.pos, true, 0
		r.setLevel(now, r.good)
		return true
	case r.winSignals > cfg.Rampup.MaxSignals && r.pos > 0: // the good level isn't
		// Step down a little, then twice as far for each further window
		// over the target: a limit that moved slightly costs little, one
		// that fell far is found in a few windows.
		r.down = max(r.down*2, rampupStepDown)
		r.bad, r.hasBad, r.step = r.pos, true, 0
		r.good = max(0, r.pos-r.down)
		r.setLevel(now, r.good)
		r.winSignals = 0 // count the new level's window afresh
		return true
	}
	return r.pos > 0
}

// quiet reports whether tick has nothing to do at now: rampup is off, or
// now is inside the current window.
func (r *rampup) quiet(now time.Time, cfg *ScopeConfig) bool {
	return !cfg.Rampup.Enabled || r.winSet && now.Sub(r.win) < cfg.Window
}

// tick closes the windows that ended before now.
// It reports whether the level changed.
func (r *rampup) tick(now time.Time, cfg *ScopeConfig) bool {
	if !cfg.Rampup.Enabled {
		return false
	}
	if !r.winSet {
		r.win, r.winSet = now, true
		return false
	}
	if now.Sub(r.win) < cfg.Window {
		return false
	}
	changed := false
	if r.winSignals <= cfg.Rampup.MaxSignals {
		r.down = 0
	}
	if r.winOK+r.winSignals > 0 && r.winSignals < cfg.Rampup.MinSignals {
		before := r.pos
		r.climb(now, cfg)
		changed = r.pos != before
	}
	r.win = r.win.Add(now.Sub(r.win) / cfg.Window * cfg.Window)
	r.winSignals, r.winOK = 0, 0
	return changed
}

// climb moves up after a window with fewer signals than the target.
func (r *rampup) climb(now time.Time, cfg *ScopeConfig) {
	r.good = r.pos
	if r.hasBad && r.bad <= r.good {
		r.hasBad = false
	}
	switch {
	case !r.hasBad:
		// In the delay phase each level doubles the rate already: one a
		// window. In the concurrency phase, where a level adds one slot,
		// slow start: 1, 2, 4 ... levels a window until a level draws too
		// many signals, then bisection. Delay levels the slots already
		// hold back (delay below latency/concurrency) are skipped: they
		// would not change the rate.
		if r.pos < r.k {
			r.step = 1
		} else {
			r.step = max(r.step*2, 1)
		}
		next := math.Floor(r.pos + r.step)
		if next < r.k && r.lat > 0 && r.delayAt(cfg, next) <= scaleDuration(r.lat, 1/float64(cfg.Concurrency)) {
			next = r.k
		}
		r.setLevel(now, next)
	case r.bad-r.good > rampupEpsilon:
		r.setLevel(now, (r.good+r.bad)/2)
	default:
		r.setLevel(now, r.bad) // spend the target signal probing the bad level
	}
}
