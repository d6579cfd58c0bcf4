package throttle

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"hash/maphash"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A ThrottlingManager decides when each request may start. It maps a
// request to its scopes, admits it when every scope admits it at the same
// instant, and routes the response's feedback to each scope's ScopeManager.
//
// A ThrottlingManager is safe for concurrent use by multiple goroutines.
// Waiting callers are served in arrival order per scope; waiting costs no
// goroutine beyond the caller's own and at most one timer per caller.
type ThrottlingManager struct {
	cfg      Config
	clock    Clock
	log      *slog.Logger
	feedback FeedbackFunc
	factory  ScopeManagerFactory

	cfgMu   sync.RWMutex // guards cfg.Scopes against SetScopeConfig
	seed    maphash.Seed
	shards  [numShards]shard
	global  globalGate
	waiting atomic.Int64
	warned  atomic.Bool
	robots  *robotsCache // nil when robots.txt handling is off
	shared  *shared      // nil without Config.Store

	guarded           atomic.Bool // some scope has a custom, guarded ScopeManager
	customFeedback    bool        // Config.Feedback is the user's: guard it
	slowAcquire       bool        // an Admitted hook or MaxHold: acquire does more
	warnedIneffective atomic.Bool
	warnedHold        atomic.Bool
	holds             holds // held permits, with Config.MaxHold
	hasPending        atomic.Bool
	pendingMu         sync.Mutex
	pending           []WarningEvent // warnings found under locks, given out after

	// sweepStep's turn: when it next looks at a shard (UnixNano, which
	// inlines where Before does not; compared by difference, so right
	// for any two times within 292 years even where UnixNano overflows),
	// and the shard it looked at last.
	sweepNext atomic.Int64
	sweepTurn atomic.Uint32

	// releaseHooks are told the key of each scope of every released
	// permit, once its slots are free: each ReadyQueue re-checks the
	// requests that wait for such a release (readyqueue.go). Copied on
	// write; nil while the manager has no ReadyQueue.
	releaseHooks atomic.Pointer[[]func(key string)]
}

const numShards = 64

// shard is one part of the scope map, so lookups of different scopes don't
// contend on one lock.
type shard struct {
	mu      sync.RWMutex
	m       map[string]*scope
	sweepAt time.Time
	peak    int // the most scopes m held since it was made
	// forgotten holds the counts of the scopes forgotten from m.
	forgotten *Counts
	_         [128 - 72]byte // one shard per pair of cache lines: no false sharing
}

// forget removes s from sh (locked, as s), keeping its counts.
func (sh *shard) forget(s *scope) {
	s.dead = true
	delete(sh.m, s.key)
	if sh.forgotten == nil {
		sh.forgotten = new(Counts)
	}
	c := s.counts.counts()
	sh.forgotten.add(&c)
}

// scope is one scope's entry: its policy, its FIFO of waiters, its lock.
type scope struct {
	mu       sync.Mutex
	key      string
	mgr      ScopeManager
	queue    waitQueue
	lastUsed int64 // Unix ns: 8 bytes, where a time.Time takes 24 (a scope a host)
	explicit bool
	dead     bool // forgotten for idleness; look it up again
	counts   scopeCounts
	guard    *guarded // a custom ScopeManager's panic guard; nil for the default one
}

