// This file holds Permit and the release pipeline: Release and
// ReleaseFeedback hand the response's Feedback to each scope's
// ScopeManager, give the slots back, and tell the features that follow
// releases (observers.go: MaxHold, the hooks, the warnings, ReadyQueues).

package throttle

import (
	"context"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"
	"unsafe"
)

// A Permit is the right to send one request. It holds one slot in every
// scope of the request until Release. Release is idempotent, and a Permit
// is safe to release from any goroutine. Its methods may be called from
// several goroutines at once: only the first Release or ReleaseFeedback
// counts. A zero Permit is not usable (Release panics): permits come from
// Acquire, TryAcquire and a ReadyQueue. Release and ReleaseFeedback on a
// nil *Permit do nothing.
type Permit struct {
	// The scopes held, sorted by key (the lock order): n of them, in one
	// for a request of one scope, else from hs, nil then (see scopes). A
	// pointer and a count, not a slice, keep the Permit at 88 bytes. The
	// manager is the scopes' (manager).
	hs *held
	// one holds the scope of a request of one scope. Its Ticket's Start
	// is the Permit's acquired time too, unless ext holds that (see
	// acquired); a Permit of several scopes, whose scopes are in hs,
	// keeps its acquired time in one[0].ticket.Start alone. A time.Time
	// of its own made the Permit 24 bytes larger, and every Acquire
	// allocates one.
	one         [1]held
	released    atomic.Bool
	noAdjust    bool
	robotsFetch bool  // a robots.txt fetch of the manager's (robotsfetch.go)
	n           uint8 // len of the scopes, at most maxScopesPerRequest

	// ext holds what only a Store or MaxHold needs, so a plain Permit
	// stays small (permits are allocated 23 at once, see permitSlab).
	ext *permitExt
	// req is the request, for the hooks (its URL and context); nil
	// without them (observers.request). Set at admission (setRequest).
	// Kept here rather than in ext: with hooks, ext would cost every
	// admission an allocation (3 instead of 2 an Acquire and Release,
	// 225 bytes instead of 167, with the Admitted and Released hooks).
	req *http.Request
}

// manager returns the manager that granted p: its scopes'. A zero Permit
// has none (its use panics).
func (p *Permit) manager() *ThrottlingManager {
	if p.n == 1 {
		return p.one[0].s.m
	}
	return p.hs.s.m // the first of several
}

// acquired returns when p was granted (see Permit.one).
func (p *Permit) acquired() time.Time {
	if e := p.ext; e != nil && e.hasAcquired {
		return e.acquired
	}
	return p.one[0].ticket.Start
}

// setAcquired records t, when p was granted, once its scopes' Tickets
// are filled: a Permit of one scope whose Ticket starts at t exactly (the
// same time.Time, monotonic reading and location included, as it does
// unless the scope took t for a stale reading, or a custom policy set
// its own Start) needs nothing more.
func (p *Permit) setAcquired(t time.Time) {
	switch {
	case p.n != 1:
		p.one[0].ticket.Start = t // one is not a scope's
	case p.one[0].ticket.Start != t: // on purpose not Equal: the very same value, not the same instant
		e := p.extension()
		e.acquired, e.hasAcquired = t, true
	}
}

// permitExt is the part of a Permit only a Store or MaxHold uses, or an
// acquired time the Permit's Ticket does not hold.
type permitExt struct {
	// With a Store: the lease, and the local clock when acquired (the
	// Permit's acquired time is then the store's).
	shared bool
	lease  string
	local  time.Time

	// With Config.MaxHold: the manager's list of held permits.
	hprev, hnext *Permit
	hlocal       int64 // Unix ns when listed
	hlisted      bool

	// acquired is the Permit's acquired time, if hasAcquired: one whose
	// one scope's Ticket does not start then (see Permit.acquired).
	hasAcquired bool
	acquired    time.Time
}

// setRequest keeps req in p, admitted just now, if the hooks read it.
func (m *ThrottlingManager) setRequest(p *Permit, req *http.Request) {
	if m.obs.request {
		p.req = req
	}
}

// permitSlab is a run of Permits allocated at once, which freshPermit
// hands out one by one: one allocation makes permitsPerSlab Permits. An
// allocation of its own cost an Acquire about 280 instructions (callgrind,
// BenchmarkAcquireRelease), the slab's share and the count below about 60
// (with GOGC=off). Each Permit is handed out once and never reused
// (Release stays idempotent whoever holds the Permit); the slab's memory
// is freed when none of its Permits is held any more, so a Permit held
// long keeps up to permitsPerSlab-1 released ones (2 KiB) from being
// freed with it. A released Permit keeps its request only while a hook
// may read it (Permit.req).
type permitSlab struct {
	next atomic.Int32 // the Permits handed out, or asked for past the end
	ps   [permitsPerSlab]Permit
}

// permitsPerSlab makes a slab 2,032 bytes, in the 2,048-byte size class.
const permitsPerSlab = 23

