package throttle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle/internal/admission"
	"github.com/crawlerkit/throttle/store"
)

// shared is a manager's link to its Config.Store: the request's path when
// the state lives in a store.
//
//	Acquire -> scopes resolved as usual (local scope entries hold the
//	   policies, a cache of the store's learned state)
//	-> a global-cap token (local) -> each scope's limits from its policy
//	-> Store.Admit: one round trip, all scopes at once
//	-> admitted: the permit holds a lease; refused: wait for a release of
//	   one of the scopes (Store.Watch) or the answer's time, then again
//	Release -> each policy learns -> Store.Release: lease ended, gate,
//	   quota corrections, learned state (version-checked; a conflict is
//	   merged by learning again on the store's state and sent again)
type shared struct {
	store store.Store
	lease string        // this manager's lease prefix
	seq   atomic.Uint64 // lease counter
	// offset estimates store time minus local clock time, in ns.
	offset atomic.Int64

	mu       sync.Mutex
	waiters  map[string]map[*sharedWaiter]struct{}
	nWaiters int
	stop     func() // ends the Watch; nil while no one waits

	downMu    sync.Mutex
	downUntil time.Time // StoreFallbackLocal: local state until then
	down      bool      // an outage was logged and has not ended
}

type sharedWaiter struct{ wake chan struct{} }

func newShared(st store.Store) *shared {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &shared{store: st, lease: hex.EncodeToString(b[:]) + ":", waiters: make(map[string]map[*sharedWaiter]struct{})}
}

func (sh *shared) newLease() string {
	return sh.lease + strconv.FormatUint(sh.seq.Add(1), 36)
}

func (sh *shared) storeTime(local time.Time) time.Time {
	return local.Add(time.Duration(sh.offset.Load()))
}

// watch registers w for releases of keys; the Store's Watch runs while
// anyone waits.
func (sh *shared) watch(w *sharedWaiter, hs []held) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, h := range hs {
		set := sh.waiters[h.s.key]
		if set == nil {
			set = make(map[*sharedWaiter]struct{})
			sh.waiters[h.s.key] = set
		}
		set[w] = struct{}{}
	}
	if sh.nWaiters++; sh.nWaiters == 1 {
		sh.stop = sh.store.Watch(sh.released)
	}
}

func (sh *shared) unwatch(w *sharedWaiter, hs []held) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, h := range hs {
		if set := sh.waiters[h.s.key]; set != nil {
			delete(set, w)
			if len(set) == 0 {
				delete(sh.waiters, h.s.key)
			}
		}
	}
	if sh.nWaiters--; sh.nWaiters == 0 && sh.stop != nil {
		sh.stop()
		sh.stop = nil
	}
}

