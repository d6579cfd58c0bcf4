package throttle

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A ReadyQueue holds requests until they can start, for a crawler with
// many hosts and a bounded pool of workers (the frontier of StormCrawler,
// Heritrix or BUbiNG): Push the requests as you discover them; each worker
// Pops one that can start now, with its Permit already acquired, sends it
// and releases the permit. A worker never waits behind a request that
// cannot start, so a slow host's backlog does not hold the other hosts up.
//
// # Order
//
// Pop and TryPop give the request that can start soonest. Among requests
// that can start at once: the higher priority first (Push's argument; 0
// for most), then the one that uses the larger share of what its scope's
// quota window has left (cost / remaining, Scrapy's rule; 0 in scopes
// without a Quota), then the one pushed first.
//
// # How it works
//
// Push resolves a request's scopes as Acquire does (WithScopes on the
// request's context, else Config.Scoper) and files it in the group of
// requests with the same scope set: one group per host with HostScope.
// A group keeps its requests in order (priority, then push order), and
// only its head is ever asked, with TryAcquire. A group is in one of four
// places:
//
//   - ready: the groups whose head may start now or has not been asked
//     yet, in the order above;
//   - waiting: a heap by the time TryAcquire named (Admission.At), when it
//     moves to ready;
//   - parked: refused with no time (every slot taken, or callers blocked
//     in Acquire ahead of it): it moves to ready when a permit of one of
//     its scopes is released, by this queue's workers or by anyone else
//     (behind Acquire callers, also after a second: one that gives up
//     releases nothing);
//   - aside: its head waits for its origin's robots.txt (see below): it
//     moves to ready when the fetch ends.
//
// A pop moves the waiting groups that are due to ready and asks the best
// ready head; a refusal moves that group to waiting or parked and the
// next head is asked, so a refusal costs one TryAcquire and nothing is
// polled. A refusal by the global cap (Config.GlobalConcurrency) leaves
// the group in its place and ends the pop: nothing starts before a
// release. Push and pop cost O(log n) in the number of scope sets, plus a
// TryAcquire per head asked. The times are TryAcquire's answers: a scope
// whose delay is lowered later (AutoThrottle, SetScopeConfig) is asked
// again at the time it named before.
//
// # Waiting
//
// Pop blocks without a goroutine of its own. Callers wait in the order
// they came; the first holds the only timer, set for the soonest ready
// time; Push, a release that unparks a group (or frees the global cap),
// and a first caller leaving wake the (new) first caller, which looks
// again under the queue's lock, so a wakeup is never lost. A release is
// heard through a small hook in the manager's release path, which costs
// an atomic load when nothing waits for one.
//
// With a Config.Store, releases in other processes unpark groups through
// Store.Watch; every attempt is then a round trip, and a queue makes one
// at a time.
//
// # robots.txt
//
// With Config.Robots on, the queue is as polite as Acquire. Before it
// asks a request's scopes, it makes sure the request's origin has a fresh
// robots.txt; if not, the group steps aside while the robots.txt is
// fetched, as Acquire fetches it (Robots.Client, else
// http.DefaultTransport through the manager's Transport), and comes back
// to ready when the fetch ends: the requests of other hosts go on
// meanwhile, Pop hands them out. A fetch some Acquire caller started is
// waited for, not repeated. The fetch is a request of the host's scope,
// so the robots.txt delay (Crawl-delay, Request-rate) holds the origin's
// first request as it holds the next ones.
//
// A fetch runs on a goroutine of its own, one per origin at a time, and
// ends within Robots.FetchTimeout. A queue runs at most
// max(1, Config.GlobalConcurrency/2) of them at once (a fetch holds a
// place in GlobalConcurrency: the bound leaves the other half to the
// requests); origins met beyond that wait, in the order they were met,
// for one to end. So the queue adds at most that many goroutines, however
// many requests and hosts it holds; Pop, Push and TryPop start none.
//
// Under Robots.Enforce a request that its origin's robots.txt disallows,
// or any request of an origin whose robots.txt is unreachable, is never
// admitted: Pop and TryPop return it, removed from the queue, with a nil
// Permit and a *DisallowedError (errors.Is ErrDisallowed) that names its
// URL, and the request itself is the first result, so the caller knows
// which one it was. The queue goes on with the others; the next Pop gives
// the next request.
//
// # Closing
//
// Close ends the queue: it returns the requests still queued, and every
// Push, Pop and TryPop after it (and every Pop blocked in it) returns
// ErrQueueClosed.
//
// A ReadyQueue is safe for concurrent use by multiple goroutines. It is
// tied to its manager, which tells it about releases, for the manager's
// lifetime. The zero value is not usable: call NewReadyQueue.
type ReadyQueue struct {
	m *ThrottlingManager

	// armed tells the release hook to look under mu: groups are parked,
	// the global cap refused, or an attempt is under way (which may be
	// about to park one). Written under mu; read by the hook without it.
	armed atomic.Bool
	// attempting says an attempt holds mu and asks TryAcquire, which may
	// release permits on the same goroutine (MaxHold reclaims them): the
	// hook then leaves the scope key in pending, for the attempt to take
	// when it ends, instead of waiting for mu (see released).
	attempting atomic.Bool
	hasPending atomic.Bool // pending is not empty; set and cleared under pendMu
	pendMu     sync.Mutex
	pending    []string

	mu          sync.Mutex
	single      map[string]*setQueue              // one-scope groups, by scope key
	multi       map[string]*setQueue              // the others, by setKey
	parkedMulti map[string]map[*setQueue]struct{} // parked many-scope groups, by each scope key
	ready       readySet
	waiting     waitingHeap
	nParked     int
	global      bool   // the last attempt was refused by the global cap, and nothing was released since
	n           int    // requests held
	seq         uint64 // push order
	poppers     popperList
	leaderAt    time.Time // the time the first waiting caller's timer is set for; zero: no timer
	closed      bool
	// spare is a zero Permit for the next attempt to fill: one an
	// attempt was refused with, never handed out. permits makes them
	// (a slab's allocation for many pops, as for Acquire's).
	spare   *Permit
	permits permitSlabs

	// robots.txt (robotsTxt nil: handling off): see robotsHeld.
	robotsTxt    *robotsCache
	robotsMax    int                    // fetches the queue may run at once
	robotsOwn    int                    // fetches it started that have not ended
	robotsMine   map[origin]bool        // their origins
	robotsWait   map[origin][]*setQueue // groups whose head waits for its origin's fetch
	robotsQueued []*setQueue            // groups whose head waits for a fetch to start, FIFO
}