// permitSlabs hands out fresh Permits from its slab, and makes the next
// slab when that one is used up.
type permitSlabs struct {
	slab atomic.Pointer[permitSlab]
}

// fresh returns a zero Permit never handed out before. Safe for
// concurrent use.
func (ps *permitSlabs) fresh() *Permit {
	for {
		sl := ps.slab.Load()
		if sl != nil {
			if i := sl.next.Add(1); i <= permitsPerSlab {
				return &sl.ps[i-1]
			}
		}
		ns := new(permitSlab)
		ns.next.Store(1)
		if ps.slab.CompareAndSwap(sl, ns) {
			return &ns.ps[0]
		}
	}
}

// freshPermit returns a zero Permit never handed out before, from sh's
// slab: each shard has its own, so Acquires of scopes in different shards
// neither count on one word nor write to neighbouring Permits.
func (sh *shard) freshPermit() *Permit { return sh.permits.fresh() }

// url is the URL of p's request, for the hooks.
func (p *Permit) url() *url.URL {
	if p.req == nil {
		return nil
	}
	return p.req.URL
}

// context is the context of p's request, for the hooks.
func (p *Permit) context() context.Context {
	if p.req == nil {
		return context.Background()
	}
	return p.req.Context()
}

// extension returns p's permitExt, making it.
func (p *Permit) extension() *permitExt {
	if p.ext == nil {
		p.ext = new(permitExt)
	}
	return p.ext
}

// scopes returns the scopes p holds a slot in, sorted by key; none for a
// zero Permit.
func (p *Permit) scopes() []held {
	if p.n == 1 {
		return p.one[:] // most permits: no unsafe.Slice and its checks
	}
	return unsafe.Slice(p.hs, p.n)
}

// setScopes makes hs p's scopes: one scope is kept in p.one, more in hs,
// a slice of their own, sorted by key (resolve sorts them after).
func (p *Permit) setScopes(hs []held) {
	if len(hs) == 1 {
		p.one[0], p.hs, p.n = hs[0], nil, 1
		return
	}
	p.hs, p.n = unsafe.SliceData(hs), uint8(len(hs)) // at most maxScopesPerRequest
}

// setOne makes p, a zero Permit, hold s at cost, its only scope. Only
// what is not zero is written, as setScopes would leave it (hs nil): a
// held built whole and copied into one is read back just after its
// narrow stores (a stall), and a pointer less to write is a write
// barrier less while the GC marks.
func (p *Permit) setOne(s *scope, cost int64) {
	p.one[0].s, p.one[0].ticket.Cost = s, cost
	p.n = 1
}

// held is one scope a permit holds a slot in. Until the start fills the
// ticket, ticket.Cost is the request's cost in the scope: the cost the
// admission asks for, and the one the start is given.
type held struct {
	s      *scope
	ticket Ticket
}

// Acquired returns when the permit was granted.
func (p *Permit) Acquired() time.Time { return p.acquired() }

// Scopes returns the keys of the permit's scopes, sorted.
func (p *Permit) Scopes() []string {
	keys := make([]string, len(p.scopes()))
	for i, h := range p.scopes() {
		keys[i] = h.s.key
	}
	return keys
}

// Release gives the permit's slots back and reports the outcome of the
// request: the response, or the error, that the request ended with. The
// latency is the time since Acquire returned. Calls after the first do
// nothing.
func (p *Permit) Release(resp *http.Response, err error) {
	if p == nil || p.released.Load() {
		return
	}
	m := p.manager()
	now := m.clock.Now()
	// The Feedback is built in place and passed on by pointer. Returned and
	// passed by value, its 152 bytes were copied twice, with wide loads of
	// fields just written by narrow stores, which the CPU cannot forward:
	// a stall at each copy.
	var fb Feedback
	if !m.customFeedback {
		defaultFeedback(&fb, now, resp, err)
		p.doneBy(m, now, &fb, true)
		return
	}
	fb, pv := m.safeFeedback(now, resp, err)
	p.doneBy(m, now, &fb, true)
	if pv != nil {
		panic(pv) // the slots are given back; the user's bug surfaces
	}
}

// safeFeedback calls a user's FeedbackFunc; if it panics, the permit is
// released with no feedback (NoAdjust) before the panic goes on.
func (m *ThrottlingManager) safeFeedback(now time.Time, resp *http.Response, err error) (fb Feedback, pv any) {
	defer func() {
		if r := recover(); r != nil {
			fb, pv = Feedback{Err: err, NoAdjust: true}, r
		}
	}()
	return m.feedback(now, resp, err), nil
}

// ReleaseFeedback is Release with feedback the caller built: a zero
// Latency is replaced by the time since Acquire returned. Calls after the
// first Release or ReleaseFeedback do nothing.
func (p *Permit) ReleaseFeedback(fb Feedback) {
	if p == nil || p.released.Load() {
		return
	}
	m := p.manager()
	p.doneBy(m, m.clock.Now(), &fb, true)
}

