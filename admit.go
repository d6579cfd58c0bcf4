// This file holds the admission loop: Acquire and TryAcquire resolve a
// request's scopes into a Permit, then admit it when every scope and the
// global cap admit it at the same instant, or queue the caller in each
// scope and wait, with at most one timer.

package throttle

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Acquire blocks until every scope of req admits it, then returns a Permit
// that the caller must Release. The scopes come from WithScopes on ctx or
// on req's context, else from the Scoper.
//
// It returns an error wrapping ctx.Err() when ctx ends first, and a
// *WaitError wrapping context.DeadlineExceeded at once when ctx's deadline
// falls before the earliest possible start (or ErrScopeRefusing, see
// Config.MaxRefusal). A caller that stops waiting consumes nothing and
// holds no slot.
func (m *ThrottlingManager) Acquire(ctx context.Context, req *http.Request) (*Permit, error) {
	if !m.obs.acquire { // acquire's test, sparing a call
		return m.acquireOrWait(ctx, req, time.Time{}, nil)
	}
	return m.acquire(ctx, req, time.Time{}, nil)
}

// acquire is Acquire for a request that may not start before notBefore
// (the Transport's redirect gate). The features that follow admission
// (observers.go) hear of it before and after. into, if not nil, is a zero
// Permit to fill rather than allocate one (see newPermit).
func (m *ThrottlingManager) acquire(ctx context.Context, req *http.Request, notBefore time.Time, into *Permit) (*Permit, error) {
	if !m.obs.acquire {
		return m.acquireOrWait(ctx, req, notBefore, into)
	}
	called := m.clock.Now()
	m.beforeAdmit(called)
	p, err := m.acquireOrWait(ctx, req, notBefore, into)
	if err == nil {
		m.admitted(p, called)
	}
	return p, err
}

// acquireOrWait is acquire without the observers: it admits the request
// at once or waits its turn (it blocks).
func (m *ThrottlingManager) acquireOrWait(ctx context.Context, req *http.Request, notBefore time.Time, into *Permit) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, &WaitError{Err: err}
	}
	now := m.clock.Now()
	robotsFetch := false
	if m.robotsTxt != nil && req != nil {
		var err error
		if robotsFetch, now, err = m.robotsTxt.before(ctx, req, now); err != nil {
			return nil, err
		}
	}
	p, err := m.newPermit(ctx, req, now, into)
	if err != nil {
		return nil, err
	}
	p.robotsFetch = robotsFetch
	got, err := m.engineAt(now).acquire(ctx, p, now, notBefore)
	if err == errUseLocal {
		// The store failed, perhaps after a wait: local admission goes
		// on from the time it failed, not from before the wait.
		got, err = localEngine{m}.acquire(ctx, p, m.clock.Now(), notBefore)
	}
	if err == nil {
		m.setRequest(got, req)
	}
	return got, err
}

// engineAt returns the engine that admits requests at local time now:
// the Store's, unless there is none or StoreFallbackLocal waits out its
// outage.
func (m *ThrottlingManager) engineAt(now time.Time) engine {
	if m.shared != nil && m.useStore(now) {
		return storeEngine{m}
	}
	return localEngine{m}
}

// localEngine is the engine with the state in this process (engine.go):
// the scopes' own locks, queues and policies.
type localEngine struct{ m *ThrottlingManager }

// acquire admits p at once if it can (tryFast), else queues the caller in
// each scope of p and waits its turn (localTurn).
func (e localEngine) acquire(ctx context.Context, p *Permit, now, notBefore time.Time) (*Permit, error) {
	m := e.m
	if !notBefore.IsZero() && notBefore.After(now) { // IsZero: inline, After: a call
		return m.wait(ctx, p, notBefore)
	}
	var (
		ok  bool
		adm Admission
		who int
	)
	if p.n == 1 { // tryFast's own test, sparing its call
		ok, adm, who = m.tryFastOne(p, now)
	} else {
		ok, adm, who = m.tryFast(p, now)
	}
	if ok {
		return p, nil
	}
	if err := m.refusing(p.scopes(), now, adm); err != nil {
		return nil, err
	}
	if dl, has := ctx.Deadline(); has && !adm.At.IsZero() && dl.Before(adm.At) {
		return nil, &WaitError{Scope: scopeKey(p.scopes(), who), Reason: adm.Reason, ReadyAt: adm.At, Err: context.DeadlineExceeded}
	}
	return m.wait(ctx, p, time.Time{})
}

