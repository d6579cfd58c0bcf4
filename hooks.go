package throttle

import (
	"context"
	"net/url"
	"time"
)

// Hooks are functions the manager calls on events, to feed metrics (see
// examples/expvar and examples/ext/prometheus). Each may be nil. They are
// called without any lock of the manager held, on the goroutine of the
// Acquire or Release that caused the event; they must be quick, and may
// call the manager. The zero Hooks calls nothing. Events come from many
// goroutines, so a hook may run on several at once and must be safe for
// concurrent use.
//
// The robots.txt fetches the manager makes itself (RobotsConfig) are
// permits too: their AdmittedEvent, ReleasedEvent and BackoffEvent have
// Robots set, so a metric of the caller's requests can skip them.
type Hooks struct {
	// Admitted: a permit was granted.
	Admitted func(AdmittedEvent)
	// Released: a permit was released.
	Released func(ReleasedEvent)
	// DelayChanged: a scope's effective delay or concurrency changed on a
	// response (AutoThrottle, backoff, rampup).
	DelayChanged func(DelayChangedEvent)
	// Backoff: a response was a backoff signal for a scope.
	Backoff func(BackoffEvent)
	// GateSet: a server-given wait (Retry-After, RateLimit) holds a scope.
	GateSet func(GateSetEvent)
	// Warning: the manager logged a warning (each kind once).
	Warning func(WarningEvent)
}

// AdmittedEvent describes a granted permit. It is a value the hook owns,
// except URL, which is shared with the request: hooks may run on several
// goroutines at once, so they read URL and never change it. In the zero
// value URL is nil and Robots false (one of the caller's requests).
type AdmittedEvent struct {
	Scopes []string
	At     time.Time
	Waited time.Duration // since Acquire was called
	// URL is the URL of the request the permit was granted for: the
	// request's own *url.URL, not a copy, so read it but do not change
	// it. Nil when the request had none (scopes from WithScopes).
	URL *url.URL
	// Context is the request's context (http.Request.Context), never
	// nil, so that a hook can tie the wait to the caller's trace: an
	// OpenTelemetry span event per wait (package
	// github.com/crawlerkit/throttle/metrics/otel, SpanEvents).
	Context context.Context
	// Robots is true for a robots.txt fetch the manager made itself
	// (RobotsConfig), false for the caller's requests. Stats counts these
	// in Counts.Robots only; a metric of pages skips them.
	Robots bool
}

// ReleasedEvent describes a released permit. It is a value the hook owns,
// except URL, which is shared with the request: hooks may run on several
// goroutines at once, so they read URL and never change it. In the zero
// value URL is nil and Robots false (one of the caller's requests).
type ReleasedEvent struct {
	Scopes  []string
	Status  int // 0 without a response
	Err     error
	Latency time.Duration
	// URL is the URL of the request the permit was granted for: the
	// request's own *url.URL, not a copy, so read it but do not change
	// it. Nil when the request had none (scopes from WithScopes).
	URL *url.URL
	// Context is the request's context (http.Request.Context), never
	// nil, as in AdmittedEvent.
	Context context.Context
	// Robots is true for a robots.txt fetch the manager made itself
	// (RobotsConfig), false for the caller's requests: a metric of pages
	// skips the events with Robots set, as Stats does (Counts.Robots).
	Robots bool
}

// DelayChangedEvent describes a change of a scope's effective limits. The
// zero value is an empty event. Each hook call gets its own copy.
type DelayChangedEvent struct {
	Scope                          string
	OldDelay, NewDelay             time.Duration
	OldConcurrency, NewConcurrency int
	// Reason is the part that sets the delay now: ReasonDelay (configured
	// or AutoThrottle), ReasonBackoff, ReasonRobots.
	Reason Reason
}

// BackoffEvent describes a backoff signal. The zero value is an empty
// event. Each hook call gets its own copy.
type BackoffEvent struct {
	Scope  string
	Status int           // 0 for a transport error
	Delay  time.Duration // the scope's delay after it
	Outage bool          // the scope is probing an outage
	// Robots is true when the signal was the answer to a robots.txt
	// fetch the manager made itself: the scope backs off all the same,
	// but Counts.Signals does not count it.
	Robots bool
}

