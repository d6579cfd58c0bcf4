// This file holds the scope registry: the sharded table of scopes, their
// lookup and creation (scopeConfig, newScope), and forgetting idle scopes
// (sweep). Eviction under MaxScopes is in evicted.go.

package throttle

import (
	"hash/fnv"
	"hash/maphash"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle/internal/scopekey"
)

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
	// ev is the eviction order and the evicted scopes' records, once
	// the shard has held more than its share of MaxScopes (evicted.go).
	ev *eviction
	// last is the scope lookup found last in m, tried before m, without
	// mu: a crawl often asks for one host many times in a row. It is
	// stored with mu read-locked, only while the scope is in m, and
	// cleared when the scope leaves m, with mu locked: it is always in m,
	// or was until find read it (see find).
	last atomic.Pointer[scope]
	// permits holds the Permits freshPermit hands out next (permit.go).
	permits permitSlabs
	_       [128 - 96]byte // one shard per pair of cache lines: no false sharing
}

// forget removes s from sh (locked, as s), keeping its counts.
func (sh *shard) forget(s *scope) {
	s.dead = true
	if sh.last.Load() == s {
		sh.last.Store(nil)
	}
	delete(sh.m, s.key)
	if sh.forgotten == nil {
		sh.forgotten = new(Counts)
	}
	c := s.countsNow()
	sh.forgotten.add(&c)
}

// scope is one scope's entry: its policy, its FIFO of waiters, its lock.
type scope struct {
	mu       sync.Mutex
	m        *ThrottlingManager // the scope's: its permits' (Permit.manager)
	key      string
	pol      policy // the scope's rules, behind the coordinator's interface (policy.go)
	queue    waitQueue
	lastUsed int64 // Unix ns: 8 bytes, where a time.Time takes 24 (a scope a host)
	explicit bool
	dead     bool // forgotten for idleness; look it up again
	// plain says the key is a normalised host name (scopekey.Plain): a
	// URL whose host is the key has this scope by default (hostScope).
	plain bool
	// signal says the policy took the last answer for a backoff signal
	// (the series chart reads it after the release).
	signal bool
	// robotsFetches counts the manager's robots.txt fetches started in the
	// scope, apart from counts (in the bools' word: the scope stays 144
	// bytes, its allocation class).
	robotsFetches uint32
	counts        scopeCounts
}

// scopeCounts are a scope's counters, kept by the manager under the
// scope's lock, so every ScopeManager has them.
type scopeCounts struct {
	inFlight  int32
	peak      int32  // most permits held at once
	requests  uint32 // robots.txt fetches excluded (scope.robotsFetches), as in responses and signals
	signals   uint32
	responses [6]uint32
	latency   time.Duration // the last one
	refusing  int64         // Unix ns of the first signal since the last other answer; 0: none
}

// started counts a start of s; robots: a robots.txt fetch of the
// manager's, counted in s.robotsFetches instead of the requests.
func (s *scope) started(robots bool) {
	c := &s.counts
	c.inFlight++
	c.peak = max(c.peak, c.inFlight)
	if robots {
		s.robotsFetches++
	} else {
		c.requests++
	}
}

// finished counts the end of a request; a robots.txt fetch's (robots)
// answer is not counted in responses or signals, but it is the server's
// latency and tells whether the server still refuses (MaxRefusal).
func (c *scopeCounts) finished(now time.Time, fb *Feedback, signal, robots bool) {
	if c.inFlight > 0 {
		c.inFlight--
	}
	if !robots {
		class := 0
		if fb.Status >= 100 && fb.Status < 600 && fb.Err == nil {
			class = fb.Status / 100
		}
		c.responses[class]++
	}
	if fb.Latency > 0 {
		c.latency = fb.Latency
	}
	switch {
	case signal:
		if !robots {
			c.signals++
		}
		if c.refusing == 0 {
			c.refusing = now.UnixNano()
		}
	case fb.Err == nil || fb.Status != 0:
		c.refusing = 0 // the server answered something else
	}
}

func (m *ThrottlingManager) shardOf(key string) *shard {
	sh, _ := m.hashShard(key)
	return sh
}

// hashShard returns the shard of key, and key's hash.
func (m *ThrottlingManager) hashShard(key string) (*shard, uint64) {
	h := maphash.String(m.seed, key)
	return &m.shards[m.shardIndex(h)], h
}

// shardCount is how many shards hold scopes: all of them, or one per
// scope of a MaxScopes below numShards, so that every shard's share of the
// cap is at least one scope.
func (m *ThrottlingManager) shardCount() uint64 {
	if l := m.cfg.MaxScopes; l > 0 && l < numShards {
		return uint64(l)
	}
	return numShards
}

