package throttle

import (
	"errors"
	"sync/atomic"
	"time"
)

// guarded wraps a ScopeManager from a user's factory so that a panic in it
// leaves no lock held and no slot taken: each method recovers, answers a
// safe value (Admit: "not now"; Idle: Busy), and keeps the panic, which the
// manager raises again in the caller's goroutine once its locks are
// released and the request's slots are given back. The default
// ScopeManager is never wrapped: it costs nothing on the hot path.
type guarded struct {
	ScopeManager // the user's; scope.mgr holds it too
	panicked     atomic.Pointer[ScopeManagerPanic]
}

func (g *guarded) catch(key, method string) {
	if r := recover(); r != nil {
		g.panicked.CompareAndSwap(nil, &ScopeManagerPanic{Scope: key, Method: method, Value: r})
	}
}

// admit, start, finish ... are the ScopeManager's methods with the scope's
// key for the panic's description.

func (g *guarded) admit(key string, now time.Time, cost int64) (a Admission) {
	a = Admission{At: now.Add(time.Second), Reason: ReasonConcurrency}
	defer g.catch(key, "Admit")
	return g.ScopeManager.Admit(now, cost)
}

func (g *guarded) start(key string, now time.Time, cost int64) (t Ticket) {
	t = Ticket{Slot: -1, Cost: cost, Start: now}
	defer g.catch(key, "Start")
	return g.ScopeManager.Start(now, cost)
}

func (g *guarded) finish(key string, now time.Time, t Ticket, fb *Feedback) {
	defer g.catch(key, "Finish")
	g.ScopeManager.Finish(now, t, fb)
}

func (g *guarded) idle(key string, now time.Time) (i Idleness) {
	i = Busy
	defer g.catch(key, "Idle")
	return g.ScopeManager.Idle(now)
}

func (g *guarded) setConfig(key string, now time.Time, cfg ScopeConfig) {
	defer g.catch(key, "SetConfig")
	g.ScopeManager.SetConfig(now, cfg)
}

// errPanicked is the error of a permit released because the code using it
// panicked.
var errPanicked = errors.New("throttle: released after a panic")

// The scope's calls to its ScopeManager, through the guard when there is
// one.

func (s *scope) admit(now time.Time, cost int64) Admission {
	if s.guard != nil {
		return s.guard.admit(s.key, now, cost)
	}
	return s.mgr.Admit(now, cost)
}

func (s *scope) start(now time.Time, cost int64) Ticket {
	if s.guard != nil {
		return s.guard.start(s.key, now, cost)
	}
	return s.mgr.Start(now, cost)
}

func (s *scope) finish(now time.Time, t Ticket, fb *Feedback) {
	if s.guard != nil {
		s.guard.finish(s.key, now, t, fb)
		return
	}
	s.mgr.Finish(now, t, fb)
}

func (s *scope) idle(now time.Time) Idleness {
	if s.guard != nil {
		return s.guard.idle(s.key, now)
	}
	return s.mgr.Idle(now)
}

func (s *scope) setConfig(now time.Time, cfg ScopeConfig) {
	if s.guard != nil {
		s.guard.setConfig(s.key, now, cfg)
		return
	}
	s.mgr.SetConfig(now, cfg)
}

// takePanic returns the first panic kept by a guard of hs, clearing them.
func takePanic(hs []held) *ScopeManagerPanic {
	var first *ScopeManagerPanic
	for i := range hs {
		if g := hs[i].s.guard; g != nil {
			if p := g.panicked.Swap(nil); p != nil && first == nil {
				first = p
			}
		}
	}
	return first
}

// raiseAfterStart raises a panic kept while p was admitted, once p's
// locks are released: p is released first (its slots given back), since
// the caller will never see it.
func (m *ThrottlingManager) raiseAfterStart(p *Permit) {
	if m.guarded.Load() { // small enough to inline: the default path pays one load
		m.raiseAfterStartSlow(p)
	}
}

func (m *ThrottlingManager) raiseAfterStartSlow(p *Permit) {
	if pv := takePanic(p.scopes); pv != nil {
		p.ReleaseFeedback(Feedback{NoAdjust: true, Err: pv})
		panic(pv)
	}
}

// raise raises a panic kept during an operation on hs that took nothing.
func (m *ThrottlingManager) raise(hs []held) {
	if m.guarded.Load() {
		m.raiseSlow(hs)
	}
}

func (m *ThrottlingManager) raiseSlow(hs []held) {
	if pv := takePanic(hs); pv != nil {
		panic(pv)
	}
}