// NewReadyQueue returns an empty queue whose requests are admitted by m.
func NewReadyQueue(m *ThrottlingManager) *ReadyQueue {
	q := &ReadyQueue{
		m:           m,
		single:      make(map[string]*setQueue),
		multi:       make(map[string]*setQueue),
		parkedMulti: make(map[string]map[*setQueue]struct{}),
		robotsTxt:   m.robotsTxt,
		robotsMax:   max(1, m.cfg.GlobalConcurrency/2),
		robotsMine:  make(map[origin]bool),
		robotsWait:  make(map[origin][]*setQueue),
	}
	// Before the queue's first attempt: see observers.go.
	m.obs.subscribeReleasedPermit(rankQueues, q.releasedPermit)
	if m.cfg.Store != nil {
		m.cfg.Store.Watch(q.released) // for the queue's lifetime, like the hook
	}
	return q
}

// Push adds req with a priority: among requests that can start at once,
// higher priorities go first. It returns an error, and keeps nothing,
// when req's scopes cannot be resolved (the errors of Acquire: no host, a
// Scoper error ...), and ErrQueueClosed once the queue is closed. The
// queue keeps req itself: don't change it until it is popped.
func (q *ReadyQueue) Push(req *http.Request, priority int) error {
	if req == nil {
		return ErrNilRequest
	}
	now := q.m.clock.Now()
	p, err := q.m.newPermit(req.Context(), req, now, unusedPermits.Get().(*Permit))
	if err != nil {
		return err
	}
	ctx := req.Context()
	e := entry{req: req, prio: priority, noAdjust: p.noAdjust, endless: ctx.Done() == nil}
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		*p = Permit{}
		unusedPermits.Put(p)
		return ErrQueueClosed
	}
	g := q.groupOf(p.scopes())
	if len(g.keys) == 1 {
		e.cost = p.scopes()[0].ticket.Cost
	} else {
		e.costs = make([]int64, len(p.scopes()))
		for i := range p.scopes() {
			e.costs[i] = p.scopes()[i].ticket.Cost
		}
	}
	*p = Permit{} // never handed out: back to TryAcquire's pool
	unusedPermits.Put(p)
	q.seq++
	e.seq = q.seq
	g.entries.push(e)
	q.n++
	switch {
	case g.state == setIdle:
		q.makeReady(g, now)
	case g.state == setReady && g.entries[0].seq == e.seq: // a new head
		q.rank(g, now)
		q.ready.fix(g)
	}
	q.kick()
	q.mu.Unlock()
	return nil
}

