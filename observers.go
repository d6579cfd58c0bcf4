package throttle

// This file holds the seam between the request's path and the features
// that follow it: MaxHold (maxhold.go), the hooks (hooks.go), the warnings
// found under locks (warnings.go) and ReadyQueues (readyqueue.go). The
// admission loop (admit.go) and the release pipeline (permit.go, and
// shared.go's path through a Store) call the seam's points below, never a
// feature by name; each feature subscribes itself to the points it needs:
//
//   - MaxHold (subscribeMaxHold, in New): beforeAdmit reclaims the permits
//     held too long, admitted lists a new permit, releasing unlists it,
//     freedAt tells a caller waiting for a release when the oldest permit
//     is due to be reclaimed.
//   - the hooks (subscribeHooks, in New): admitted calls Hooks.Admitted,
//     afterRelease the policy hooks and Hooks.Released.
//   - the warnings (subscribeWarnings, in New): settled checks a scope's
//     settings once it has had enough requests; from the first warning
//     found under locks on (warnAsync), afterRelease gives them out.
//   - a ReadyQueue (NewReadyQueue): afterRelease unparks the groups waiting
//     for one of the permit's scopes.
//   - the series (RecordSeries): afterRelease counts the answers of the
//     busiest scopes (series.go).
//   - robots.txt (subscribeRobots, in New): created gives a new scope the
//     delay its host's robots.txt asked for (robots.go).
//
// Only the features in use subscribe, so a manager without them pays a
// check of a bool or an empty list at each point, and one atomic load
// per release. The points of admission (beforeAdmit, admitted, freedAt),
// releasing and settled are fixed in New, so they are plain slices read
// without a lock. afterRelease's subscribers may come later (a ReadyQueue
// made after New, the first warning found), so they are a slice copied
// on write, under obs.mu, and read with one atomic load after the slots
// are free: a ReadyQueue subscribes before its first attempt, so a
// release that frees a slot after that attempt was refused always finds
// it (see ReadyQueue.armed).
//
// A subscriber is called on the goroutine of the Acquire or Release that
// caused the event, with no lock of the manager held, except settled's,
// with the scope locked. The Feedback and the policy changes reach
// afterRelease's subscribers by value: a pointer passed to a func value
// escapes, and would put every release's Feedback on the heap (see
// ThrottlingManager.release).

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// observers are the subscribers of the seam's points, in the order they
// are called.
type observers struct {
	// Fixed in New.

	// acquire is set when beforeAdmit or admitted has subscribers:
	// acquire (Acquire and the Transport) then reads the time it was
	// called, for admitted.
	acquire bool
	// beforeAdmit: before a request is evaluated, in Acquire and
	// TryAcquire and each time a waiter wakes, with the time.
	beforeAdmit []func(now time.Time)
	// admitted: a permit was granted, before the caller gets it; called
	// is when Acquire or TryAcquire was called. A subscriber that
	// panics must give the permit back: the caller never gets it.
	admitted []func(p *Permit, called time.Time)
	// freedAt: for a caller waiting for a release, a time when a slot
	// may be freed without one (zero: none).
	freedAt []func() time.Time
	// releasing: a permit is being released, before its slots are given
	// back (once per permit: Permit.released is set).
	releasing []func(p *Permit)
	// settled: with the scope locked, at the release that finds the
	// scope's settledAfter-th request counted (robots.txt fetches aside).
	settled      []func(s *scope)
	settledAfter uint32
	// created: the registry made the scope s, with the configuration
	// cfg, and has not shared it yet (no lock needed).
	created []func(s *scope, cfg *ScopeConfig)
	// request is set when a subscriber reads a permit's request
	// (Permit.url, Permit.context): permits then keep it.
	request bool
	// policy is set when an afterRelease subscriber reads the policy
	// changes: the release then records them (hookEvents), with each
	// scope locked.
	policy bool

	// Copied on write under mu; nil while no one listens.
	mu sync.Mutex
	// released: a permit was released and its slots are free, with the
	// Feedback the scopes got and, when policy is set, the policy
	// changes it caused. Sorted by rank.
	released atomic.Pointer[[]releasedSub]
}

// releasedSub is a subscriber of afterRelease: f, or permit for one that
// needs only the permit (a ReadyQueue's), which is then called without
// the copies of the Feedback and the events that f's arguments take.
type releasedSub struct {
	rank   int
	f      func(p *Permit, fb Feedback, ev hookEvents)
	permit func(p *Permit)
}

// call calls s with the release of p.
func (s *releasedSub) call(p *Permit, fb *Feedback, ev *hookEvents) {
	if s.permit != nil {
		s.permit(p)
		return
	}
	s.f(p, *fb, *ev)
}

