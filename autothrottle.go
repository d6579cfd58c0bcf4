package throttle

import (
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
)

// AutoThrottleConfig configures Scrapy's AutoThrottle rule for one scope:
// the delay follows latency / TargetConcurrency. Each response moves the
// delay halfway toward it (at once when it is higher), within Delay and
// MaxDelay; a response other than 200 never lowers it.
//
// The scope's Delay is AutoThrottle's floor, as DOWNLOAD_DELAY is
// Scrapy's: AutoThrottle never goes under it. Delay is a politeness floor
// the package guarantees (starts at least Delay×(1+Jitter.Min) apart)
// whatever adapts above it, and a latency rule that went under it would
// break that promise on every fast site, where it matters most. So
// AutoThrottle only slows a scope down from Delay: over DefaultConfig's
// Delay of 1 s it runs as DefaultConfig does on any site that answers
// within a second (times TargetConcurrency), after a slower start
// (StartDelay), and never faster. New warns about every scope whose
// AutoThrottle is on over a Delay of 1 s or more, naming both settings,
// through the Warning hook and the logger. For AutoThrottle to speed a
// scope up on fast sites, set Delay to 0, or to the least gap you want
// between starts.
//
// A zero AutoThrottleConfig is invalid (TargetConcurrency must be > 0,
// even with Enabled false), except in a Config.Scopes entry or a
// SetScopeConfig argument, where it stands for Default's; start from
// DefaultConfig().Default.AutoThrottle. A plain value: copy it freely, but
// don't change it while another goroutine reads it.
type AutoThrottleConfig struct {
	// Enabled turns AutoThrottle on. Default false.
	Enabled bool
	// StartDelay is the delay before the first response; the scope starts at
	// max(Delay, StartDelay). Default 5s.
	StartDelay time.Duration
	// MaxDelay caps the AutoThrottle delay. Default 60s.
	MaxDelay time.Duration
	// TargetConcurrency is the average number of requests the scope should
	// have in flight at the server. Default 1.0. Must be > 0.
	TargetConcurrency float64
}

// defaultAutoThrottleConfig returns Scrapy's AUTOTHROTTLE_* defaults, off:
// DefaultConfig().Default.AutoThrottle.
func defaultAutoThrottleConfig() AutoThrottleConfig {
	return AutoThrottleConfig{StartDelay: 5 * time.Second, MaxDelay: time.Minute, TargetConcurrency: 1}
}

func (c AutoThrottleConfig) validate(prefix string) error {
	if err := checkDuration(prefix+".StartDelay", c.StartDelay); err != nil {
		return err
	}
	if err := checkDuration(prefix+".MaxDelay", c.MaxDelay); err != nil {
		return err
	}
	if err := checkFloat(prefix+".TargetConcurrency", c.TargetConcurrency); err != nil {
		return err
	}
	if c.TargetConcurrency <= 0 {
		return &ConfigError{Field: prefix + ".TargetConcurrency", Reason: "must be > 0"}
	}
	return nil
}

// autoThrottle holds the learned AutoThrottle delay of one scope.
type autoThrottle struct {
	delay time.Duration
	seen  bool // a response adjusted the delay
}

// configure (re)starts the delay at max(Delay, StartDelay) until a
// response has been seen, and keeps it within the new bounds after.
func (a *autoThrottle) configure(cfg *ScopeConfig) {
	if !a.seen {
		a.delay = max(cfg.Delay, cfg.AutoThrottle.StartDelay)
	}
	a.delay = min(max(a.delay, cfg.Delay), max(cfg.AutoThrottle.MaxDelay, cfg.Delay))
}

// current is the AutoThrottle delay, 0 when AutoThrottle is off.
func (a *autoThrottle) current(cfg *ScopeConfig) time.Duration {
	if !cfg.AutoThrottle.Enabled {
		return 0
	}
	return a.delay
}

// learned reports whether the delay differs from where it starts.
func (a *autoThrottle) learned(cfg *ScopeConfig) bool {
	return cfg.AutoThrottle.Enabled && a.seen && a.delay != max(cfg.Delay, cfg.AutoThrottle.StartDelay)
}

// onAnswer applies Scrapy's _adjust_delay to one response:
//
//	target = latency / TargetConcurrency
//	new    = max(target, (old + target) / 2)
//	new    = clamp(new, Delay, MaxDelay)
//
// and a response other than 200 may raise the delay, never lower it.
// Transport errors carry no latency and change nothing (Scrapy only
// adjusts on downloaded responses). The rule has no windows: now is
// unused, and there is no tick.
func (a *autoThrottle) onAnswer(_ time.Time, cfg *ScopeConfig, ans *answer) {
	if !cfg.AutoThrottle.Enabled || ans.status == 0 {
		return
	}
	a.delay = autoThrottleDelay(cfg, a.delay, ans.latency, ans.status)
	a.seen = true
}

// autoThrottleDelay is the rule itself, a pure function for table tests.
func autoThrottleDelay(cfg *ScopeConfig, old, latency time.Duration, status int) time.Duration {
	target := admission.ScaleDuration(max(latency, 0), 1/cfg.AutoThrottle.TargetConcurrency)
	mean := old/2 + target/2 // (old+target)/2 without overflow
	if sum := old + target; sum >= old {
		mean = sum / 2
	}
	nd := max(target, mean)
	nd = min(max(nd, cfg.Delay), max(cfg.AutoThrottle.MaxDelay, cfg.Delay))
	if status != 200 && nd <= old {
		return old
	}
	return nd
}
