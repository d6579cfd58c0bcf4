package throttle

// This file holds the warnings: logged once each through Config.Logger
// and passed to the Warning hook (hooks.Warning).

import (
	"fmt"

	"github.com/crawlerkit/throttle/hooks"
)

// warn logs msg once per kind (the caller keeps the once) and calls the
// Warning hook.
func (m *ThrottlingManager) warn(msg, scope string, attrs ...any) {
	if scope != "" {
		attrs = append([]any{"scope", scope}, attrs...)
	}
	m.log.Warn(msg, attrs...)
	if h := m.cfg.Hooks.Warning; h != nil {
		h(hooks.Warning{Message: msg, Scope: scope})
	}
}

// ineffective warns, once per manager, about a setting that has had no
// effect: called on a scope's ineffectiveAfter-th response, with s locked.
func (m *ThrottlingManager) checkIneffective(s *scope) {
	conc, rampup, ok := s.pol.configured()
	if !ok || rampup || m.warnedIneffective.Load() {
		return
	}
	snap, _ := s.pol.snap()
	c := &s.counts
	d := snap.delay
	if conc > 1 && c.peak <= 1 && c.latency > 0 && d >= c.latency {
		if m.warnedIneffective.Swap(true) {
			return
		}
		msg := fmt.Sprintf("throttle: Concurrency %d has had no effect: in %d requests never more than 1 was in flight, "+
			"because the delay between starts (%v) is longer than a request takes (%v), so a slot is free again before the next start is due; "+
			"lower Delay to use the concurrency, or set Concurrency 1", conc, c.requests, d, c.latency)
		m.warnAsync(msg, s.key)
	}
}

// subscribeWarnings subscribes the check of ineffective settings to the
// seam (observers.go): it looks at each scope once, at the release that
// finds ineffectiveAfter requests counted.
func (m *ThrottlingManager) subscribeWarnings(o *observers) {
	o.settledAfter = ineffectiveAfter
	o.settled = append(o.settled, m.checkIneffective)
}

// warnAsync records a warning to give out once the caller's locks are
// released (the Warning hook must be called without them): the first one
// subscribes flushWarnings to the seam's afterRelease (observers.go), so
// the release that found it, and any after, give it out.
func (m *ThrottlingManager) warnAsync(msg, scope string) {
	m.pendingMu.Lock()
	m.pending = append(m.pending, hooks.Warning{Message: msg, Scope: scope})
	subscribe := !m.flushing
	m.flushing = true
	m.pendingMu.Unlock()
	m.hasPending.Store(true)
	if subscribe {
		m.obs.subscribeReleasedPermit(rankWarnings, func(*Permit) { m.flushWarnings() })
	}
}

// flushWarnings gives out the warnings recorded under locks.
func (m *ThrottlingManager) flushWarnings() {
	if !m.hasPending.Load() {
		return
	}
	m.pendingMu.Lock()
	ws := m.pending
	m.pending = nil
	m.hasPending.Store(false)
	m.pendingMu.Unlock()
	for _, w := range ws {
		m.warn(w.Message, w.Scope)
	}
}

// ineffectiveAfter is how many responses a scope must have had before a
// setting is called ineffective.
const ineffectiveAfter = 100

// warnStatic warns at New about settings that contradict each other or
// hold each other back.
func (m *ThrottlingManager) warnStatic() {
	check := func(name string, sc *ScopeConfig) {
		if sc.AutoThrottle.Enabled && sc.AutoThrottle.TargetConcurrency > float64(sc.Concurrency) {
			m.warn(fmt.Sprintf("throttle: %s.AutoThrottle.TargetConcurrency %g exceeds Concurrency %d: AutoThrottle "+
				"aims at %g requests in flight but the scope allows %d, so its delay is lower than it would choose",
				name, sc.AutoThrottle.TargetConcurrency, sc.Concurrency, sc.AutoThrottle.TargetConcurrency, sc.Concurrency), "")
		}
		if sc.AutoThrottle.Enabled && sc.Delay >= defaultScopeConfig().Delay {
			m.warn(autoThrottleFloored(name, sc), "")
		}
		for _, msg := range ineffectiveSettings(name, sc) {
			m.warn("throttle: "+msg, "")
		}
	}
	check("Default", &m.cfg.Default)
	for k, sc := range m.cfg.Scopes {
		check(fmt.Sprintf("Scopes[%q]", k), &sc)
	}
}

// autoThrottleFloored is the warning for a scope name whose AutoThrottle
// is on over a Delay of DefaultConfig's or more: Delay is AutoThrottle's
// floor (see AutoThrottleConfig), so AutoThrottle can never run that
// scope faster than DefaultConfig does, and a user who turned it on to go
// faster on fast sites gets nothing.
func autoThrottleFloored(name string, sc *ScopeConfig) string {
	return fmt.Sprintf("throttle: %s.AutoThrottle is on but %s.Delay %v floors it: AutoThrottle never goes under "+
		"Delay, so it can only slow the scope down and never runs it faster than DefaultConfig (Delay %v); "+
		"lower Delay (e.g. 0) for it to speed up on fast sites", name, name, sc.Delay, defaultScopeConfig().Delay)
}

// configured returns the scope's configured Concurrency and whether rampup
// is on, for checkIneffective.
func (s *defaultScope) configured() (conc int, rampup, ok bool) {
	return s.cfg.Concurrency, s.cfg.Rampup.Enabled, true
}