// released wakes this process's waiters on key. Every waiter of the key
// asks the store again: as many round trips as local waiters, the price
// of not keeping a queue in the store.
func (sh *shared) released(key string) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for w := range sh.waiters[key] {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

// useStore reports whether requests go to the store at local time now;
// false only while StoreFallbackLocal waits out an outage.
func (m *ThrottlingManager) useStore(now time.Time) bool {
	sh := m.shared
	if sh == nil {
		return false
	}
	if !m.cfg.StoreFallbackLocal {
		return true
	}
	sh.downMu.Lock()
	defer sh.downMu.Unlock()
	return !now.Before(sh.downUntil)
}

// storeFailed handles a store error: failing closed it is returned as a
// *store.Error; with StoreFallbackLocal the manager turns to local state for
// StoreRetry (one warning per outage) and nil is returned.
func (m *ThrottlingManager) storeFailed(op string, err error) error {
	if !m.cfg.StoreFallbackLocal || op == "release" {
		if op == "release" {
			m.log.Warn("throttle: store release failed; the lease expires on its own", "err", err)
		}
		return &store.Error{Op: op, Err: err}
	}
	sh := m.shared
	sh.downMu.Lock()
	sh.downUntil = m.clock.Now().Add(m.cfg.StoreRetry)
	first := !sh.down
	sh.down = true
	sh.downMu.Unlock()
	if first {
		m.log.Warn("throttle: store unavailable, using local state", "err", err, "retry", m.cfg.StoreRetry)
	}
	return nil
}

// storeAnswered ends a logged outage.
func (m *ThrottlingManager) storeAnswered() {
	sh := m.shared
	if !m.cfg.StoreFallbackLocal {
		return
	}
	sh.downMu.Lock()
	back := sh.down
	sh.down = false
	sh.downMu.Unlock()
	if back {
		m.log.Info("throttle: store answers again, using shared state")
	}
}

// errUseLocal tells acquire to go on with local state (StoreFallbackLocal).
var errUseLocal = errors.New("throttle: use local state")

// admitShared asks the store once to admit p with req (its Lease, Waits
// and Since set; the scopes are filled here). On admission p holds the
// lease; the answer says otherwise why (the Reason returned: the store's
// reason as the refusing scope's policy names it) and until when.
func (m *ThrottlingManager) admitShared(ctx context.Context, p *Permit, req *store.Request) (store.Answer, Reason, error) {
	sh := m.shared
	local := m.clock.Now()
	now := sh.storeTime(local)
	req.Scopes = make([]store.Scope, len(p.scopes()))
	if err := m.relock(p.scopes(), local); err != nil {
		return store.Answer{}, ReasonNone, err
	}
	for i := range p.scopes() {
		h := &p.scopes()[i]
		sc := &req.Scopes[i]
		sc.Key, sc.Cost, sc.Version = h.s.key, h.ticket.Cost, h.s.pol.version()
		h.s.pol.sharedLimits(now, sc)
		h.s.lastUsed = local.UnixNano()
	}
	unlockAll(p.scopes())

	ans, err := sh.store.Admit(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return ans, ReasonNone, &WaitError{Err: ctx.Err()}
		}
		if errors.Is(err, store.ErrPastDeadline) {
			// The store saw the caller's deadline pass (in its own
			// clock, a little ahead of ours): the caller gave up.
			return ans, ReasonNone, &WaitError{Err: context.DeadlineExceeded}
		}
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			// The caller's deadline ended the call (a connection's read
			// deadline can fire before the context's own timer marks it
			// done): the caller gave up, the store did not fail.
			return ans, ReasonNone, &WaitError{Err: context.DeadlineExceeded}
		}
		if err := m.storeFailed("admit", err); err != nil {
			return ans, ReasonNone, err
		}
		return ans, ReasonNone, errUseLocal
	}
	m.storeAnswered()
	local = m.clock.Now()
	sh.offset.Store(int64(ans.Now.Sub(local)))
	lockAll(p.scopes())
	for i := range p.scopes() {
		h := &p.scopes()[i]
		if i < len(ans.Learned) {
			if l := ans.Learned[i]; l.Data != nil && l.Version > h.s.pol.version() {
				if err := h.s.pol.sharedImport(l.Data); err != nil {
					m.log.Warn("throttle: store holds unusable learned state; keeping ours", "scope", h.s.key, "err", err)
				}
				h.s.pol.setVersion(l.Version)
			}
		}
		if ans.Admitted && i < len(ans.Tickets) {
			t := ans.Tickets[i]
			h.ticket = Ticket{Slot: t.Slot, Cost: h.ticket.Cost, WindowIndex: t.WindowIndex, Start: ans.Now}
			h.s.started(p.robotsFetch)
		}
	}
	why := ans.Reason // (store.Reason is Reason)
	if !ans.Admitted && ans.Scope >= 0 && ans.Scope < len(p.scopes()) {
		why = p.scopes()[ans.Scope].s.pol.sharedWhy(why)
	}
	unlockAll(p.scopes())
	if ans.Admitted {
		e := p.extension()
		e.lease, e.shared, e.local = req.Lease, true, local
		p.setAcquired(ans.Now)
	}
	return ans, why, nil
}

// storeEngine is the engine with the state in Config.Store (engine.go):
// each admission is one round trip to the store for all of a request's
// scopes at once.
type storeEngine struct{ m *ThrottlingManager }