// GateSetEvent describes a server-given wait. The zero value is an empty
// event. Each hook call gets its own copy.
type GateSetEvent struct {
	Scope string
	Until time.Time
}

// WarningEvent describes a warning. The zero value is an empty event. Each
// hook call gets its own copy.
type WarningEvent struct {
	Message string
	Scope   string // "" when not about one scope
}

// subscribeHooks subscribes the hooks in use to the seam (observers.go):
// Admitted to admitted; the policy hooks and Released to afterRelease.
func (m *ThrottlingManager) subscribeHooks(o *observers) {
	h := &m.cfg.Hooks
	if h.Admitted != nil {
		o.admitted = append(o.admitted, m.hookAdmitted)
	}
	if watch := h.watchesPolicy(); watch || h.Released != nil {
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
	m.cfg.Hooks.Admitted(AdmittedEvent{Scopes: p.Scopes(), At: p.acquired, Waited: max(0, m.clock.Now().Sub(called)),
		URL: p.url(), Context: p.context(), Robots: p.robots})
	ok = true
}

// hookReleased calls the hooks of a release: the policy hooks with ev,
// then Released.
func (m *ThrottlingManager) hookReleased(p *Permit, fb Feedback, ev hookEvents) {
	m.fire(&ev)
	if h := m.cfg.Hooks.Released; h != nil {
		h(ReleasedEvent{Scopes: p.Scopes(), Status: fb.Status, Err: fb.Err, Latency: fb.Latency, URL: p.url(), Context: p.context(), Robots: p.robots})
	}
}

// policySnap is what the release hooks compare before and after Finish.
type policySnap struct {
	delay   time.Duration
	why     Reason
	conc    int
	gate    time.Time
	backoff time.Duration
	outage  bool
}

func snapOf(s *scope) (policySnap, bool) {
	ds, ok := s.mgr.(*defaultScope)
	if !ok {
		return policySnap{}, false
	}
	d, why := ds.delay()
	return policySnap{delay: d, why: why, conc: ds.concurrency(), gate: ds.adm.Gate,
		backoff: ds.backoff.delay, outage: ds.backoff.outage}, true
}

// hookEvents collects a release's events while locks are held, to call
// the hooks after.
type hookEvents struct {
	delays  []DelayChangedEvent
	backoff []BackoffEvent
	gates   []GateSetEvent
}

// observe compares a scope's policy before and after a response.
func (ev *hookEvents) observe(s *scope, before policySnap, fb *Feedback, signal, robots bool) {
	after, ok := snapOf(s)
	if !ok {
		return
	}
	if after.delay != before.delay || after.conc != before.conc {
		ev.delays = append(ev.delays, DelayChangedEvent{Scope: s.key, OldDelay: before.delay, NewDelay: after.delay,
			OldConcurrency: before.conc, NewConcurrency: after.conc, Reason: after.why})
	}
	if signal {
		ev.backoff = append(ev.backoff, BackoffEvent{Scope: s.key, Status: fb.Status, Delay: after.delay, Outage: after.outage, Robots: robots})
	}
	if after.gate.After(before.gate) {
		ev.gates = append(ev.gates, GateSetEvent{Scope: s.key, Until: after.gate})
	}
}

func (m *ThrottlingManager) fire(ev *hookEvents) {
	h := &m.cfg.Hooks
	for _, e := range ev.delays {
		if h.DelayChanged != nil {
			h.DelayChanged(e)
		}
	}
	for _, e := range ev.backoff {
		if h.Backoff != nil {
			h.Backoff(e)
		}
	}
	for _, e := range ev.gates {
		if h.GateSet != nil {
			h.GateSet(e)
		}
	}
}

// watchesPolicy reports whether a hook needs the policy's changes.
func (h *Hooks) watchesPolicy() bool {
	return h.DelayChanged != nil || h.Backoff != nil || h.GateSet != nil
}