// The order in which afterRelease's subscribers hear of a release,
// whenever they subscribe: the ReadyQueues, in the order they were made
// (a Pop waiting for the freed slot gets it at once, as a caller of
// Acquire does, not after a user's hook), then the hooks, then the
// warnings (the Warning hook's events come after the release's own),
// then the series.
const (
	rankQueues = iota
	rankHooks
	rankWarnings
	rankSeries
)

// subscribeReleased adds f to afterRelease's subscribers, after those of
// the same rank. Safe at any time, from any goroutine, with any lock of
// a scope held.
func (o *observers) subscribeReleased(rank int, f func(p *Permit, fb Feedback, ev hookEvents)) {
	o.addReleased(releasedSub{rank: rank, f: f})
}

// subscribeReleasedPermit is subscribeReleased for f, which needs only
// the permit.
func (o *observers) subscribeReleasedPermit(rank int, f func(p *Permit)) {
	o.addReleased(releasedSub{rank: rank, permit: f})
}

// addReleased adds sub to afterRelease's subscribers, after those of the
// same rank.
func (o *observers) addReleased(sub releasedSub) {
	o.mu.Lock()
	defer o.mu.Unlock()
	var subs []releasedSub
	if old := o.released.Load(); old != nil {
		subs = slices.Clone(*old)
	}
	i := len(subs)
	for i > 0 && subs[i-1].rank > sub.rank {
		i--
	}
	subs = slices.Insert(subs, i, sub)
	o.released.Store(&subs)
}

// subscribe builds the subscribers fixed in New, for m's Config.
func (o *observers) subscribe(m *ThrottlingManager) {
	m.subscribeMaxHold(o) // first: a permit is listed before the Admitted hook may give it back
	m.subscribeHooks(o)
	m.subscribeWarnings(o)
	m.subscribeRobots(o)
	o.acquire = len(o.beforeAdmit) > 0 || len(o.admitted) > 0
}

// created is called when the registry has made s, with its configuration
// cfg, before it shares it.
func (m *ThrottlingManager) created(s *scope, cfg *ScopeConfig) {
	for _, f := range m.obs.created {
		f(s, cfg)
	}
}

// beforeAdmit is called before a request is evaluated, with no lock held.
func (m *ThrottlingManager) beforeAdmit(now time.Time) {
	for _, f := range m.obs.beforeAdmit {
		f(now)
	}
}

// admitted is called when p is granted, before its caller gets it; called
// is when the caller asked.
func (m *ThrottlingManager) admitted(p *Permit, called time.Time) {
	for _, f := range m.obs.admitted {
		f(p, called)
	}
}

// freedAt returns the earliest time a subscriber may free a slot without
// a release, for a caller waiting for one; zero when none will.
func (m *ThrottlingManager) freedAt() time.Time {
	var at time.Time
	for _, f := range m.obs.freedAt {
		if t := f(); !t.IsZero() && (at.IsZero() || t.Before(at)) {
			at = t
		}
	}
	return at
}

// releasing is called when p is being released, before its slots are
// given back, with no lock held.
func (m *ThrottlingManager) releasing(p *Permit) {
	for _, f := range m.obs.releasing {
		f(p)
	}
}

// settled is called, with s locked, at the release that finds s's
// obs.settledAfter-th request counted.
func (m *ThrottlingManager) settled(s *scope) {
	for _, f := range m.obs.settled {
		f(s)
	}
}

// afterRelease is called when p was released and its slots are free,
// with no lock held: fb is the Feedback its scopes got, and ev the policy
// changes recorded when watch (obs.policy) was set; both are handed on by
// value, so they stay on the releasing caller's stack.
func (m *ThrottlingManager) afterRelease(p *Permit, fb *Feedback, ev *hookEvents, watch bool) {
	if m.obs.released.Load() != nil { // small enough to inline: no call without subscribers
		m.tellReleased(p, fb, ev, watch)
	}
}

// tellReleased is afterRelease past its test.
func (m *ThrottlingManager) tellReleased(p *Permit, fb *Feedback, ev *hookEvents, watch bool) {
	subs := m.obs.released.Load()
	var changes hookEvents
	if watch {
		changes = *ev
	}
	// A subscriber that panics (a user's hook) must not keep the release
	// from those after it: a ReadyQueue's Pop would sleep until another
	// release. They run, then the first panic goes on.
	var first any
	failed := false
	for i := range *subs {
		s := &(*subs)[i]
		if i == len(*subs)-1 && !failed {
			s.call(p, fb, &changes) // the last, none failed: nothing to protect
			break
		}
		if v, panicked := callReleased(s, p, fb, &changes); panicked && !failed {
			first, failed = v, true
		}
	}
	if failed {
		panic(first)
	}
}

// callReleased calls s, and reports a panic in it with its value.
func callReleased(s *releasedSub, p *Permit, fb *Feedback, ev *hookEvents) (v any, panicked bool) {
	defer func() {
		if panicked {
			v = recover()
		}
	}()
	panicked = true
	s.call(p, fb, ev)
	return nil, false
}