// acquire admits p in the store: asks, and between them a wait for a
// release of one of the scopes or for the time the store named
// (storeTurn). Every ask carries the same lease and, after the first
// refusal, when the caller began to wait: the store serves the fleet's
// waiters in that order (store.TurnGrace). A caller that gives up after
// a refusal gives its turn back.
func (e storeEngine) acquire(ctx context.Context, p *Permit, now, notBefore time.Time) (_ *Permit, err error) {
	m := e.m
	t := &storeTurn{m: m, ctx: ctx, p: p, req: store.Request{Lease: m.shared.newLease(), Waits: true},
		sw: &sharedWaiter{wake: make(chan struct{}, 1)}, gw: newWaiter(0)}
	defer func() {
		if err != nil && !t.req.Since.IsZero() && !isStoreFailure(err) {
			m.leaveShared(p, t.req.Lease)
		}
		if t.watching {
			m.shared.unwatch(t.sw, p.scopes())
		}
		if t.counted {
			m.waiting.Add(-1)
		}
	}()
	if notBefore.After(m.clock.Now()) {
		t.state, t.notBefore = storeGated, notBefore
	}
	if err := m.waitTurn(ctx, t); err != nil {
		return nil, err
	}
	return p, nil
}

// storeTurn is a caller's turn in the store (engine.go's turn). It waits
// in one of three states: for the Transport's redirect gate, for this
// manager's global cap, or for the store.
type storeTurn struct {
	m         *ThrottlingManager
	ctx       context.Context
	p         *Permit
	req       store.Request
	sw        *sharedWaiter // woken by a release of one of the scopes
	gw        *waiter       // woken by the global cap
	state     storeWait
	notBefore time.Time
	watching  bool // sw is registered for the scopes' releases
	counted   bool // the caller counts in Waiting
	gaveTurn  bool // the turn is given back for this wait for the global cap
	// the store's last refusal: the refusing scope and why
	scope int
	why   Reason
}

// storeWait is what a storeTurn waits for.
type storeWait uint8

const (
	storeAsking storeWait = iota // nothing: it asks, or waits for the store's answer's time
	storeGated                   // notBefore
	storeGlobal                  // the global cap
)

func (t *storeTurn) ask() (bool, time.Time, error) {
	m, p := t.m, t.p
	if t.state == storeGated {
		return false, t.notBefore, nil
	}
	if !m.global.take(t.gw) {
		if !t.req.Since.IsZero() && !t.gaveTurn {
			// This manager is at its GlobalConcurrency: the turn the
			// last refusal gave would hold the fleet behind a waiter
			// that cannot start. It keeps its place (Since).
			m.leaveShared(p, t.req.Lease)
			t.gaveTurn = true
		}
		t.state = storeGlobal
		return false, time.Time{}, nil
	}
	t.state = storeAsking
	if !t.watching {
		// Before asking: a release between a refusal and the
		// registration would be missed.
		m.shared.watch(t.sw, p.scopes())
		t.watching = true
	}
	ans, why, err := m.admitShared(t.ctx, p, &t.req)
	if err == nil && ans.Admitted {
		return true, time.Time{}, nil
	}
	m.global.release()
	if err != nil {
		return false, time.Time{}, err
	}
	if t.req.Since.IsZero() {
		t.req.Since = ans.Now
	}
	t.gaveTurn = false
	t.scope, t.why = ans.Scope, why
	local := m.clock.Now()
	var d time.Duration
	if !ans.At.IsZero() {
		d = max(ans.At.Sub(ans.Now), time.Millisecond)
		// A concurrency or queue refusal's time is only a fallback
		// wake (for redisstore the earliest lease expiry, up to
		// LeaseTTL away; the end of the turn of the waiter ahead): a
		// release, or that waiter's admission, may let this one go
		// at any moment, so, as without a store, it is no reason to
		// give up before the deadline.
		if dl, ok := t.ctx.Deadline(); ok && why != ReasonConcurrency && why != ReasonQueue && dl.Before(local.Add(d)) {
			return false, time.Time{}, &WaitError{Scope: scopeKey(p.scopes(), ans.Scope), Reason: why, ReadyAt: local.Add(d), Err: context.DeadlineExceeded}
		}
	}
	if err := m.refusing(p.scopes(), local, Admission{At: local.Add(d), Reason: why}); err != nil {
		return false, time.Time{}, err
	}
	if !t.counted {
		if err := m.countWaiting(); err != nil {
			return false, time.Time{}, err
		}
		t.counted = true
	}
	var again time.Time
	if d > 0 {
		again = local.Add(d)
	}
	return false, again, nil
}