// New returns a ThrottlingManager for cfg, or a *ConfigError naming the
// first invalid field. It warns (once each, see Config.Logger and
// Hooks.Warning) about settings that cannot take effect, such as a Delay
// shorter than SlotDelay/Concurrency.
func New(cfg Config) (*ThrottlingManager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Scopes = maps.Clone(cfg.Scopes)
	m := &ThrottlingManager{
		cfg:      cfg,
		clock:    cfg.Clock,
		log:      cfg.Logger,
		feedback: cfg.Feedback,
		factory:  cfg.NewScopeManager,
		seed:     maphash.MakeSeed(),
	}
	if m.clock == nil {
		m.clock = newRealClock()
	} else {
		m.clock = newMonotonicClock(m.clock) // its time never goes back
	}
	m.sweepNext.Store(m.clock.Now().UnixNano())
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.feedback == nil {
		m.feedback = DefaultFeedback
	} else {
		m.customFeedback = true
	}
	if m.factory == nil {
		m.factory = NewDefaultScopeManager
	}
	m.global.limit = int64(cfg.GlobalConcurrency)
	for i := range m.shards {
		m.shards[i].m = make(map[string]*scope)
	}
	if cfg.Robots.Enabled {
		m.robots = newRobotsCache(m, cfg.Robots)
	}
	if cfg.Store != nil {
		m.shared = newShared(cfg.Store)
	}
	m.slowAcquire = cfg.Hooks.Admitted != nil || cfg.MaxHold > 0
	m.warnStatic()
	return m, nil
}

// Clock returns the manager's clock: Config.Clock, whose time it never lets
// go back (see Clock), or the real clock.
func (m *ThrottlingManager) Clock() Clock { return m.clock }

// A Permit is the right to send one request. It holds one slot in every
// scope of the request until Release. Release is idempotent, and a Permit
// is safe to release from any goroutine.
type Permit struct {
	m        *ThrottlingManager
	scopes   []held
	one      [1]held
	acquired time.Time
	released atomic.Bool
	noAdjust bool

	// ext holds what only a Store or MaxHold needs, so a plain Permit
	// stays small (it is the one allocation of an Acquire).
	ext *permitExt
}

// permitExt is the part of a Permit only a Store or MaxHold uses.
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
}

// extension returns p's permitExt, making it.
func (p *Permit) extension() *permitExt {
	if p.ext == nil {
		p.ext = new(permitExt)
	}
	return p.ext
}

// held is one scope a permit holds a slot in.
type held struct {
	s      *scope
	cost   int64
	ticket Ticket
}

// Acquired returns when the permit was granted.
func (p *Permit) Acquired() time.Time { return p.acquired }