// try admits p at now if no one waits ahead of it and every scope and the
// global cap admit it.
func (e localEngine) try(_ context.Context, p *Permit, now time.Time) (bool, Admission, error) {
	ok, adm, _ := e.m.tryFast(p, now)
	return ok, adm, nil
}

// TryAcquire never blocks. It returns a Permit if req can start now;
// otherwise nil and when it could start: Admission.At is the earliest time
// worth trying again, zero when the request waits for a Release (a slot, a
// quota correction) or behind callers blocked in Acquire. With a Store, a
// request waiting for a slot may get a fallback time instead of zero (for
// redisstore the earliest lease expiry, when a dead worker's slot frees). A crawler with
// many hosts can keep a ready-time queue with it instead of parking a
// goroutine per request.
func (m *ThrottlingManager) TryAcquire(req *http.Request) (*Permit, Admission, error) {
	return m.tryAcquire(req, m.clock.Now(), nil, nil)
}

// tryAcquire is TryAcquire. g, if not nil, is the ReadyQueue group at
// whose head req is: without a Scoper and a Store, req's scopes are the
// group's (the context's or the host's, which stay as they were at Push),
// and the Permit is made from them, without resolving them again
// (groupPermit). into, if not nil, is a zero Permit to fill, the caller's:
// when no Permit is returned, into is zero again, for the caller to reuse;
// if nil, one from unusedPermits is filled, and put back there then. now
// is the clock's reading (the ReadyQueue's attempt reads it once for all
// its heads).
func (m *ThrottlingManager) tryAcquire(req *http.Request, now time.Time, g *setQueue, into *Permit) (*Permit, Admission, error) {
	m.beforeAdmit(now)
	p := into
	if p == nil {
		p = unusedPermits.Get().(*Permit)
	}
	var (
		ok  bool
		adm Admission
		err error
	)
	if g != nil && m.cfg.Scoper == nil && m.shared == nil {
		// No Store: the engine is the local one, whose try needs no
		// context. req itself is not read (in a queue of many hosts,
		// a cache miss a pop): Push kept what the admission needs.
		m.groupPermit(now, g, p)
		ok, adm, _ = m.tryFast(p, now) // localEngine.try
	} else {
		ctx := context.Background()
		if req != nil {
			ctx = req.Context()
		}
		if _, err := m.newPermit(ctx, req, now, p); err != nil {
			m.unused(p, into)
			return nil, Admission{}, err
		}
		ok, adm, err = m.engineAt(now).try(ctx, p, now)
		if err == errUseLocal {
			ok, adm, err = localEngine{m}.try(ctx, p, now)
		}
	}
	if err != nil {
		m.unused(p, into)
		return nil, Admission{}, err
	}
	if !ok {
		err := m.refusing(p.scopes(), now, adm)
		m.unused(p, into)
		return nil, adm, err
	}
	m.setRequest(p, req)
	m.admitted(p, now)
	return p, Admission{}, nil
}

// unused zeroes p, a Permit tryAcquire filled and never handed out (safe
// to reuse, unlike a released Permit a caller may still hold), and puts
// it back in unusedPermits unless it is into, the caller's.
func (m *ThrottlingManager) unused(p, into *Permit) {
	*p = Permit{}
	if p != into {
		unusedPermits.Put(p)
	}
}

// unusedPermits recycles permits that TryAcquire made but never returned,
// so a crawler polling a busy scope allocates nothing.
var unusedPermits = sync.Pool{New: func() any { return new(Permit) }}