// shardIndex returns the shard of the keys of hash h.
func (m *ThrottlingManager) shardIndex(h uint64) uint64 {
	if l := m.cfg.MaxScopes; l > 0 && l < numShards {
		return h % uint64(l)
	}
	return h % numShards // a mask, not a division: lookup's hot path
}

// lookup returns the scope for key, creating it on first use. A scope
// created past the shard's share of MaxScopes evicts another (evict), and
// a key evicted with a wait pending is held until that wait ends
// (restore).
func (m *ThrottlingManager) lookup(key string, now time.Time) (*scope, error) {
	s, _, err := m.lookupShard(key, now)
	return s, err
}

// lookupShard is lookup, which also returns the scope's shard.
func (m *ThrottlingManager) lookupShard(key string, now time.Time) (*scope, *shard, error) {
	sh, h := m.hashShard(key)
	if s := sh.find(key); s != nil {
		return s, sh, nil
	}
	s, err := m.create(sh, h, key, now)
	return s, sh, err
}

// hostScope is lookup(requestHost(req)), which also returns the scope's
// shard. When the scope of the URL's host as it is exists with a plain key
// (scope.plain), that host is its own scope key, and requestHost's check
// of it is spared.
func (m *ThrottlingManager) hostScope(req *http.Request, now time.Time) (*scope, *shard, error) {
	if req.URL != nil {
		host := req.URL.Host
		sh, h := m.hashShard(host)
		s := sh.find(host)
		switch {
		case s != nil && s.plain:
			return s, sh, nil
		case s == nil && scopekey.Plain(host): // requestHost returns host: hashed already
			s, err := m.create(sh, h, host, now)
			return s, sh, err
		}
	}
	key, err := requestHost(req)
	if err != nil {
		return nil, nil, err
	}
	return m.lookupShard(key, now)
}

// find returns the scope of key in sh, nil when there is none. The scope
// may be forgotten as soon as it is found, locked or not: its users look
// it up again when they find it dead (tryFastOne, relock). So sh.last is
// tried without the lock, which it needs only to be stored.
func (sh *shard) find(key string) *scope {
	if s := sh.last.Load(); s != nil && s.key == key {
		return s
	}
	sh.mu.RLock()
	s := sh.m[key]
	if s != nil {
		sh.last.Store(s)
	}
	sh.mu.RUnlock()
	return s
}

// create is lookup for key, of the shard sh and hash h, which find did
// not find in sh: it makes the scope, unless another caller did first.
func (m *ThrottlingManager) create(sh *shard, h uint64, key string, now time.Time) (*scope, error) {
	ns, err := m.newScope(key, now)
	if err != nil {
		return nil, err
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if s := sh.m[key]; s != nil {
		return s, nil
	}
	sh.m[ns.key] = ns
	sh.peak = max(sh.peak, len(sh.m))
	if ev := sh.ev; ev != nil {
		ev.ring.push(clockEntry{s: ns, used: ns.lastUsed})
		m.restore(ev, ns, h, now)
	}
	if !now.Before(sh.sweepAt) {
		m.sweep(sh, now)
	}
	if m.cfg.MaxScopes > 0 {
		if limit := m.shardCap(h); len(sh.m) > limit {
			m.evict(sh, ns, now, limit)
		}
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
	if !ok && len(m.patterns) > 0 {
		var p string
		if p, ok = matchScopePattern(m.patterns, key); ok {
			sc = m.cfg.Scopes[p]
		}
	}
	m.cfgMu.RUnlock()
	if ok {
		return sc, true, nil
	}
	if f := m.cfg.ScopeConfigFunc; f != nil {
		def := m.cfg.Default
		def.Backoff.Statuses = slices.Clone(def.Backoff.Statuses)
		if sc, ok := f(key, def); ok {
			field := "ScopeConfigFunc(" + strconv.Quote(key) + ")"
			if err := sc.validate(field); err != nil {
				return ScopeConfig{}, false, err
			}
			if err := m.storeTakes(&sc, field); err != nil {
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
	pol, guarded := policyOf(f(p), key)
	s := &scope{m: m, key: key, pol: pol, explicit: explicit, plain: scopekey.Plain(key), lastUsed: now.UnixNano()}
	if guarded {
		m.guarded.Store(true) // panics kept by custom are raised (custompolicy.go)
	}
	m.created(s, &cfg) // observers.go: robots.txt's delay for the host
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
	if sh.ev != nil {
		sh.ev.ring.compact()
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
	switch s.pol.idleness(now) {
	case IdleEmpty:
		return idle >= m.cfg.IdleTimeout
	case IdleLearned:
		return idle >= m.cfg.LearnedIdleTimeout
	}
	return false
}

// NumScopes returns the number of scopes the manager holds now.
func (m *ThrottlingManager) NumScopes() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.RLock()
		n += len(sh.m)
		sh.mu.RUnlock()
	}
	return n
}