// Scopes returns the keys of the permit's scopes, sorted.
func (p *Permit) Scopes() []string {
	keys := make([]string, len(p.scopes))
	for i, h := range p.scopes {
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
	now := p.m.clock.Now()
	// The Feedback is built in place and passed on by pointer. Returned and
	// passed by value, its 120 bytes were copied twice, with wide loads of
	// fields just written by narrow stores, which the CPU cannot forward:
	// a stall at each copy.
	var fb Feedback
	if !p.m.customFeedback {
		defaultFeedback(&fb, now, resp, err)
		p.done(now, &fb, true)
		return
	}
	fb, pv := p.m.safeFeedback(now, resp, err)
	p.done(now, &fb, true)
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
	p.done(p.m.clock.Now(), &fb, true)
}

// doneAt is done with a copy of fb.
func (p *Permit) doneAt(now time.Time, fb Feedback, fillLatency bool) {
	p.done(now, &fb, fillLatency)
}

// done releases the permit at now with *fb, which it may change;
// fillLatency replaces a zero Latency with the time since Acquire returned.
func (p *Permit) done(now time.Time, fb *Feedback, fillLatency bool) {
	if !p.released.CompareAndSwap(false, true) {
		return
	}
	if fillLatency && fb.Latency == 0 {
		if e := p.ext; e != nil && e.shared {
			fb.Latency = now.Sub(e.local)
		} else {
			fb.Latency = now.Sub(p.acquired)
		}
	}
	if p.noAdjust {
		fb.NoAdjust = true
	}
	p.m.release(p, now, fb)
}

// release gives p's slots back and hands fb to each scope's Finish.
//
// fb stays on the caller's stack: the default ScopeManager is called
// directly, and its Finish keeps no pointer to fb. A custom ScopeManager,
// called through the interface, may keep it, so it gets a heap copy, made
// once per release and passed to every later scope of p (default ones
// too), so each scope sees what an earlier one changed. Keeping the
// Feedback in the Permit instead would make the Permit 248 bytes, not 128:
// that costs every Acquire more than the copy costs a custom policy.
func (m *ThrottlingManager) release(p *Permit, now time.Time, fb *Feedback) {
	if e := p.ext; e != nil {
		if e.hlisted {
			m.holds.remove(p)
		}
		if e.shared {
			cp := *fb // the store path hands fb to interfaces: a copy keeps fb on the stack
			m.releaseShared(p, now, &cp)
			m.notifyRelease(p.scopes) // readyqueue.go
			return
		}
	}
	watch := m.cfg.Hooks.watchesPolicy()
	var ev hookEvents
	var shared *Feedback
	for i := range p.scopes {
		h := &p.scopes[i]
		h.s.mu.Lock()
		var before policySnap
		if watch {
			before, _ = snapOf(h.s)
		}
		if d, ok := h.s.mgr.(*defaultScope); ok && shared == nil {
			d.Finish(now, h.ticket, fb)
		} else {
			if shared == nil {
				shared = new(Feedback)
				*shared = *fb
				fb = shared // later scopes see what this one changed
			}
			h.s.finish(now, h.ticket, shared)
		}
		h.s.lastUsed = now.UnixNano()
		signal := signalOf(h.s, fb)
		h.s.counts.finished(now, fb, signal)
		if h.s.counts.requests == ineffectiveAfter {
			m.checkIneffective(h.s)
		}
		if watch {
			ev.observe(h.s, before, fb, signal)
		}
		wakeNeeding(h.s, h.s.queue.head)
		h.s.mu.Unlock()
	}
	m.global.release()
	if watch || m.cfg.Hooks.Released != nil || m.hasPending.Load() {
		m.afterRelease(p, fb, &ev, watch)
	}
	m.notifyRelease(p.scopes) // after the slots are free; readyqueue.go
	m.raise(p.scopes)
}

// afterRelease calls the hooks of a release, with no lock held.
func (m *ThrottlingManager) afterRelease(p *Permit, fb *Feedback, ev *hookEvents, watch bool) {
	if watch {
		m.fire(ev)
	}
	if h := m.cfg.Hooks.Released; h != nil {
		h(ReleasedEvent{Scopes: p.Scopes(), Status: fb.Status, Err: fb.Err, Latency: fb.Latency})
	}
	m.flushWarnings()
}

// WaitError is returned by Acquire when a caller stops waiting: its
// context ended, or its deadline falls before the earliest possible start.
// It wraps the context's error (context.DeadlineExceeded for a deadline
// that cannot be met).
type WaitError struct {
	Scope   string    // the scope that held the request back, if known
	Reason  Reason    // why it waited
	ReadyAt time.Time // the earliest start, if known
	Err     error
}

// Error says which scope held the request back, why, and when it could
// have started.
func (e *WaitError) Error() string {
	msg := "throttle: stopped waiting"
	if e.Scope != "" {
		msg += " for scope " + strconv.Quote(e.Scope)
	}
	if e.Reason != ReasonNone {
		msg += " (" + e.Reason.String() + ")"
	}
	if !e.ReadyAt.IsZero() {
		msg += " ready at " + e.ReadyAt.Format(time.RFC3339Nano)
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns the context's error.
func (e *WaitError) Unwrap() error { return e.Err }

// Acquire blocks until every scope of req admits it, then returns a Permit
// that the caller must Release. The scopes come from WithScopes on ctx or
// on req's context, else from the Scoper.
//
// It returns an error wrapping ctx.Err() when ctx ends first, and a
// *WaitError wrapping context.DeadlineExceeded at once when ctx's deadline
// falls before the earliest possible start. A caller that stops waiting
// consumes nothing and holds no slot.
func (m *ThrottlingManager) Acquire(ctx context.Context, req *http.Request) (*Permit, error) {
	return m.acquire(ctx, req, time.Time{}, nil)
}

// acquire is Acquire for a request that may not start before notBefore,
// going through rt (nil for manual callers).
func (m *ThrottlingManager) acquire(ctx context.Context, req *http.Request, notBefore time.Time, rt *Transport) (*Permit, error) {
	if !m.slowAcquire {
		return m.acquireNow(ctx, req, notBefore, rt)
	}
	called := m.clock.Now()
	if m.cfg.MaxHold > 0 {
		m.reclaim(called)
	}
	p, err := m.acquireNow(ctx, req, notBefore, rt)
	if err == nil {
		m.admitted(p, called)
	}
	return p, err
}

// admitted does what a granted permit needs beyond the fast path
// (m.slowAcquire): listing it for MaxHold, and the Admitted hook.
func (m *ThrottlingManager) admitted(p *Permit, called time.Time) {
	if m.cfg.MaxHold > 0 {
		m.holds.add(p, m.clock.Now())
	}
	if m.cfg.Hooks.Admitted == nil {
		return
	}
	ok := false
	defer func() {
		if !ok { // the hook panicked: the caller never gets p, so give it back
			p.ReleaseFeedback(Feedback{NoAdjust: true})
		}
	}()
	m.cfg.Hooks.Admitted(AdmittedEvent{Scopes: p.Scopes(), At: p.acquired, Waited: max(0, m.clock.Now().Sub(called))})
	ok = true
}

// acquireNow is acquire without what m.slowAcquire adds.
func (m *ThrottlingManager) acquireNow(ctx context.Context, req *http.Request, notBefore time.Time, rt *Transport) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, &WaitError{Err: err}
	}
	now := m.clock.Now()
	if m.robots != nil && req != nil && m.robots.ensure(ctx, req, rt, now) {
		if err := ctx.Err(); err != nil { // it ended while robots.txt was fetched
			return nil, &WaitError{Reason: ReasonRobots, Err: err}
		}
		now = m.clock.Now()
	}
	p, err := m.newPermit(ctx, req, now, false)
	if err != nil {
		return nil, err
	}
	if m.shared != nil && m.useStore(now) {
		if p, err := m.acquireShared(ctx, p, notBefore); err != errUseLocal {
			return p, err
		}
	}
	if !notBefore.IsZero() && notBefore.After(now) { // IsZero: inline, After: a call
		return m.wait(ctx, p, notBefore)
	}
	ok, adm, who := m.tryFast(p, now)
	if ok {
		return p, nil
	}
	if err := m.refusing(p.scopes, now, adm); err != nil {
		return nil, err
	}
	if dl, has := ctx.Deadline(); has && !adm.At.IsZero() && dl.Before(adm.At) {
		return nil, &WaitError{Scope: scopeKey(p.scopes, who), Reason: adm.Reason, ReadyAt: adm.At, Err: context.DeadlineExceeded}
	}
	return m.wait(ctx, p, time.Time{})
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
	ctx := context.Background()
	if req != nil {
		ctx = req.Context()
	}
	now := m.clock.Now()
	if m.cfg.MaxHold > 0 {
		m.reclaim(now)
	}
	p, err := m.newPermit(ctx, req, now, true)
	if err != nil {
		return nil, Admission{}, err
	}
	var ok bool
	var adm Admission
	if m.shared != nil && m.useStore(now) {
		ok, adm, err = m.tryShared(ctx, p)
		if err == errUseLocal {
			ok, adm, _ = m.tryFast(p, now)
		} else if err != nil {
			*p = Permit{}
			unusedPermits.Put(p)
			return nil, Admission{}, err
		}
	} else {
		ok, adm, _ = m.tryFast(p, now)
	}
	if !ok {
		err := m.refusing(p.scopes, now, adm)
		// Never handed out: safe to reuse, unlike a released Permit a
		// caller may still hold.
		*p = Permit{}
		unusedPermits.Put(p)
		return nil, adm, err
	}
	if m.slowAcquire {
		m.admitted(p, now)
	}
	return p, Admission{}, nil
}

// unusedPermits recycles permits that TryAcquire made but never returned,
// so a crawler polling a busy scope allocates nothing.
var unusedPermits = sync.Pool{New: func() any { return new(Permit) }}

// newPermit resolves req's scopes into a permit that holds nothing yet.
// pooled takes the Permit from unusedPermits (TryAcquire, which returns it
// there when it refuses).
func (m *ThrottlingManager) newPermit(ctx context.Context, req *http.Request, now time.Time, pooled bool) (*Permit, error) {
	if req == nil {
		return nil, ErrNilRequest
	}
	if now.UnixNano()-m.sweepNext.Load() >= 0 {
		m.sweepStep(now)
	}
	var p *Permit
	if pooled {
		p = unusedPermits.Get().(*Permit)
		p.m = m
	} else {
		p = &Permit{m: m}
	}
	rctx := req.Context()
	other := rctx != ctx // one interface comparison (runtime.ifaceeq), not two
	scopes, fromCtx := ScopesFromContext(ctx)
	if !fromCtx && other {
		scopes, fromCtx = ScopesFromContext(rctx)
	}
	p.noAdjust = noAdjust(ctx) || (other && noAdjust(rctx))
	switch {
	case fromCtx:
	case m.cfg.Scoper == nil:
		h, err := RequestHost(req)
		if err != nil {
			return nil, err
		}
		p.scopes = p.one[:1]
		p.scopes[0].cost = 1
		s, err := m.lookup(h, now)
		if err != nil {
			return nil, err
		}
		p.scopes[0].s = s
		return p, nil
	default:
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

func (m *ThrottlingManager) callScoper(req *http.Request) (s []Scope, err error) {
	s, err = m.cfg.Scoper(req)
	if err != nil {
		return nil, fmt.Errorf("throttle: scoper: %w", err)
	}
	return s, nil
}

// resolve checks scopes and fills p.scopes, sorted by key (the lock order)
// with duplicates merged.
func (m *ThrottlingManager) resolve(p *Permit, scopes []Scope, now time.Time) error {
	switch {
	case len(scopes) == 0:
		return ErrNoScope
	case len(scopes) > MaxScopesPerRequest:
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
	if len(scopes) == 1 {
		p.scopes = p.one[:1]
	} else {
		p.scopes = make([]held, 0, len(scopes))
	}
	p.scopes = p.scopes[:0]
	for _, sc := range scopes {
		cost := max(sc.Cost, 1)
		if i := slices.IndexFunc(p.scopes, func(h held) bool { return h.s.key == sc.Key }); i >= 0 {
			p.scopes[i].cost += cost
			continue
		}
		s, err := m.lookup(sc.Key, now)
		if err != nil {
			return err
		}
		p.scopes = append(p.scopes, held{s: s, cost: cost})
	}
	slices.SortFunc(p.scopes, func(a, b held) int {
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

func (m *ThrottlingManager) shardOf(key string) *shard {
	return &m.shards[maphash.String(m.seed, key)%numShards]
}

// lookup returns the scope for key, creating it on first use.
func (m *ThrottlingManager) lookup(key string, now time.Time) (*scope, error) {
	sh := m.shardOf(key)
	sh.mu.RLock()
	s := sh.m[key]
	sh.mu.RUnlock()
	if s != nil {
		return s, nil
	}
	ns, err := m.newScope(key, now)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s = sh.m[key]; s != nil {
		return s, nil
	}
	sh.m[ns.key] = ns
	sh.peak = max(sh.peak, len(sh.m))
	if !now.Before(sh.sweepAt) {
		m.sweep(sh, now)
	}
	if limit := m.cfg.MaxScopes; limit > 0 && len(sh.m) > max(limit/numShards, 1) {
		m.evictLRU(sh, ns, now, len(sh.m)-max(limit/numShards, 1)+len(sh.m)/8)
	}
	return ns, nil
}

// sweepStep gives the next shard in turn a sweep, unless the shard was swept
// less than half a sweep period ago, and sets when the one after it is due.
// While the manager is called at least every sweepPeriod/numShards, each
// shard is swept about once a sweep period, so an idle scope is forgotten
// within about IdleTimeout plus a sweep period. A shard sweeps on its own
// only when a scope is created in it; this forgets the idle scopes of a
// crawl that goes on over hosts it already knows. One caller does each
// step, while the others go on.
func (m *ThrottlingManager) sweepStep(now time.Time) {
	next, t := m.sweepNext.Load(), now.UnixNano()
	if t-next < 0 {
		return
	}
	// The steps keep to their pace when calls come at another one, and
	// don't pile up after a pause.
	period := m.sweepPeriod()
	at := next + int64(period/numShards)
	if t-at > 0 {
		at = t
	}
	if !m.sweepNext.CompareAndSwap(next, at) {
		return
	}
	sh := &m.shards[m.sweepTurn.Add(1)%numShards]
	sh.mu.Lock()
	if !now.Before(sh.sweepAt.Add(-period / 2)) {
		m.sweep(sh, now)
	}
	sh.mu.Unlock()
}

// sweepPeriod is the time between two sweeps of a shard.
func (m *ThrottlingManager) sweepPeriod() time.Duration { return max(m.cfg.IdleTimeout/4, time.Second) }

// evictLRU forgets up to n of sh's idle scopes, least recently used first,
// never keep (the scope being created). Evicting an eighth of the shard at
// a time keeps the sort's cost amortised over many new scopes.
func (m *ThrottlingManager) evictLRU(sh *shard, keep *scope, now time.Time, n int) {
	idle := make([]*scope, 0, len(sh.m))
	for _, s := range sh.m {
		if s == keep || !s.mu.TryLock() {
			continue
		}
		if s.queue.n == 0 && s.counts.inFlight == 0 && s.idle(now) != Busy {
			idle = append(idle, s)
		}
		s.mu.Unlock()
	}
	slices.SortFunc(idle, func(a, b *scope) int { return cmp.Compare(a.lastUsed, b.lastUsed) })
	for _, s := range idle[:min(n, len(idle))] {
		s.mu.Lock()
		if s.queue.n == 0 && s.counts.inFlight == 0 && s.idle(now) != Busy { // still idle
			sh.forget(s)
		}
		s.mu.Unlock()
	}
	sh.shrink()
}

// shrink replaces sh's map by a smaller one once it holds a quarter of its
// peak or less: a Go map keeps its buckets when entries are deleted, so
// without this a shard that once held many scopes would hold their room
// for good. The copy costs at most a third of the deletions since the map
// was made.
func (sh *shard) shrink() {
	if n := len(sh.m); sh.peak >= 64 && n <= sh.peak/4 {
		m := make(map[string]*scope, n)
		maps.Copy(m, sh.m)
		sh.m, sh.peak = m, n
	}
}

// scopeConfig returns the configuration of key and whether it is explicit.
func (m *ThrottlingManager) scopeConfig(key string) (ScopeConfig, bool, error) {
	m.cfgMu.RLock()
	sc, ok := m.cfg.Scopes[key]
	m.cfgMu.RUnlock()
	if ok {
		return sc, true, nil
	}
	if f := m.cfg.ScopeConfigFunc; f != nil {
		def := m.cfg.Default
		def.Backoff.Statuses = slices.Clone(def.Backoff.Statuses)
		if sc, ok := f(key, def); ok {
			if err := sc.validate("ScopeConfigFunc(" + strconv.Quote(key) + ")"); err != nil {
				return ScopeConfig{}, false, err
			}
			return sc, true, nil
		}
	}
	return m.cfg.Default, false, nil
}

func (m *ThrottlingManager) newScope(key string, now time.Time) (*scope, error) {
	cfg, explicit, err := m.scopeConfig(key)
	if err != nil {
		return nil, err
	}
	// The key may be part of a longer string, such as a request's URL:
	// a copy keeps the scope from holding all of it.
	key = strings.Clone(key)
	p := ScopeParams{Key: key, Config: cfg, Explicit: explicit, Logger: m.log, GlobalConcurrency: m.cfg.GlobalConcurrency}
	if m.cfg.JitterSeed != 0 {
		h := fnv.New64a()
		h.Write([]byte(key))
		p.Rand = rand.New(rand.NewPCG(m.cfg.JitterSeed, h.Sum64()))
	}
	f := cfg.NewManager
	if f == nil {
		f = m.factory
	}
	s := &scope{key: key, mgr: f(p), explicit: explicit, lastUsed: now.UnixNano()}
	if _, ok := s.mgr.(*defaultScope); !ok && (cfg.NewManager != nil || m.cfg.NewScopeManager != nil) {
		s.guard = &guarded{ScopeManager: s.mgr}
		m.guarded.Store(true)
	}
	if m.robots != nil {
		if d := m.robots.hostDelay(key); d > 0 {
			m.robots.apply(s, d, &cfg)() // not shared yet: no lock needed
		}
	}
	return s, nil
}

// sweep forgets the idle scopes of sh, so that memory is bounded by the
// scopes in recent use, not by every host ever seen. It runs when a
// scope is created in sh and the shard's sweep time has come, and when
// sweepStep comes to sh, so the work is spread over the crawl and no
// goroutine is needed. A manager no one calls forgets nothing until it is
// called again.
func (m *ThrottlingManager) sweep(sh *shard, now time.Time) {
	sh.sweepAt = now.Add(m.sweepPeriod())
	for _, s := range sh.m {
		if !s.mu.TryLock() {
			continue // in use
		}
		if s.queue.n == 0 && s.counts.inFlight == 0 && m.forgettable(s, now) {
			sh.forget(s)
		}
		s.mu.Unlock()
	}
	sh.shrink()
}

func (m *ThrottlingManager) forgettable(s *scope, now time.Time) bool {
	idle := time.Duration(now.UnixNano() - s.lastUsed)
	if idle < m.cfg.IdleTimeout {
		// Used lately: forgettable under neither timeout. Not asking the
		// policy spares a sweep touching the policies of recent scopes.
		return false
	}
	switch s.idle(now) {
	case IdleEmpty:
		return idle >= m.cfg.IdleTimeout
	case IdleLearned:
		return idle >= m.cfg.LearnedIdleTimeout
	}
	return false
}

// Len returns the number of scopes the manager holds now.
func (m *ThrottlingManager) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
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
		a := hs[i].s.admit(now, hs[i].cost)
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

// start records the start in every scope of p.
func (m *ThrottlingManager) start(p *Permit, now time.Time) {
	for i := range p.scopes {
		h := &p.scopes[i]
		if d, ok := h.s.mgr.(*defaultScope); ok {
			d.start(&h.ticket, now, h.cost) // in place: see defaultScope.start
		} else {
			h.ticket = h.s.start(now, h.cost)
		}
		h.s.lastUsed = now.UnixNano()
		h.s.counts.started()
	}
	p.acquired = now
}

// tryFast admits p at now if no one waits ahead of it and every scope and
// the global cap admit it.
func (m *ThrottlingManager) tryFast(p *Permit, now time.Time) (bool, Admission, int) {
	if err := m.relock(p.scopes, now); err != nil {
		return false, Admission{}, -1
	}
	adm, who := m.evaluate(p.scopes, nil, now, time.Time{})
	if adm.Reason == ReasonNone {
		if m.global.tryFast() {
			m.start(p, now)
			unlockAll(p.scopes)
			m.raiseAfterStart(p)
			return true, adm, -1
		}
		adm = Admission{Reason: ReasonGlobal}
	}
	unlockAll(p.scopes)
	m.raise(p.scopes)
	return false, adm, who
}

// wait queues the caller in each scope of p and waits for its turn.
func (m *ThrottlingManager) wait(ctx context.Context, p *Permit, notBefore time.Time) (*Permit, error) {
	hs := p.scopes
	w := newWaiter(len(hs))
	now := m.clock.Now()
	defer func() {
		if w.timer != nil {
			w.timer.Stop()
		}
	}()
	if err := m.countWaiting(); err != nil {
		return nil, err
	}
	defer m.waiting.Add(-1)

	if err := m.relock(hs, now); err != nil {
		return nil, err
	}
	// The time is read with the scopes locked: a clock read before
	// waiting for the locks may be stale by then (a fake clock that a
	// test moves on meanwhile), and a start would be recorded, and the
	// next wait timed, from a moment already past.
	now = m.clock.Now()
	for i := range hs {
		hs[i].s.queue.push(&w.nodes[i])
	}
	for {
		adm, who := m.evaluate(hs, w, now, notBefore)
		if adm.Reason == ReasonNone {
			if m.global.take(w) {
				m.start(p, now)
				m.dequeue(w, hs)
				unlockAll(hs)
				m.raiseAfterStart(p)
				return p, nil
			}
			adm = Admission{Reason: ReasonGlobal}
		} else {
			m.global.leave(w) // not ready any more: give the global turn on
		}
		if dl, ok := ctx.Deadline(); ok && !adm.At.IsZero() && dl.Before(adm.At) {
			m.dequeue(w, hs)
			err := &WaitError{Scope: scopeKey(hs, who), Reason: adm.Reason, ReadyAt: adm.At, Err: context.DeadlineExceeded}
			unlockAll(hs)
			return nil, err
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

		if adm.At.IsZero() && m.cfg.MaxHold > 0 {
			// Waiting for a release: the oldest permit may be reclaimed
			// first.
			if dl := m.holdDeadline(); !dl.IsZero() {
				adm.At = dl
			}
		}
		var timerC <-chan time.Time
		if !adm.At.IsZero() {
			timerC = m.armUntil(&w.timer, adm.At)
		} else if w.timer != nil {
			w.timer.Stop()
		}
		select {
		case <-ctx.Done():
			lockAll(hs)
			m.global.leave(w)
			m.dequeue(w, hs)
			unlockAll(hs)
			return nil, &WaitError{Scope: scopeKey(hs, who), Reason: adm.Reason, ReadyAt: adm.At, Err: ctx.Err()}
		case <-w.wake:
		case <-timerC:
		}
		if m.cfg.MaxHold > 0 {
			m.reclaim(m.clock.Now())
		}
		lockAll(hs)
		now = m.clock.Now() // with the scopes locked, as above
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

// SetScopeConfig replaces the configuration of the scope key at run time,
// as if it had been in Config.Scopes from the start: the scope becomes
// explicit, its learned state is kept where it still applies, and its
// waiters are re-evaluated at once.
func (m *ThrottlingManager) SetScopeConfig(key string, cfg ScopeConfig) error {
	if key == "" {
		return ErrEmptyScopeKey
	}
	if err := cfg.validate("Scopes[" + strconv.Quote(key) + "]"); err != nil {
		return err
	}
	m.cfgMu.Lock()
	next := maps.Clone(m.cfg.Scopes)
	if next == nil {
		next = make(map[string]ScopeConfig)
	}
	next[key] = cfg
	m.cfg.Scopes = next
	m.cfgMu.Unlock()

	sh := m.shardOf(key)
	sh.mu.RLock()
	s := sh.m[key]
	sh.mu.RUnlock()
	if s == nil {
		return nil
	}
	s.mu.Lock()
	s.setConfig(m.clock.Now(), cfg)
	s.explicit = true
	wakeNeeding(s, s.queue.head)
	s.mu.Unlock()
	if s.guard != nil {
		if pv := s.guard.panicked.Swap(nil); pv != nil {
			panic(pv)
		}
	}
	return nil
}