// newPermit resolves req's scopes into a permit that holds nothing yet:
// into, a zero Permit, if not nil (one from unusedPermits for TryAcquire,
// which returns it there when it refuses; the Transport's, allocated with
// what else a round trip needs), else a new one.
func (m *ThrottlingManager) newPermit(ctx context.Context, req *http.Request, now time.Time, into *Permit) (*Permit, error) {
	if req == nil {
		return nil, ErrNilRequest
	}
	if now.UnixNano()-m.sweepNext.Load() >= 0 {
		m.sweepStep(now)
	}
	// One lookup a context (rctx is often ctx: looking it up again costs
	// less than comparing the two, an interface comparison).
	cv, rv := valuesOf(ctx), valuesOf(req.Context())
	var (
		scopes  []Scope
		fromCtx bool
		na      bool
	)
	if cv != nil {
		scopes, fromCtx, na = cv.scopes, cv.hasScopes, cv.noAdjust
	}
	if rv != nil {
		if !fromCtx {
			scopes, fromCtx = rv.scopes, rv.hasScopes
		}
		na = na || rv.noAdjust
	}
	if !fromCtx && m.cfg.Scoper == nil {
		s, sh, err := m.hostScope(req, now) // lookup(requestHost(req))
		if err != nil {
			return nil, err
		}
		p := into
		if p == nil {
			p = sh.freshPermit()
		}
		p.noAdjust = na // p is zero: only what is not zero is written (setOne)
		p.setOne(s, 1)
		return p, nil
	}
	p := into
	if p == nil {
		p = new(Permit) // a Scoper's or the context's scopes: the shard is not known yet
	}
	p.noAdjust = na
	if !fromCtx {
		var err error
		if scopes, err = m.callScoper(req); err != nil {
			return nil, err
		}
	}
	if err := m.resolve(p, scopes, now); err != nil {
		return nil, err
	}
	return p, nil
}

// groupPermit is newPermit for the head of the ReadyQueue group g, whose
// scopes newPermit resolved at Push: it fills p, a zero Permit, with g's
// scopes and the head's costs and NoAdjust (kept at Push). A scope
// forgotten since is looked up again by the admission (tryFast), as one
// forgotten after newPermit is.
func (m *ThrottlingManager) groupPermit(now time.Time, g *setQueue, p *Permit) {
	if now.UnixNano()-m.sweepNext.Load() >= 0 {
		m.sweepStep(now)
	}
	e := &g.entries[0]
	p.noAdjust = e.noAdjust
	if len(g.scopes) == 1 {
		p.setOne(g.scopes[0], e.costOf(0))
		return
	}
	hs := make([]held, len(g.scopes))
	for i, s := range g.scopes {
		hs[i] = held{s: s, ticket: Ticket{Cost: e.costOf(i)}}
	}
	p.setScopes(hs)
}

func (m *ThrottlingManager) callScoper(req *http.Request) (s []Scope, err error) {
	s, err = m.cfg.Scoper(req)
	if err != nil {
		return nil, fmt.Errorf("throttle: scoper: %w", err)
	}
	return s, nil
}

// resolve checks scopes and sets p's (setScopes), sorted by key (the
// lock order) with duplicates merged.
func (m *ThrottlingManager) resolve(p *Permit, scopes []Scope, now time.Time) error {
	switch {
	case len(scopes) == 0:
		return ErrNoScope
	case len(scopes) > maxScopesPerRequest:
		return ErrTooManyScopes
	}
	for _, sc := range scopes {
		if sc.Key == "" {
			return ErrEmptyScopeKey
		}
		if sc.Cost < 0 {
			return fmt.Errorf("%w: %q costs %d", ErrNegativeCost, sc.Key, sc.Cost)
		}
	}
	hs := p.one[:0]
	if len(scopes) > 1 {
		hs = make([]held, 0, len(scopes))
	}
	for _, sc := range scopes {
		cost := max(sc.Cost, 1)
		if i := slices.IndexFunc(hs, func(h held) bool { return h.s.key == sc.Key }); i >= 0 {
			hs[i].ticket.Cost += cost
			continue
		}
		s, err := m.lookup(sc.Key, now)
		if err != nil {
			return err
		}
		hs = append(hs, held{s: s, ticket: Ticket{Cost: cost}})
	}
	p.setScopes(hs)
	slices.SortFunc(hs, func(a, b held) int {
		switch {
		case a.s.key < b.s.key:
			return -1
		case a.s.key > b.s.key:
			return 1
		}
		return 0
	})
	return nil
}

func lockAll(hs []held) {
	for i := range hs {
		hs[i].s.mu.Lock()
	}
}

func unlockAll(hs []held) {
	for i := range hs {
		hs[i].s.mu.Unlock()
	}
}

// relock locks hs's scopes, first replacing any that were forgotten for
// idleness since they were looked up.
func (m *ThrottlingManager) relock(hs []held, now time.Time) error {
	for {
		lockAll(hs)
		dead := slices.IndexFunc(hs, func(h held) bool { return h.s.dead })
		if dead < 0 {
			return nil
		}
		unlockAll(hs)
		s, err := m.lookup(hs[dead].s.key, now)
		if err != nil {
			return err
		}
		hs[dead].s = s
	}
}