// TryPop never blocks. It returns a request that can start now, removed
// from the queue, with its Permit: send it, then Release the permit. When
// no request can start now it returns a nil request and the soonest time
// one could, zero when every request waits for a release (or the queue is
// empty: see Len).
//
// A request that cannot be admitted at all is removed and returned with a
// nil Permit and the error: its context's error once its context has
// ended, a *DisallowedError under Robots.Enforce, or TryAcquire's (a
// Store failure, a Scoper error). Once the queue is closed it returns
// ErrQueueClosed.
func (q *ReadyQueue) TryPop() (*http.Request, *Permit, time.Time, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil, nil, time.Time{}, ErrQueueClosed
	}
	req, p, at, err := q.tryPop(q.m.clock.Now())
	q.kick()
	return req, p, at, err
}

// Pop blocks until a request can start and returns it, removed from the
// queue, with its Permit: send it, then Release the permit. It returns
// ctx's error when ctx ends first (at its deadline, whatever the ready
// times: a Push may bring a request that can start before it), leaving
// the queue as it was. Like TryPop, it returns a request that cannot be
// admitted at all with a nil Permit and the error. It returns
// ErrQueueClosed once the queue is closed, at once if it was blocked.
//
// Callers wait in arrival order; Pop costs no goroutine, and the first
// waiting caller holds the only timer.
func (q *ReadyQueue) Pop(ctx context.Context) (*http.Request, *Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var (
		me    *popper
		timer Timer
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		q.mu.Lock()
		if q.closed {
			if me != nil {
				q.leave(me)
			}
			q.mu.Unlock()
			return nil, nil, ErrQueueClosed
		}
		now := q.m.clock.Now()
		req, p, at, err := q.tryPop(now)
		if req != nil {
			if me != nil {
				q.leave(me)
			}
			q.kick()
			q.mu.Unlock()
			return req, p, err
		}
		if me == nil {
			me = &popper{wake: make(chan struct{}, 1)}
			q.poppers.push(me)
		}
		first := q.poppers.head == me
		if first {
			q.leaderAt = at
		} else {
			q.kick() // this attempt may have moved the soonest time
		}
		q.mu.Unlock()

		var timerC <-chan time.Time
		switch {
		case first && !at.IsZero():
			timerC = q.m.armUntil(&timer, at) // now may be stale: see armUntil
		case timer != nil:
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			q.mu.Lock()
			q.leave(me)
			q.mu.Unlock()
			return nil, nil, ctx.Err()
		case <-me.wake:
		case <-timerC:
			q.m.timerFired(at)
		}
	}
}

