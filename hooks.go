package throttle

// This file holds the hooks' side of the manager: their subscription to
// the seam (observers.go), and the policy changes a release records for
// them. The Hooks and their events are package hooks'.

import (
	"time"

	"github.com/crawlerkit/throttle/hooks"
)

// subscribeHooks subscribes the hooks in use to the seam (observers.go):
// Admitted to admitted; the policy hooks and Released to afterRelease.
func (m *ThrottlingManager) subscribeHooks(o *observers) {
	h := &m.cfg.Hooks
	o.request = h.Admitted != nil || h.Released != nil // their events carry the URL and context
	if h.Admitted != nil {
		o.admitted = append(o.admitted, m.hookAdmitted)
	}
	if watch := watchesPolicy(h); watch || h.Released != nil {
		o.policy = watch
		o.subscribeReleased(rankHooks, m.hookReleased)
	}
}

// hookAdmitted calls the Admitted hook; called is when Acquire or
// TryAcquire was called.
func (m *ThrottlingManager) hookAdmitted(p *Permit, called time.Time) {
	ok := false
	defer func() {
		if !ok { // the hook panicked: the caller never gets p, so give it back
			p.ReleaseFeedback(Feedback{NoAdjust: true})
		}
	}()
	m.cfg.Hooks.Admitted(hooks.Admitted{Scopes: p.Scopes(), At: p.acquired(), Waited: max(0, m.clock.Now().Sub(called)),
		URL: p.url(), Context: p.context(), Robots: p.robotsFetch})
	ok = true
}

// hookReleased calls the hooks of a release: the policy hooks with ev,
// then Released. A hook that panics keeps none of the others from its
// event: they run, then the first panic goes on.
func (m *ThrottlingManager) hookReleased(p *Permit, fb Feedback, ev hookEvents) {
	var ps panics
	m.fire(&ev, &ps)
	if h := m.cfg.Hooks.Released; h != nil {
		ps.call(func() {
			h(hooks.Released{Scopes: p.Scopes(), Status: fb.Status, Err: fb.Err, Latency: fb.Latency, URL: p.url(), Context: p.context(), Robots: p.robotsFetch})
		})
	}
	ps.raise()
}

// panics runs calls that must all run whichever of them panics, and keeps
// the first panic to raise once they have. The zero value has seen none.
type panics struct {
	v      any
	failed bool
}

// call calls f, keeping its panic if it is the first.
func (ps *panics) call(f func()) {
	if v, panicked := protect(f); panicked && !ps.failed {
		ps.v, ps.failed = v, true
	}
}

// raise panics with the first panic kept, if any.
func (ps *panics) raise() {
	if ps.failed {
		panic(ps.v)
	}
}

// protect calls f and returns its panic's value, if it panicked.
func protect(f func()) (v any, panicked bool) {
	defer func() {
		if panicked {
			v = recover()
		}
	}()
	panicked = true
	f()
	return nil, false
}

// snap returns what the release hooks compare before and after end.
func (s *defaultScope) snap() (policySnap, bool) {
	d, why := s.delay()
	return policySnap{delay: d, why: why, conc: s.concurrency(), gate: s.adm.Gate,
		backoff: s.backoff.delay, outage: s.backoff.outage}, true
}

// hookEvents collects a release's events while locks are held, to call
// the hooks after.
type hookEvents struct {
	delays  []hooks.DelayChanged
	backoff []hooks.Backoff
	gates   []hooks.GateSet
}

// observe compares a scope's policy before and after a response.
func (ev *hookEvents) observe(s *scope, before policySnap, fb *Feedback, signal, robots bool) {
	after, ok := s.pol.snap()
	if !ok {
		return
	}
	if after.delay != before.delay || after.conc != before.conc {
		ev.delays = append(ev.delays, hooks.DelayChanged{Scope: s.key, OldDelay: before.delay, NewDelay: after.delay,
			OldConcurrency: before.conc, NewConcurrency: after.conc, Reason: after.why.String()})
	}
	if signal {
		ev.backoff = append(ev.backoff, hooks.Backoff{Scope: s.key, Status: fb.Status, Delay: after.delay, Outage: after.outage, Robots: robots})
	}
	if after.gate.After(before.gate) {
		ev.gates = append(ev.gates, hooks.GateSet{Scope: s.key, Until: after.gate})
	}
}

// fire calls the policy hooks with ev's events, each through ps.
func (m *ThrottlingManager) fire(ev *hookEvents, ps *panics) {
	h := &m.cfg.Hooks
	for _, e := range ev.delays {
		if h.DelayChanged != nil {
			ps.call(func() { h.DelayChanged(e) })
		}
	}
	for _, e := range ev.backoff {
		if h.Backoff != nil {
			ps.call(func() { h.Backoff(e) })
		}
	}
	for _, e := range ev.gates {
		if h.GateSet != nil {
			ps.call(func() { h.GateSet(e) })
		}
	}
}

// watchesPolicy reports whether a hook needs the policy's changes.
func watchesPolicy(h *hooks.Hooks) bool {
	return h.DelayChanged != nil || h.Backoff != nil || h.GateSet != nil
}