// evaluate decides, with hs's scopes locked, whether the request may start
// at now. w is the waiter, nil for a caller not queued. It returns the
// admission: ReasonNone to start now; otherwise At (zero: wait for a wake)
// and the index of the scope that holds it back.
func (m *ThrottlingManager) evaluate(hs []held, w *waiter, now, notBefore time.Time) (Admission, int) {
	for i := range hs {
		var mine *qnode
		if w != nil {
			mine = &w.nodes[i]
		}
		if mustWait(hs[i].s, mine) {
			m.blockedBy(w, hs, i)
			return Admission{Reason: ReasonQueue}, i
		}
	}
	at, why, who := now, ReasonNone, -1
	if !notBefore.IsZero() && notBefore.After(now) {
		at, why, who = notBefore, ReasonGate, notBeforeBlocker
	}
	blocked := false
	for i := range hs {
		a := hs[i].s.pol.admit(now, hs[i].ticket.Cost)
		switch {
		case a.Reason == ReasonNone:
		case a.At.IsZero():
			if !blocked {
				blocked, why, who = true, a.Reason, i
			}
		case !blocked && a.At.After(at):
			at, why, who = a.At, a.Reason, i
		case !blocked && !a.At.After(now) && !at.After(now):
			// A custom policy said "not now" with a time that has come:
			// don't spin, ask again shortly.
			at, why, who = now.Add(time.Millisecond), a.Reason, i
		}
	}
	m.blockedBy(w, hs, who)
	if blocked {
		return Admission{Reason: why}, who
	}
	if why == ReasonNone {
		return Admission{}, -1
	}
	return Admission{At: at, Reason: why}, who
}

// notBeforeBlocker is the blocker index of a request held by its own
// not-before time (a redirect's Retry-After): no scope's doing, so every
// scope's other waiters may pass it, and its own timer wakes it.
const notBeforeBlocker = -2

// ownTime is the blocker of a waiter held by notBefore.
var ownTime = &scope{key: "(redirect Retry-After)"}

// blockedBy records which of w's scopes holds it back (i == -1: none of
// them, or the global cap). When that changes, waiters behind w in its
// other scopes may now pass it, so the first of them that needs each scope
// is woken.
func (m *ThrottlingManager) blockedBy(w *waiter, hs []held, i int) {
	if w == nil {
		return
	}
	var b *scope
	switch {
	case i >= 0:
		b = hs[i].s
	case i == notBeforeBlocker:
		b = ownTime
	}
	if w.blocker == b {
		return
	}
	w.blocker = b
	if b == nil {
		return
	}
	for j := range hs {
		if hs[j].s != b && w.nodes[j].queued {
			wakeNeeding(hs[j].s, w.nodes[j].next)
		}
	}
}

// start records the start in every scope of p. The manager's robots.txt
// fetch is counted apart: in a default scope it is no start for the delay
// (defaultScope.startRobots).
func (m *ThrottlingManager) start(p *Permit, now time.Time) {
	hs := p.scopes()
	for i := range hs {
		h := &hs[i]
		h.s.pol.begin(&h.ticket, now, h.ticket.Cost, p.robotsFetch) // in place: see defaultScope.start
		h.s.lastUsed = now.UnixNano()
		h.s.started(p.robotsFetch)
	}
	p.setAcquired(now)
}

// tryFast admits p at now if no one waits ahead of it and every scope and
// the global cap admit it.
func (m *ThrottlingManager) tryFast(p *Permit, now time.Time) (bool, Admission, int) {
	if p.n == 1 {
		return m.tryFastOne(p, now)
	}
	if err := m.relock(p.scopes(), now); err != nil {
		return false, Admission{}, -1
	}
	adm, who := m.evaluate(p.scopes(), nil, now, time.Time{})
	if adm.Reason == ReasonNone {
		if m.global.tryFast() {
			m.start(p, now)
			unlockAll(p.scopes())
			m.raiseAfterStart(p)
			return true, adm, -1
		}
		adm = Admission{Reason: ReasonGlobal}
	}
	unlockAll(p.scopes())
	m.raise(p.scopes())
	return false, adm, who
}