func (t *storeTurn) wake() <-chan struct{} {
	switch t.state {
	case storeGated:
		return nil // only the time ends it
	case storeGlobal:
		return t.gw.wake
	}
	return t.sw.wake
}

func (t *storeTurn) woke() {
	if t.state == storeGated {
		t.state = storeAsking
	}
}

func (t *storeTurn) cancelled(err error) error {
	switch t.state {
	case storeGated:
		return &WaitError{Reason: ReasonGate, ReadyAt: t.notBefore, Err: err}
	case storeGlobal:
		t.m.global.leave(t.gw)
		return &WaitError{Reason: ReasonGlobal, Err: err}
	}
	return &WaitError{Scope: scopeKey(t.p.scopes(), t.scope), Reason: t.why, Err: err}
}

// isStoreFailure reports whether err is the store's failure (failing
// closed, or turning to local state), not the caller's giving up: the
// store would not take the turn back either.
func isStoreFailure(err error) bool {
	var se *store.Error
	return err == errUseLocal || errors.As(err, &se)
}

// leaveShared gives back the turn a waiter with lease may hold in p's
// scopes: a Release of the lease, which never held a slot. Without it the
// turn would hold the waiters behind it until it ends (store.TurnGrace
// after the time its last refusal named).
func (m *ThrottlingManager) leaveShared(p *Permit, lease string) {
	rel := store.Release{Lease: lease, Scopes: make([]store.ReleaseScope, len(p.scopes()))}
	for i := range p.scopes() {
		rel.Scopes[i] = store.ReleaseScope{Key: p.scopes()[i].s.key, QuotaFloor: -1}
	}
	if _, err := m.shared.store.Release(context.Background(), &rel); err != nil {
		m.log.Debug("throttle: giving a waiter's turn back to the store failed; it ends on its own", "err", err)
	}
}

// try is TryAcquire with the state in the store: one ask.
func (e storeEngine) try(ctx context.Context, p *Permit, _ time.Time) (bool, Admission, error) {
	m := e.m
	if !m.global.tryFast() {
		return false, Admission{Reason: ReasonGlobal}, nil
	}
	ans, why, err := m.admitShared(ctx, p, &store.Request{Lease: m.shared.newLease()})
	if err == nil && ans.Admitted {
		return true, Admission{}, nil
	}
	m.global.release()
	if err != nil {
		return false, Admission{}, err
	}
	adm := Admission{Reason: why}
	if !ans.At.IsZero() {
		adm.At = m.clock.Now().Add(ans.At.Sub(ans.Now))
	}
	return false, adm, nil
}

// maxLearnRetries bounds the merges of learned state after conflicts.
const maxLearnRetries = 3