// Len returns the number of requests in the queue.
func (q *ReadyQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Close closes the queue and returns the requests it still held, in the
// order they were pushed, or nil when it was closed already: they were
// never admitted and hold nothing, so they may be saved, or pushed into
// another queue. From then on Push, Pop and TryPop return ErrQueueClosed,
// and every Pop blocked in the queue returns it at once. The permits
// popped before are the callers', released as usual.
//
// Close is idempotent and safe to call at any time from any goroutine.
// The queue has no goroutine of its own to stop; the robots.txt fetches
// it started go on (each ends within Robots.FetchTimeout) and are cached
// for the manager. A closed queue still hears of the manager's releases,
// for an atomic load each.
func (q *ReadyQueue) Close() []*http.Request {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	var held []entry
	for _, g := range q.single {
		held = append(held, g.entries...)
	}
	for _, g := range q.multi {
		held = append(held, g.entries...)
	}
	slices.SortFunc(held, func(a, b entry) int { return cmp.Compare(a.seq, b.seq) })
	reqs := make([]*http.Request, len(held))
	for i := range held {
		reqs[i] = held[i].req
	}
	q.single, q.multi, q.parkedMulti = nil, nil, nil
	q.ready, q.waiting = readySet{}, nil
	q.robotsWait, q.robotsQueued = nil, nil
	q.nParked, q.n, q.global = 0, 0, false
	q.armed.Store(false)
	for p := q.poppers.head; p != nil; p = p.next {
		p.signal()
	}
	return reqs
}

// tryPop is TryPop with q.mu held. The releases heard during an attempt
// are taken when it ends; when they unpark a group (or free the global
// cap) and nothing was popped, it tries again.
func (q *ReadyQueue) tryPop(now time.Time) (*http.Request, *Permit, time.Time, error) {
	// A release from now on finds the hook armed, so it sees a group
	// this attempt parks: in pending during the attempt, under mu after.
	// armed is written under mu only: a store that would change nothing
	// is spared (each is a locked instruction).
	if !q.armed.Load() {
		q.armed.Store(true)
	}
	defer func() {
		if armed := q.nParked > 0 || q.global; !armed {
			q.armed.Store(false)
		}
	}()
	for {
		q.attempting.Store(true)
		req, p, at, err := q.attempt(now)
		q.attempting.Store(false) // before taking pending: see released
		if !q.takeReleases("", false) || req != nil {
			return req, p, at, err
		}
		now = q.m.clock.Now()
	}
}

// attempt is one pass of tryPop: it moves the due waiting groups to
// ready and asks the ready heads until one starts or none is left.
func (q *ReadyQueue) attempt(now time.Time) (*http.Request, *Permit, time.Time, error) {
	for len(q.waiting) > 0 && !q.waiting[0].readyAt.After(now) {
		g := q.waiting.remove(0)
		if g.state == setParked {
			q.unpark(g, now) // its fallback time came before a release
		} else {
			q.makeReady(g, now)
		}
	}
	for q.ready.len() > 0 {
		g := q.ready.first()
		req := g.entries[0].req
		if !g.entries[0].endless {
			if err := req.Context().Err(); err != nil {
				q.removeHead(g, now)
				return req, nil, time.Time{}, err
			}
		}
		if q.robotsTxt != nil {
			if q.robotsHeld(g, now) {
				q.ready.remove(g)
				continue
			}
			if q.robotsTxt.cfg.Enforce {
				if err := q.robotsTxt.enforce(req); err != nil {
					q.removeHead(g, now)
					return req, nil, time.Time{}, err
				}
			}
		}
		if q.spare == nil {
			q.spare = q.permits.fresh()
		}
		p, adm, err := q.m.tryAcquire(req, now, g, q.spare)
		if p != nil {
			q.spare = nil // handed out
		}
		switch {
		case err != nil:
			q.removeHead(g, now)
			return req, nil, time.Time{}, err
		case p != nil:
			q.global = false
			q.removeHead(g, now)
			return req, p, time.Time{}, nil
		case adm.Reason == ReasonGlobal:
			// Every scope admits it; only the cap is full. It keeps
			// its place, and nothing else can start either.
			q.global = true
			return nil, nil, time.Time{}, nil
		case adm.At.IsZero():
			q.ready.remove(g)
			var fallback time.Time
			if adm.Reason == ReasonQueue {
				// Callers blocked in Acquire are ahead: their release
				// unparks it, but one that gives up releases nothing.
				fallback = now.Add(queueRecheck)
			}
			q.park(g, fallback)
		default:
			q.ready.remove(g)
			g.readyAt = adm.At
			if !g.readyAt.After(now) {
				g.readyAt = now.Add(time.Millisecond) // "not now" at a time that has come: don't spin
			}
			g.state = setWaiting
			q.waiting.push(g)
		}
	}
	if len(q.waiting) > 0 {
		return nil, nil, q.waiting[0].readyAt, nil
	}
	return nil, nil, time.Time{}, nil
}

// releasedPermit is the queue's subscription to the manager's releases
// (observers.go): p's slots are free.
func (q *ReadyQueue) releasedPermit(p *Permit) {
	for i := range p.scopes() {
		q.released(p.scopes()[i].s.key)
	}
}

// released is the queue's release hook, called for each scope of a
// permit the manager released (releasedPermit) and, with a Store, its
// Watch function: a permit of the scope key was released, so the groups
// parked on it may start, and so may a request the global cap refused.
//
// During an attempt (which holds mu, and may be the caller: a MaxHold
// reclaim in its TryAcquire) it leaves key in pending and returns: the
// attempt clears attempting, then takes pending. If attempting is clear
// when looked at again, the attempt may have taken pending before key was
// in it, so the hook takes it under mu itself.
func (q *ReadyQueue) released(key string) {
	if !q.armed.Load() {
		return
	}
	has := true
	if q.attempting.Load() {
		q.pendMu.Lock()
		q.pending = append(q.pending, key)
		q.hasPending.Store(true)
		q.pendMu.Unlock()
		if q.attempting.Load() {
			return
		}
		has = false // in pending
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.takeReleases(key, has) {
		q.armed.Store(q.nParked > 0)
		q.kick()
	}
}

// takeReleases applies, q.mu held, the releases left in pending and, if
// has, that of key: it unparks the groups parked on their scopes and
// ends a refusal by the global cap. It reports whether either happened.
func (q *ReadyQueue) takeReleases(key string, has bool) (woke bool) {
	var keys []string
	if q.hasPending.Load() { // nearly never: a release during an attempt
		q.pendMu.Lock()
		keys = q.pending
		q.pending = nil
		q.hasPending.Store(false)
		q.pendMu.Unlock()
	}
	if has {
		keys = append(keys, key)
	}
	if len(keys) == 0 {
		return false
	}
	woke = q.global
	q.global = false
	var now time.Time
	unpark := func(g *setQueue) {
		if now.IsZero() {
			now = q.m.clock.Now()
		}
		q.unpark(g, now)
		woke = true
	}
	for _, key := range keys {
		if g := q.single[key]; g != nil && g.state == setParked {
			unpark(g)
		}
		for g := range q.parkedMulti[key] {
			unpark(g)
		}
	}
	return woke
}

// groupOf returns the group of the scope set hs (sorted, as newPermit
// gives it), making it if needed.
func (q *ReadyQueue) groupOf(hs []held) *setQueue {
	if len(hs) == 1 {
		g := q.single[hs[0].s.key]
		if g == nil {
			g = &setQueue{idx: -1}
			g.keys, g.scopes = g.oneKey[:], g.oneScope[:]
			g.keys[0], g.scopes[0] = hs[0].s.key, hs[0].s
			q.single[g.keys[0]] = g
		}
		return g
	}
	k := setKey(hs)
	g := q.multi[k]
	if g == nil {
		g = &setQueue{idx: -1, set: k, keys: make([]string, len(hs)), scopes: make([]*scope, len(hs))}
		for i := range hs {
			g.keys[i], g.scopes[i] = hs[i].s.key, hs[i].s
		}
		q.multi[k] = g
	}
	return g
}

// setKey names a set of several scopes, sorted: each key with its length,
// so no two sets share a name.
func setKey(hs []held) string {
	var b strings.Builder
	for i := range hs {
		k := hs[i].s.key
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

// removeHead takes g's head out of the queue; g is at the top of ready.
func (q *ReadyQueue) removeHead(g *setQueue, now time.Time) {
	g.entries.pop()
	g.robotsHas = false // the next head checks its origin's robots.txt again
	q.n--
	if len(g.entries) > 0 {
		q.rank(g, now)
		q.ready.fix(g)
		return
	}
	q.ready.remove(g)
	g.state = setIdle
	if len(g.keys) == 1 {
		delete(q.single, g.keys[0])
	} else {
		delete(q.multi, g.set)
	}
}

// makeReady puts g in ready.
func (q *ReadyQueue) makeReady(g *setQueue, now time.Time) {
	g.state = setReady
	q.rank(g, now)
	q.ready.push(g)
}

// rank records the order of g's head among ready groups.
func (q *ReadyQueue) rank(g *setQueue, now time.Time) {
	e := &g.entries[0]
	g.prio, g.headSeq = e.prio, e.seq
	g.share = q.quotaShare(g, e, now)
}

// quotaShare is the largest share of what its scopes' quota windows have
// left that e would use: cost / remaining; 0 without quotas or when a
// quota is spent (e waits for the next window anyway).
func (q *ReadyQueue) quotaShare(g *setQueue, e *entry, now time.Time) float64 {
	var share float64
	for i := range g.scopes {
		s := g.scopes[i]
		if s.dead { // forgotten for idleness: its successor holds the state
			ns, err := q.m.lookup(g.keys[i], now)
			if err != nil {
				continue
			}
			s, g.scopes[i] = ns, ns
		}
		s.mu.Lock()
		left, has := s.pol.quotaLeft(now)
		s.mu.Unlock()
		if has && left > 0 {
			share = max(share, float64(e.costOf(i))/float64(left))
		}
	}
	return share
}

// queueRecheck is how long a group refused because callers blocked in
// Acquire are ahead of it stays parked without a release.
const queueRecheck = time.Second

// park keeps g until a permit of one of its scopes is released, or until
// fallback if it is not zero (g then also sits in waiting).
func (q *ReadyQueue) park(g *setQueue, fallback time.Time) {
	g.state = setParked
	q.nParked++
	if !fallback.IsZero() {
		g.readyAt = fallback
		q.waiting.push(g)
	}
	if len(g.keys) == 1 {
		return // found by its key in single
	}
	for _, k := range g.keys {
		set := q.parkedMulti[k]
		if set == nil {
			set = make(map[*setQueue]struct{})
			q.parkedMulti[k] = set
		}
		set[g] = struct{}{}
	}
}

// unpark moves a parked group to ready.
func (q *ReadyQueue) unpark(g *setQueue, now time.Time) {
	q.nParked--
	if g.idx >= 0 {
		q.waiting.remove(g.idx) // its fallback
	}
	if len(g.keys) > 1 {
		for _, k := range g.keys {
			if set := q.parkedMulti[k]; set != nil {
				delete(set, g)
				if len(set) == 0 {
					delete(q.parkedMulti, k)
				}
			}
		}
	}
	q.makeReady(g, now)
}

// robotsHeld reports whether g's head must wait for its origin's
// robots.txt (g is at the top of ready; the caller takes it out), and then
// files g where the fetch's end finds it: in robotsWait under the origin,
// when a fetch runs (the queue's own, started now, or anyone's), or in
// robotsQueued when the queue runs robotsMax fetches already. The head
// waits for one fetch: once that ended (robotsFetched) it goes on, fresh
// rules or not (a failed fetch, an entry evicted since: Enforce then
// refuses it as unreachable), so no request is held by a fetch twice.
func (q *ReadyQueue) robotsHeld(g *setQueue, now time.Time) bool {
	req := g.entries[0].req
	key, ok := originOf(req)
	if !ok || g.robotsHas && g.robotsOK == key {
		return false
	}
	if w, waiting := q.robotsWait[key]; waiting { // subscribed already
		q.robotsWait[key] = append(w, g)
		g.state = setRobots
		return true
	}
	switch q.robotsTxt.watch(req.Context(), req, now, func() { q.robotsFetched(key) }, q.robotsOwn < q.robotsMax) {
	case robotsFresh:
		return false
	case robotsStarted:
		q.robotsOwn++
		q.robotsMine[key] = true
		q.robotsWait[key] = append(q.robotsWait[key], g)
	case robotsPending:
		q.robotsWait[key] = append(q.robotsWait[key], g)
	default: // robotsNeeded
		q.robotsQueued = append(q.robotsQueued, g)
	}
	g.state = setRobots
	return true
}

// robotsFetched is called on the fetch's goroutine when the robots.txt
// fetch of key that the queue waits for ends: the groups waiting for it
// are ready, and, if the fetch was the queue's, the next queued origins'
// fetches may start.
func (q *ReadyQueue) robotsFetched(key origin) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.robotsMine[key] {
		delete(q.robotsMine, key)
		q.robotsOwn--
	}
	if q.closed {
		return
	}
	now := q.m.clock.Now()
	for _, g := range q.robotsWait[key] {
		g.robotsOK, g.robotsHas = key, true
		q.makeReady(g, now)
	}
	delete(q.robotsWait, key)
	for len(q.robotsQueued) > 0 && q.robotsOwn < q.robotsMax {
		g := q.robotsQueued[0]
		q.robotsQueued[0] = nil
		q.robotsQueued = q.robotsQueued[1:]
		if !q.robotsHeld(g, now) {
			q.makeReady(g, now)
		}
	}
	q.kick()
}

// kick wakes the first waiting caller if it has something to do: a ready
// group to ask (unless the global cap holds everything), or a ready time
// sooner than its timer's.
func (q *ReadyQueue) kick() {
	first := q.poppers.head
	if first == nil {
		return
	}
	if q.global {
		return // a release will wake it
	}
	if q.ready.len() > 0 ||
		len(q.waiting) > 0 && (q.leaderAt.IsZero() || q.waiting[0].readyAt.Before(q.leaderAt)) {
		first.signal()
	}
}

// leave takes a waiting caller out of line; the next one, if it is now
// first, is woken to take over the timer and the next request.
func (q *ReadyQueue) leave(p *popper) {
	if q.poppers.head == p {
		q.leaderAt = time.Time{}
		q.poppers.remove(p)
		if q.poppers.head != nil {
			q.poppers.head.signal()
		}
		return
	}
	q.poppers.remove(p)
}