// tryFastOne is tryFast for a permit of one scope (most requests): the
// same steps as relock, evaluate and start, without their loops.
func (m *ThrottlingManager) tryFastOne(p *Permit, now time.Time) (bool, Admission, int) {
	h := &p.one[0] // a permit of one scope holds it in one
	s := h.s
	s.mu.Lock()
	for s.dead {
		s.mu.Unlock()
		ns, err := m.lookup(s.key, now)
		if err != nil {
			return false, Admission{}, -1
		}
		h.s, s = ns, ns
		s.mu.Lock()
	}
	var adm Admission
	who := -1
	if mustWait(s, nil) {
		adm, who = Admission{Reason: ReasonQueue}, 0
		s.mu.Unlock()
		m.raise(p.scopes())
		return false, adm, who
	}
	// The policy's admission also tells the time its start takes, which
	// the start then need not work out again.
	a, latest, same := s.pol.admitLatest(now, h.ticket.Cost)
	if a.Reason != ReasonNone {
		who = 0
		switch {
		case a.At.IsZero():
			adm = Admission{Reason: a.Reason}
		case a.At.After(now):
			adm = a
		default:
			// As in evaluate: a time that has come, ask again shortly.
			adm = Admission{At: now.Add(time.Millisecond), Reason: a.Reason}
		}
	} else {
		if m.global.tryFast() {
			if same && !p.robotsFetch {
				s.pol.startLatest(&h.ticket, latest, false, h.ticket.Cost)
			} else {
				s.pol.begin(&h.ticket, now, h.ticket.Cost, p.robotsFetch)
			}
			s.lastUsed = now.UnixNano()
			s.started(p.robotsFetch)
			p.setAcquired(now)
			s.mu.Unlock()
			m.raiseAfterStart(p)
			return true, adm, -1
		}
		adm = Admission{Reason: ReasonGlobal}
	}
	s.mu.Unlock()
	m.raise(p.scopes())
	return false, adm, who
}

// wait queues the caller in each scope of p and waits for its turn
// (localTurn).
func (m *ThrottlingManager) wait(ctx context.Context, p *Permit, notBefore time.Time) (*Permit, error) {
	hs := p.scopes()
	t := &localTurn{m: m, ctx: ctx, p: p, w: newWaiter(len(hs)), notBefore: notBefore}
	if err := m.countWaiting(); err != nil {
		return nil, err
	}
	defer m.waiting.Add(-1)

	if err := m.relock(hs, m.clock.Now()); err != nil {
		return nil, err
	}
	// The time is read with the scopes locked: a clock read before
	// waiting for the locks may be stale by then (a fake clock that a
	// test moves on meanwhile), and a start would be recorded, and the
	// next wait timed, from a moment already past.
	t.now, t.locked = m.clock.Now(), true
	for i := range hs {
		hs[i].s.queue.push(&t.w.nodes[i])
	}
	if err := m.waitTurn(ctx, t); err != nil {
		return nil, err
	}
	return p, nil
}

// localTurn is a caller's place in the queues of its scopes (engine.go's
// turn): each ask evaluates them all under their locks, in order.
type localTurn struct {
	m         *ThrottlingManager
	ctx       context.Context
	p         *Permit
	w         *waiter
	notBefore time.Time
	now       time.Time // the time of the ask, read with the scopes locked
	locked    bool      // the scopes are locked (the first ask: wait locked them)
	// the last ask's answer, and the scope that gave it
	adm Admission
	who int
}

func (t *localTurn) ask() (bool, time.Time, error) {
	m, hs, w := t.m, t.p.scopes(), t.w
	if !t.locked {
		lockAll(hs)
		t.now = m.clock.Now() // with the scopes locked, as in wait
	}
	t.locked = false
	adm, who := m.evaluate(hs, w, t.now, t.notBefore)
	if adm.Reason == ReasonNone {
		if m.global.take(w) {
			m.start(t.p, t.now)
			m.dequeue(w, hs)
			unlockAll(hs)
			m.raiseAfterStart(t.p)
			return true, time.Time{}, nil
		}
		adm = Admission{Reason: ReasonGlobal}
	} else {
		m.global.leave(w) // not ready any more: give the global turn on
	}
	if dl, ok := t.ctx.Deadline(); ok && !adm.At.IsZero() && dl.Before(adm.At) {
		m.dequeue(w, hs)
		err := &WaitError{Scope: scopeKey(hs, who), Reason: adm.Reason, ReadyAt: adm.At, Err: context.DeadlineExceeded}
		unlockAll(hs)
		return false, time.Time{}, err
	}
	unlockAll(hs)
	if m.guarded.Load() {
		if pv := takePanic(hs); pv != nil {
			lockAll(hs)
			m.global.leave(w)
			m.dequeue(w, hs)
			unlockAll(hs)
			panic(pv)
		}
	}
	if adm.At.IsZero() {
		// Waiting for a release: a slot may be freed without one first
		// (MaxHold reclaims the oldest permit).
		adm.At = m.freedAt()
	}
	t.adm, t.who = adm, who
	return false, adm.At, nil
}