// doneAt is done with a copy of fb.
func (p *Permit) doneAt(now time.Time, fb Feedback, fillLatency bool) {
	p.done(now, &fb, fillLatency)
}

// done releases the permit at now with *fb, which it may change;
// fillLatency replaces a zero Latency with the time since Acquire returned.
func (p *Permit) done(now time.Time, fb *Feedback, fillLatency bool) {
	p.doneBy(p.manager(), now, fb, fillLatency)
}

// doneBy is done for m, p's manager.
func (p *Permit) doneBy(m *ThrottlingManager, now time.Time, fb *Feedback, fillLatency bool) {
	if !p.released.CompareAndSwap(false, true) {
		return
	}
	if fillLatency && fb.Latency == 0 {
		if e := p.ext; e != nil && e.shared {
			fb.Latency = now.Sub(e.local)
		} else {
			fb.Latency = now.Sub(p.acquired())
		}
	}
	if p.noAdjust {
		fb.NoAdjust = true
	}
	if e := p.ext; e != nil && e.shared {
		m.release(p, now, fb)
		return
	}
	// release's local path, without its call.
	m.releasing(p) // observers.go
	localEngine{m}.release(p, now, fb)
}

// release gives p's slots back and hands fb to each scope's policy.
//
// fb stays on the caller's stack: a default policy gets the pointer
// (endIn, which keeps none), any other a copy by value (policy.go), and a
// custom ScopeManager, which may keep a pointer, a heap copy, which later
// scopes of p then get, so each sees what an earlier one changed.
// Keeping the Feedback in the Permit instead would make the Permit
// 240 bytes, not 88: that costs every Acquire more.
//
// The engine that admitted p takes it back (engine.go). Its release is
// called on the engine's type, not through the interface: fb given to an
// interface method would escape to the heap.
func (m *ThrottlingManager) release(p *Permit, now time.Time, fb *Feedback) {
	m.releasing(p) // observers.go; the Store's path ends with afterRelease too
	if e := p.ext; e != nil && e.shared {
		cp := *fb // the store path hands fb to interfaces: a copy keeps fb on the stack
		storeEngine{m}.release(p, now, &cp)
		return
	}
	localEngine{m}.release(p, now, fb)
}

// release gives p's slots back in each scope and hands fb to its policy.
// Without a hook that watches the policies (obs.policy), it records no
// policy changes: no snapshot before, no events after.
func (e localEngine) release(p *Permit, now time.Time, fb *Feedback) {
	m := e.m
	if m.obs.policy {
		e.releaseWatched(p, now, fb)
		return
	}
	hs := p.scopes()
	for i := range hs {
		h := &hs[i]
		h.s.mu.Lock()
		fb, _ = e.finish(h, p, now, fb)
		h.s.mu.Unlock()
	}
	m.global.release()
	m.afterRelease(p, fb, nil, false) // after the slots are free; observers.go
	m.raise(hs)
}

// releaseWatched is release recording the changes of each scope's policy
// for the hooks that watch them (hookEvents).
func (e localEngine) releaseWatched(p *Permit, now time.Time, fb *Feedback) {
	m := e.m
	var ev hookEvents
	hs := p.scopes()
	for i := range hs {
		h := &hs[i]
		h.s.mu.Lock()
		before, _ := h.s.pol.snap()
		var signal bool
		fb, signal = e.finish(h, p, now, fb)
		ev.observe(h.s, before, fb, signal, p.robotsFetch)
		h.s.mu.Unlock()
	}
	m.global.release()
	m.afterRelease(p, fb, &ev, true)
	m.raise(hs)
}

// finish is release's work in one scope, h.s, which the caller has
// locked: it hands fb to the scope's policy, counts the response and
// wakes the first waiter that may need the scope. It returns the Feedback
// the later scopes get (a custom Finish's changes) and whether fb was a
// backoff signal for the scope.
func (e localEngine) finish(h *held, p *Permit, now time.Time, fb *Feedback) (*Feedback, bool) {
	var signal bool
	if d, ok := h.s.pol.(*defaultScope); ok {
		// The interface's end, devirtualised: the default policy's
		// own method takes fb by pointer, without the copy of its
		// 152 bytes that end takes (about 50 instructions a
		// release). It does what end does, and changes no Feedback.
		signal = d.endIn(now, &h.ticket, fb, p.robotsFetch)
	} else {
		var changed *Feedback
		signal, changed = h.s.pol.end(now, &h.ticket, *fb, p.robotsFetch)
		if changed != nil {
			fb = changed // later scopes see what a custom Finish changed
		}
	}
	h.s.lastUsed, h.s.signal = now.UnixNano(), signal
	h.s.counts.finished(now, fb, signal, p.robotsFetch)
	if h.s.counts.requests == e.m.obs.settledAfter && !p.robotsFetch {
		e.m.settled(h.s) // observers.go
	}
	wakeNeeding(h.s, h.s.queue.head)
	return fb, signal
}