// release ends p's lease in the store with what each scope learned from
// fb. local is the manager's clock at release.
func (e storeEngine) release(p *Permit, local time.Time, fb *Feedback) {
	m := e.m
	now := p.acquired().Add(local.Sub(p.ext.local))
	rel := store.Release{Lease: p.ext.lease, Scopes: make([]store.ReleaseScope, len(p.scopes()))}
	watch := watchesPolicy(&m.cfg.Hooks)
	var ev hookEvents
	for i := range p.scopes() {
		h := &p.scopes()[i]
		rs := &rel.Scopes[i]
		h.s.mu.Lock()
		rs.Key, rs.Version = h.s.key, h.s.pol.version()
		rs.Ticket = store.Ticket{Slot: h.ticket.Slot, WindowIndex: h.ticket.WindowIndex}
		var before policySnap
		if watch {
			before, _ = h.s.pol.snap()
		}
		signal := h.s.pol.sharedLearn(now, h.ticket, fb, rs, true)
		h.s.lastUsed, h.s.signal = local.UnixNano(), signal
		h.s.counts.finished(now, fb, signal, p.robotsFetch)
		if watch {
			ev.observe(h.s, before, fb, signal, p.robotsFetch)
		}
		h.s.mu.Unlock()
	}
	m.global.release()
	defer m.afterRelease(p, fb, &ev, watch)
	ctx := context.Background()
	for try := 0; ; try++ {
		ans, err := m.shared.store.Release(ctx, &rel)
		if err != nil {
			_ = m.storeFailed("release", err)
			return
		}
		m.settleVersions(p, &rel, ans.Conflicts)
		if len(ans.Conflicts) == 0 || try == maxLearnRetries {
			if len(ans.Conflicts) > 0 {
				m.log.Debug("throttle: learned state not stored after repeated conflicts", "scopes", len(ans.Conflicts))
			}
			return
		}
		// Merge: learn again from fb on the store's state, send that.
		retry := store.Release{Scopes: make([]store.ReleaseScope, 0, len(ans.Conflicts))}
		for _, c := range ans.Conflicts {
			h := &p.scopes()[c.Scope]
			rs := store.ReleaseScope{Key: h.s.key, QuotaFloor: -1}
			h.s.mu.Lock()
			sp := h.s.pol
			if c.Learned.Data != nil && sp.sharedImport(c.Learned.Data) == nil {
				sp.sharedLearn(now, h.ticket, fb, &rs, false)
			} else {
				sp.sharedLearn(now, h.ticket, &Feedback{NoAdjust: true}, &rs, false) // ours as it is
			}
			sp.setVersion(c.Learned.Version)
			rs.Version = c.Learned.Version
			h.s.mu.Unlock()
			retry.Scopes = append(retry.Scopes, rs)
		}
		rel, p = retry, permitFor(p, ans.Conflicts)
	}
}

// settleVersions records the versions the store gave the learned state it
// stored: max(stored, sent)+1, where stored was the sent one or 0.
func (m *ThrottlingManager) settleVersions(p *Permit, rel *store.Release, conflicts []store.Conflict) {
	for i := range rel.Scopes {
		rs := &rel.Scopes[i]
		if !rs.Learned || containsScope(conflicts, i) {
			continue
		}
		h := &p.scopes()[i]
		h.s.mu.Lock()
		if sp := h.s.pol; sp.version() == rs.Version {
			sp.setVersion(rs.Version + 1)
		}
		h.s.mu.Unlock()
	}
}

func containsScope(cs []store.Conflict, i int) bool {
	for _, c := range cs {
		if c.Scope == i {
			return true
		}
	}
	return false
}

// permitFor returns a permit view holding only the conflicting scopes, in
// the order of the retry's Scopes, for the release's retries, which read
// only its scopes (it has no acquired time).
func permitFor(p *Permit, cs []store.Conflict) *Permit {
	q := &Permit{ext: p.ext}
	hs := make([]held, len(cs))
	for i, c := range cs {
		hs[i] = p.scopes()[c.Scope]
	}
	q.setScopes(hs)
	return q
}

// sharedBounds returns the bounds of the scope's state in a Store
// (store.Scope's MaxWait and MaxConcurrency): the longest wait its
// policies can ask, jitter included (the delay now, d; the configured
// one; AutoThrottle's cap; backoff's, which caps server gates too), and
// the most permits they can allow at once.
func (s *defaultScope) sharedBounds(d time.Duration) (time.Duration, int) {
	c := &s.cfg
	w := max(d, c.Delay, c.Backoff.MaxDelay)
	if c.AutoThrottle.Enabled {
		w = max(w, c.AutoThrottle.MaxDelay)
	}
	conc := c.Concurrency
	if c.Rampup.Enabled {
		conc = s.rampup.maxConc(c, s.globalCap)
	}
	return admission.ScaleDuration(w, 1+max(c.Jitter.Max, c.Backoff.Jitter.Max, 0)), conc
}