func (t *localTurn) wake() <-chan struct{} { return t.w.wake }

func (t *localTurn) woke() {
	if len(t.m.obs.beforeAdmit) > 0 {
		t.m.beforeAdmitWaiting(t.w, t.p.scopes())
	}
}

func (t *localTurn) cancelled(err error) error {
	hs := t.p.scopes()
	lockAll(hs)
	t.m.global.leave(t.w)
	t.m.dequeue(t.w, hs)
	unlockAll(hs)
	return &WaitError{Scope: scopeKey(hs, t.who), Reason: t.adm.Reason, ReadyAt: t.adm.At, Err: err}
}

// beforeAdmitWaiting is beforeAdmit for the waiter w, queued in hs: if a
// subscriber panics (a hook MaxHold's reclaim calls), w leaves the queues
// before the panic goes on to its caller, so no one waits behind it.
func (m *ThrottlingManager) beforeAdmitWaiting(w *waiter, hs []held) {
	if v, panicked := protect(func() { m.beforeAdmit(m.clock.Now()) }); panicked {
		lockAll(hs)
		m.global.leave(w)
		m.dequeue(w, hs)
		unlockAll(hs)
		panic(v)
	}
}

// Waiting returns the number of callers blocked in Acquire now.
func (m *ThrottlingManager) Waiting() int { return int(m.waiting.Load()) }

// armUntil sets *t to fire at the clock's time at, and returns its channel
// (a ready one when at has come). A Clock's timers take durations, so the
// duration is computed from the time read just before arming; if the clock
// moved meanwhile (a fake clock advanced by a test's goroutine, which may
// already have fired the previous timer), it is armed again from the new
// time, so the timer is never late by the move, or, for a fake clock that
// moved exactly to at, pending forever.
func (m *ThrottlingManager) armUntil(t *Timer, at time.Time) <-chan time.Time {
	for {
		cur := m.clock.Now()
		d := at.Sub(cur)
		if d <= 0 {
			if *t != nil {
				(*t).Stop()
			}
			return readyTimeC
		}
		if *t == nil {
			*t = m.clock.NewTimer(d)
		} else {
			(*t).Reset(d)
		}
		if m.clock.Now().Sub(cur) < time.Millisecond {
			return (*t).C()
		}
	}
}

// readyTimeC is a channel that always has a value: a timer already due.
var readyTimeC = func() <-chan time.Time {
	c := make(chan time.Time)
	close(c)
	return c
}()

// dequeue takes w out of its scopes' queues and wakes, in each, the first
// waiter that may need the place w leaves.
func (m *ThrottlingManager) dequeue(w *waiter, hs []held) {
	for i := range hs {
		q := &hs[i].s.queue
		if q.remove(&w.nodes[i]) || q.n > 0 {
			wakeNeeding(hs[i].s, q.head)
		}
	}
}

func scopeKey(hs []held, i int) string {
	if i < 0 || i >= len(hs) {
		return "" // notBeforeBlocker, or unknown
	}
	return hs[i].s.key
}

// raiseAfterStart and raise raise a panic that a custom ScopeManager kept
// (custompolicy.go) once the caller's locks are released. Small enough to
// inline: without a custom ScopeManager, the path pays one load.
func (m *ThrottlingManager) raiseAfterStart(p *Permit) {
	if m.guarded.Load() {
		m.raiseAfterStartSlow(p)
	}
}

func (m *ThrottlingManager) raise(hs []held) {
	if m.guarded.Load() {
		m.raiseSlow(hs)
	}
}
