// Package redisstore is a store.Store on Redis: worker processes and
// machines that crawl the same sites share one set of limits, and what one
// worker learns (a 429, a Retry-After, AutoThrottle's delay, a rampup
// level) slows or speeds all of them.
//
//	client := redisstore.NewClient(&redis.Options{Addr: "localhost:6379"})
//	store, err := redisstore.New(client, redisstore.Options{Prefix: "crawl:"})
//	...
//	defer store.Close()
//	cfg := throttle.DefaultConfig()
//	cfg.Store = store
//	m, err := throttle.New(cfg)
//
// # Round trips
//
// An admission attempt is one EVALSHA of admit.lua over all of the
// request's scopes (atomic: all scopes admit it at the same instant, or
// nothing changes); a release is one EVALSHA of release.lua, plus one more
// only when another worker stored learned state for the same scope in
// between (the manager merges and sends again). Scripts are loaded when the
// store is made and after a Redis restart (EVALSHA falls back to EVAL).
// Concurrent callers' scripts travel together: a few sender goroutines per
// store send whatever is queued as one pipeline (pipeline.go), so 50
// goroutines share round trips while each script still runs alone and
// atomically.
//
// # Time
//
// The scripts use Redis's TIME, so workers' clocks may disagree.
// Options.Clock passes the client's clock instead, for tests in fake time.
//
// # Leases
//
// A permit holds a lease on a slot of each scope that expires after
// Options.LeaseTTL unless renewed. The store renews the leases of its
// process's permits every LeaseTTL/3 from one goroutine, so a long
// download keeps its slot, and a worker killed with SIGKILL frees its
// slots within LeaseTTL. Releasing an expired lease is harmless.
//
// # Waiting
//
// release.lua publishes the scope's key on "<prefix>released". The store
// holds one subscription (one goroutine) while managers watch, and wakes
// their waiters on their scopes; the time each refusal names (the next
// start, the earliest lease expiry) is the fallback, so no one polls.
//
// Waiters are served first come, first served across the fleet (see
// store.TurnGrace): each scope's hash holds the turn of the waiter first
// refused among those it holds back; while that turn is live, the scope
// admits no one else, and the admission of that waiter is published
// too, for the waiters it held back. A waiter in a worker that dies holds
// its turn until TurnGrace after the time its last refusal named (at most
// LeaseTTL and TurnGrace, as its leases); one that gives up gives it back.
//
// # Bounds
//
// The scripts read a scope's hash within the bounds each request carries
// (store.Scope.MaxWait and MaxConcurrency), whatever wrote it: another
// worker configured otherwise, an older version, a stranger writing under
// the prefix, or a client whose Options.Clock ran ahead. A lease is held
// LeaseTTL at most from the first admission that finds it; a gate, a
// previous start, a slot's start, a quota window or a turn that would hold
// the scope longer than its bound is cut to it (and written back, so the
// cut holds); a shared delay or concurrency above the bounds counts as
// the bound; a value that is no number reads as absent; a key of another
// type, or a hash with more fields than the scripts ever write, is
// deleted and the scope starts afresh (its live leases with it: up to
// Concurrency extra in flight until their permits end).
//
// # Keys
//
// A scope is one hash, "<prefix>{<tag>}", where tag is the scope key's
// SHA-256 in base64url, truncated to 128 bits: any scope string, of any
// bytes and length, stays inside the prefix, and is its own Redis Cluster
// hash slot. The hash holds the admission state, the learned state and one
// field per lease (its expiry), so a script reads a scope with one HGETALL:
// inside a script each call costs about as much as the command itself.
// Every key expires: an idle scope after Options.IdleTTL, longer while a
// lease, a gate, a delay, a quota window or a turn is pending. Every
// admission sets its hashes' expiry (a stranger may have removed it), as
// does every refusal that writes to a hash.
//
// # Redis Cluster
//
// Different scopes hash to different slots, and a script may only touch one
// slot. With Options.Cluster, a request's scopes are admitted one by one in
// key order; if one refuses, the leases already taken are given back and
// their quota costs refunded, but the delay turn they used stays used. So
// no limit is ever exceeded; a multi-scope request may cost its other
// scopes one delay turn per refusal, and admission is all-or-nothing but
// not at one instant. Without Options.Cluster (a single Redis, or Sentinel)
// every admission is one atomic script.
//
// The client is a *redis.ClusterClient with ContextTimeoutEnabled and a
// short ClusterStateReloadInterval:
//
//	client := redis.NewClusterClient(&redis.ClusterOptions{
//		Addrs:                      addrs, // some or all of the nodes
//		ContextTimeoutEnabled:      true,
//		DialTimeout:                time.Second,
//		ClusterStateReloadInterval: time.Second,
//	})
//	store, err := redisstore.New(client, redisstore.Options{Cluster: true})
//
// A master that dies sends no MOVED: go-redis goes on sending its slots'
// calls to the dead address until its next reload of the slot map, which
// comes every ClusterStateReloadInterval (go-redis's default is a minute).
// Each scope's hash lives on the master of its slot; the release channel,
// "<prefix>released", is subscribed on the master of its own slot.
//
// # Failures
//
// Each call is bounded by Options.Timeout. What the manager then does is
// throttle.Config.StoreFallbackLocal: false, failing closed
// (Acquire returns a *store.Error), or true. Concurrent calls share
// pipelines, and on a cluster a pipeline is answered once every node in it
// has answered: while a master is unreachable, a call to a healthy master
// that shares a pipeline with a call to it may time out too.
//
// A call that timed out may still reach Redis later: a paused Redis runs
// the commands queued meanwhile when it resumes. An admission carries its
// deadline in Redis time (the store keeps an estimate of Redis's clock,
// from TIME at New and from every admission's reply), and admit.lua
// refuses it past that deadline, so no slot is taken for a caller that
// stopped waiting. An admission that Redis ran before the deadline but
// whose caller had left by the reply is given back at once (its leases
// and quota costs) by the store; only a reply lost altogether leaves
// such a lease, and it expires after LeaseTTL. With Options.Clock no
// deadline is sent.
//
// A release that fails leaves its lease to expire: the slot stays taken
// for at most LeaseTTL after the lease's last renewal, never longer.
//
// # Failover
//
// When a master dies its replica takes its place: Redis Cluster's own
// failover, or Sentinel's. What that costs, measured on a cluster of
// three masters with cluster-node-timeout 1s, three workers crawling a
// scope on each master (Concurrency 2, Delay 20ms, Options.Timeout
// 300ms, StoreRetry 1s) while one master is killed with SIGKILL:
//
//   - The dead master's scopes: every call fails, each within
//     Options.Timeout, until its replica is promoted (about
//     cluster-node-timeout plus one to two seconds for the failure to be
//     agreed and the election: 2 to 2.7s measured) and each client has
//     reloaded its slot map (up to ClusterStateReloadInterval more; the
//     call that starts a reload still fails). Their first admission came
//     2.8 to 3.1s after the kill when failing closed, 2.6 to 4.1s with
//     StoreFallbackLocal (which asks again every StoreRetry).
//   - The other scopes: from the moment the cluster agrees the master has
//     failed until the promotion, every node answers CLUSTERDOWN (Redis
//     Cluster's default, cluster-require-full-coverage yes): 0.7 to 1.2s
//     measured. Besides, their calls may time out while the dead master's
//     do, when they share a pipeline (see Failures).
//   - Failing closed, Acquire returns a *store.Error for those
//     calls; a waiter gets it at its next attempt, unless its deadline
//     comes first. No limit is exceeded (measured: none), but for the lost
//     writes and expired leases below.
//   - With StoreFallbackLocal, a manager whose call fails admits from local
//     state, on every scope, for StoreRetry, again after each failed
//     retry: each worker holds the limits alone, so N workers may have up
//     to N·Concurrency in flight per scope, beside the store's permits
//     still running, and start N times as often, from their first failed
//     call until StoreRetry after the store answers again (measured:
//     up to 6 in flight with Concurrency 2, and 1.6 to 2.6 starts per
//     Delay, on every scope).
//   - Permits held through the outage: the store renews leases every
//     LeaseTTL/3, and renewals fail while the scope's master is away. A
//     lease outlives an outage shorter than LeaseTTL/3; after a longer
//     one it may have expired (after one longer than LeaseTTL it has),
//     and its slot be taken by another worker while the permit still
//     runs: up to Concurrency extra in flight per scope, until those
//     permits end. So LeaseTTL should exceed three times the failover:
//     with Redis's default cluster-node-timeout of 15s, a minute or more.
//   - Waiters: no release wakes a waiter, on any scope, while the master
//     of the release channel's slot is away: a waiter for a slot waits
//     for the earliest lease expiry the refusal named, or its deadline.
//     The subscription follows the client to the new master. Every
//     Acquire returns by its context's deadline.
//   - What the replica had received is kept: leases, starts, gates and
//     learned state.
//
// Replication is asynchronous: the writes a master took last, that its
// replica had not received when it died (usually those of its last
// milliseconds), are lost. A lease taken then is gone while its permit
// runs: up to Concurrency extra in flight per scope until those permits
// end (their renewals find nothing, without an error). A start made then
// is forgotten: one early start per scope, once. A gate set then (a
// Retry-After) is gone: starts before it. Learned state stored then goes
// back to the replica's version, and a worker's next release merges onto
// it as after a conflict. A release made then is undone: its slot stays
// taken until the lease expires, LeaseTTL after its last renewal.
//
// # Sentinel
//
// With Sentinel, give New a failover client, without Options.Cluster:
//
//	client := redis.NewFailoverClient(&redis.FailoverOptions{
//		MasterName:            "mymaster",
//		SentinelAddrs:         sentinels,
//		ContextTimeoutEnabled: true,
//		DialTimeout:           time.Second,
//		MaxRetries:            -1,
//	})
//	store, err := redisstore.New(client, redisstore.Options{})
//
// It is a *redis.Client: New refuses it without ContextTimeoutEnabled.
// Every admission is one atomic script. A failover works as a cluster
// master's (see Failover, measured on a cluster), on every scope at once,
// as there is one master: every call fails from the master's death until
// Sentinel has promoted a replica (down-after-milliseconds, default 30s,
// plus the election) and the client has connected to it; StoreFallbackLocal
// admits from local state meanwhile; leases outlive an outage shorter
// than LeaseTTL/3; and the writes the replica had not received are lost,
// with the costs above: up to Concurrency extra in flight per scope until
// the permits whose leases were lost end, one early start per scope, and
// starts before a gate set just before.
package redisstore

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/admit.lua
	admitSrc string
	//go:embed scripts/release.lua
	releaseSrc string
	//go:embed scripts/renew.lua
	renewSrc string

	admitScript   = redis.NewScript(admitSrc)
	releaseScript = redis.NewScript(releaseSrc)
	renewScript   = redis.NewScript(renewSrc)
)

// Options configure a Store. The zero value is usable.
type Options struct {
	// Prefix starts every key and the release channel. Default
	// "throttle:". It must not contain '{' or '}' (the hash tag).
	Prefix string
	// LeaseTTL is how long a slot stays held after its holder stops
	// renewing it (a worker that died). Default 30s. The workers that
	// share a prefix should share it: a store cuts every lease it reads
	// to its own LeaseTTL from then (a stranger's lease "for ever" is
	// held that long), so the leases of a worker whose LeaseTTL is more
	// than three times another's (renewed every LeaseTTL/3) may expire
	// while their permits run.
	LeaseTTL time.Duration
	// IdleTTL is how long an unused scope's state (its learned delay
	// included) is kept after its last admission. Default 1h, as
	// Config.LearnedIdleTimeout.
	IdleTTL time.Duration
	// Timeout bounds each call to Redis. Default 1s.
	Timeout time.Duration
	// Clock, when not nil, is the time the scripts use instead of Redis's
	// TIME: for tests in fake time. Every worker must then share it.
	Clock throttle.Clock
	// Cluster admits a multi-scope request scope by scope (see the
	// package documentation). Set it for Redis Cluster.
	Cluster bool
	// Logger receives warnings. Nil means slog.Default().
	Logger *slog.Logger
}

// Store is a store.Store on Redis. Make it with New; Close it when done.
type Store struct {
	rdb     redis.UniversalClient
	opts    Options
	channel string

	// The scripts' arguments that never change, boxed once.
	leaseTTLArg, idleTTLArg, channelArg any
	// keyCache holds recent scopes' keys (see keyArgs).
	keyCache [keyCacheSize]atomic.Pointer[keyEntry]
	keySeed  maphash.Seed

	mu       sync.Mutex
	leases   map[string]*heldLease // this process's live leases
	watchers map[int]func(string)
	nextID   int
	pubsub   *redis.PubSub
	closed   bool
	stop     chan struct{}
	done     sync.WaitGroup

	queue   chan *call // to the senders (pipeline.go)
	qmu     sync.RWMutex
	qclosed bool

	// offset estimates Redis's clock minus ours, in µs, once clockKnown:
	// admissions carry their deadline in Redis time.
	offset     atomic.Int64
	clockKnown atomic.Bool
}

type heldLease struct {
	keys  []string // scope hashes
	slots []int    // the lease's slot in each (its field: leaseField)
	// The keys and slots of one scope, without more allocations.
	key1  [1]string
	slot1 [1]int
}

// NewClient returns a go-redis client with the settings the store needs:
// context deadlines enforced on every call (ContextTimeoutEnabled), short
// dial and read timeouts and no retries, so a stopped or unreachable
// Redis fails a call within Options.Timeout instead of holding it.
func NewClient(o *redis.Options) *redis.Client {
	c := *o
	c.ContextTimeoutEnabled = true
	if c.DialTimeout == 0 {
		c.DialTimeout = time.Second
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = -1
	}
	c.DisableIdentity = true
	return redis.NewClient(&c)
}

// New returns a Store on rdb. A *redis.Client or *redis.ClusterClient must
// have ContextTimeoutEnabled (NewClient sets it): without it go-redis waits
// for ReadTimeout whatever the context says, and a stopped Redis would hold
// Acquire beyond its context.
func New(rdb redis.UniversalClient, opts Options) (*Store, error) {
	switch c := rdb.(type) {
	case *redis.Client:
		if !c.Options().ContextTimeoutEnabled {
			return nil, errors.New("redisstore: the client needs ContextTimeoutEnabled: true (use redisstore.NewClient)")
		}
	case *redis.ClusterClient:
		if !c.Options().ContextTimeoutEnabled {
			return nil, errors.New("redisstore: the client needs ContextTimeoutEnabled: true")
		}
	}
	if opts.Prefix == "" {
		opts.Prefix = "throttle:"
	}
	if strings.ContainsAny(opts.Prefix, "{}") {
		return nil, fmt.Errorf("redisstore: Options.Prefix %q must not contain '{' or '}'", opts.Prefix)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"LeaseTTL", &opts.LeaseTTL, 30 * time.Second}, {"IdleTTL", &opts.IdleTTL, time.Hour}, {"Timeout", &opts.Timeout, time.Second}} {
		switch {
		case *d.v < 0:
			return nil, fmt.Errorf("redisstore: Options.%s must be >= 0", d.name)
		case *d.v == 0:
			*d.v = d.def
		case *d.v < time.Millisecond:
			return nil, fmt.Errorf("redisstore: Options.%s must be at least 1ms", d.name)
		}
	}
	if opts.IdleTTL < opts.LeaseTTL {
		return nil, errors.New("redisstore: Options.IdleTTL must be >= LeaseTTL")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Store{rdb: rdb, opts: opts, channel: opts.Prefix + "released",
		leaseTTLArg: ms(opts.LeaseTTL), idleTTLArg: ms(opts.IdleTTL), channelArg: opts.Prefix + "released",
		keySeed: maphash.MakeSeed(), leases: make(map[string]*heldLease), watchers: make(map[int]func(string)), stop: make(chan struct{}),
		queue: make(chan *call, 4*maxBatch)}
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	for _, sc := range []*redis.Script{admitScript, releaseScript, renewScript} {
		// Best effort: a Redis that is down now may be up later, and
		// EVALSHA falls back to EVAL.
		_ = sc.Load(ctx, rdb).Err()
	}
	if opts.Clock == nil {
		sent := time.Now()
		if t, err := rdb.Time(ctx).Result(); err == nil {
			s.noteClock(sent, time.Now(), t)
		}
	}
	s.done.Add(1 + senders)
	go s.renewLoop()
	for range senders {
		go s.sender()
	}
	return s, nil
}

// Close stops the store's goroutines (lease renewal, the subscription).
// Leases still held expire after LeaseTTL. It does not close the client.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.qmu.Lock() // no call is queued after this
	s.qclosed = true
	s.qmu.Unlock()
	close(s.stop)
	ps := s.pubsub
	s.pubsub = nil
	s.mu.Unlock()
	var err error
	if ps != nil {
		err = ps.Close()
	}
	s.done.Wait()
	return err
}

// Key returns the Redis key of scope's state.
func (s *Store) Key(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	var a [64]byte // (one allocation, the string, for a prefix up to 38 bytes)
	b := append(append(a[:0], s.opts.Prefix...), '{')
	b = append(base64.RawURLEncoding.AppendEncode(b, sum[:16]), '}')
	return string(b)
}

// keyCacheSize is how many scopes' keys a store remembers: enough for the
// scopes a crawler's workers are on at once; a scope that finds its entry
// taken by another computes its key again.
const keyCacheSize = 1024

// keyEntry is a scope's key and the scope itself, boxed once for the
// scripts' arguments.
type keyEntry struct {
	scope         string
	key, scopeArg any
}

// keyArgs returns scope's key and the scope as a call's arguments: from
// keyCache, a direct-mapped cache, so that a scope in use costs neither a
// SHA-256 nor an allocation a call.
func (s *Store) keyArgs(scope string) *keyEntry {
	slot := &s.keyCache[maphash.String(s.keySeed, scope)%keyCacheSize]
	if e := slot.Load(); e != nil && e.scope == scope {
		return e
	}
	e := &keyEntry{scope: scope, key: s.Key(scope), scopeArg: scope}
	slot.Store(e)
	return e
}

func leaseField(lease string, slot int) string {
	if slot == -1 { // the common case, in one allocation
		return "L:" + lease + "|-1"
	}
	return "L:" + lease + "|" + strconv.Itoa(slot)
}

func (s *Store) nowArg() string {
	if s.opts.Clock == nil {
		return ""
	}
	return strconv.FormatInt(s.opts.Clock.Now().UnixMicro(), 10)
}

// noteClock updates the estimate of Redis's clock from a call sent at
// sent, answered at recv, that read Redis's time redis (taken as read
// halfway).
func (s *Store) noteClock(sent, recv, redis time.Time) {
	mid := sent.Add(recv.Sub(sent) / 2)
	s.offset.Store(redis.UnixMicro() - mid.UnixMicro())
	s.clockKnown.Store(true)
}

// bound is the deadline of a call for caller: Options.Timeout from now,
// or the caller's own deadline when that comes first (callers).
func (s *Store) bound(caller context.Context) (dl time.Time, callers bool) {
	dl = time.Now().Add(s.opts.Timeout)
	if cd, ok := caller.Deadline(); ok && !cd.After(dl) {
		return cd, true
	}
	return dl, false
}

// deadlineArg is admit.lua's deadline_us for a call bounded by dl: dl in
// Redis time, 0 (none) without an estimate of Redis's clock or with
// Options.Clock.
func (s *Store) deadlineArg(dl time.Time) int64 {
	if s.opts.Clock != nil || !s.clockKnown.Load() {
		return 0
	}
	return dl.UnixMicro() + s.offset.Load()
}

// callerLeft reports whether admit.lua refused a call as past its
// deadline, and that deadline was the caller's (callers: not
// Options.Timeout's). The deadline is compared in Redis time, estimated to
// within half a round trip, so Redis can see it pass a little before the
// caller's own clock does; the caller stopped waiting all the same, and
// the store did not fail.
func callerLeft(err error, callers bool) bool {
	return callers && strings.Contains(err.Error(), tooLate)
}

// tooLate is admit.lua's refusal of a call past its deadline.
const tooLate = "too late: the caller stopped waiting"

// jitterArg is a jitter factor as admit.lua takes it; 1 (no jitter) without
// an allocation.
func jitterArg(j float64) any {
	if j == 1 {
		return "1"
	}
	return strconv.FormatFloat(j, 'g', -1, 64)
}

// us and ms are durations as the scripts take them. Numbers go to
// go-redis as numbers: boxing one allocates less than a string, and
// nothing for 0 to 255.
func us(d time.Duration) int64 { return d.Microseconds() }

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// Admit implements store.Store.
func (s *Store) Admit(ctx context.Context, req *store.Request) (store.Answer, error) {
	if len(req.Scopes) == 0 {
		return store.Answer{}, errors.New("redisstore: a request without scopes")
	}
	if !s.opts.Cluster || len(req.Scopes) == 1 {
		return s.admit(ctx, req, req.Scopes, 0)
	}
	return s.admitEach(ctx, req)
}

// graceArg is store.TurnGrace as admit.lua takes it.
var graceArg any = us(store.TurnGrace)

// boolArg is a flag as the scripts take it.
func boolArg(b bool) any {
	if b {
		return "1"
	}
	return "0"
}

// admit runs admit.lua for req on scopes (req's, or some of them); base
// is the index of scopes[0] in the request, for the answer's Scope.
func (s *Store) admit(caller context.Context, req *store.Request, scopes []store.Scope, base int) (store.Answer, error) {
	lease := req.Lease
	dl, callers := s.bound(caller)
	c := newCall(admitLua, len(scopes), true)
	defer free(c)
	c.lease, c.scopes = lease, scopes
	for i := range scopes {
		c.args = append(c.args, s.keyArgs(scopes[i].Key).key)
	}
	var since int64
	if !req.Since.IsZero() {
		since = max(req.Since.UnixMicro(), 0)
	}
	c.args = append(c.args, s.nowArg(), lease, s.leaseTTLArg, s.idleTTLArg, len(scopes), s.deadlineArg(dl),
		s.channelArg, boolArg(req.Waits), since, graceArg)
	for i := range scopes {
		sc := &scopes[i]
		c.args = append(c.args, s.keyArgs(sc.Key).scopeArg, max(sc.Cost, 0), max(sc.Concurrency, 1), us(sc.Delay),
			jitterArg(sc.Jitter), us(sc.SlotDelay), max(sc.Quota, 0), us(sc.Window), sc.Version,
			us(sc.WaitBound()), max(sc.MaxConcurrency, 0))
	}
	if err := s.run(caller, dl, c); err != nil {
		if strings.Contains(err.Error(), tooLate) {
			// Redis's clock disagrees with the estimate (a step of the
			// local clock does that): the next call goes without a
			// deadline and its reply estimates again.
			s.clockKnown.Store(false)
		}
		if callerLeft(err, callers) {
			return store.Answer{}, store.ErrPastDeadline
		}
		return store.Answer{}, fmt.Errorf("redisstore: admit: %w", err)
	}
	res, err := c.cmd.Slice()
	if err != nil {
		return store.Answer{}, fmt.Errorf("redisstore: admit: %w", err)
	}
	if len(res) != 5+4*len(scopes) {
		return store.Answer{}, fmt.Errorf("redisstore: admit: %d values in the reply", len(res))
	}
	ans := store.Answer{
		Admitted: toInt(res[0]) == 1,
		Now:      time.UnixMicro(toInt(res[1])),
		Reason:   reasons[min(max(toInt(res[3]), 0), int64(len(reasons)-1))],
		Scope:    int(toInt(res[4])) - 1,
		Learned:  make([]store.Learned, len(scopes)),
	}
	if s.opts.Clock == nil {
		s.noteClock(c.sent, c.recv, ans.Now)
	}
	if at := toInt(res[2]); at > 0 {
		ans.At = time.UnixMicro(at)
	}
	if ans.Scope >= 0 {
		ans.Scope += base
	}
	if ans.Admitted {
		ans.Tickets = make([]store.Ticket, len(scopes))
	}
	held := &heldLease{}
	if len(scopes) == 1 {
		held.keys, held.slots = held.key1[:0], held.slot1[:0]
	}
	for i := range scopes {
		r := res[5+4*i:]
		if ans.Admitted {
			ans.Tickets[i] = store.Ticket{Slot: int(toInt(r[0])), WindowIndex: toInt(r[1])}
			held.keys = append(held.keys, c.key(i))
			held.slots = append(held.slots, ans.Tickets[i].Slot)
		}
		ans.Learned[i].Version = toInt(r[2])
		if d, _ := r[3].(string); d != "" {
			ans.Learned[i].Data = []byte(d)
		}
	}
	if ans.Admitted {
		s.mu.Lock()
		if old := s.leases[lease]; old != nil { // admitEach: one lease, several groups
			old.keys = append(old.keys, held.keys...)
			old.slots = append(old.slots, held.slots...)
		} else {
			s.leases[lease] = held
		}
		s.mu.Unlock()
	}
	return ans, nil
}

var reasons = []store.Reason{store.ReasonNone, store.ReasonConcurrency, store.ReasonDelay,
	store.ReasonSlotDelay, store.ReasonGate, store.ReasonQuota, store.ReasonQueue}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// admitEach is the Cluster rule: scope by scope in key order; on a
// refusal, the scopes admitted so far get their lease back and their
// quota cost refunded.
func (s *Store) admitEach(ctx context.Context, req *store.Request) (store.Answer, error) {
	order := make([]int, len(req.Scopes))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(req.Scopes[a].Key, req.Scopes[b].Key) })
	all := store.Answer{Admitted: true, Scope: -1,
		Tickets: make([]store.Ticket, len(req.Scopes)), Learned: make([]store.Learned, len(req.Scopes))}
	var taken []int
	for _, i := range order {
		ans, err := s.admit(ctx, req, req.Scopes[i:i+1], i)
		if err != nil || !ans.Admitted {
			s.cancel(req, taken, all.Tickets)
			all.Admitted, all.At, all.Reason, all.Scope, all.Tickets = false, ans.At, ans.Reason, ans.Scope, nil
			if err != nil {
				return store.Answer{}, err
			}
			all.Now = ans.Now
			all.Learned[i] = ans.Learned[0]
			return all, nil
		}
		all.Now = ans.Now
		all.Tickets[i] = ans.Tickets[0]
		all.Learned[i] = ans.Learned[0]
		taken = append(taken, i)
	}
	return all, nil
}

// cancel gives back the leases of a partial admission.
func (s *Store) cancel(req *store.Request, taken []int, tickets []store.Ticket) {
	if len(taken) == 0 {
		return
	}
	rel := store.Release{Lease: req.Lease}
	for _, i := range taken {
		sc := &req.Scopes[i]
		rel.Scopes = append(rel.Scopes, store.ReleaseScope{Key: sc.Key, Ticket: tickets[i],
			QuotaDelta: -sc.Cost, QuotaFloor: -1, QuotaWindow: sc.Window})
	}
	if _, err := s.Release(context.Background(), &rel); err != nil {
		s.opts.Logger.Warn("redisstore: giving back a partial admission failed; its leases expire", "err", err)
	}
}

// Release implements store.Store.
func (s *Store) Release(ctx context.Context, rel *store.Release) (store.ReleaseAnswer, error) {
	if len(rel.Scopes) == 0 {
		return store.ReleaseAnswer{}, nil
	}
	if !s.opts.Cluster || len(rel.Scopes) == 1 {
		return s.release(ctx, rel.Lease, rel.Scopes, 0)
	}
	var all store.ReleaseAnswer
	var errs []error
	for i := range rel.Scopes {
		ans, err := s.release(ctx, rel.Lease, rel.Scopes[i:i+1], i)
		errs = append(errs, err)
		all.Conflicts = append(all.Conflicts, ans.Conflicts...)
	}
	return all, errors.Join(errs...)
}

func (s *Store) release(ctx context.Context, lease string, scopes []store.ReleaseScope, base int) (store.ReleaseAnswer, error) {
	if lease != "" {
		s.mu.Lock()
		delete(s.leases, lease)
		s.mu.Unlock()
	}
	c := s.releaseCall(lease, scopes, true)
	defer free(c)
	dl, _ := s.bound(ctx)
	if err := s.run(ctx, dl, c); err != nil {
		return store.ReleaseAnswer{}, fmt.Errorf("redisstore: release: %w", err)
	}
	res, err := c.cmd.Slice()
	if err != nil {
		return store.ReleaseAnswer{}, fmt.Errorf("redisstore: release: %w", err)
	}
	var ans store.ReleaseAnswer
	for i := 0; i+2 < len(res); i += 3 {
		c := store.Conflict{Scope: int(toInt(res[i])) - 1 + base, Learned: store.Learned{Version: toInt(res[i+1])}}
		if d, _ := res[i+2].(string); d != "" {
			c.Learned.Data = []byte(d)
		}
		ans.Conflicts = append(ans.Conflicts, c)
	}
	return ans, nil
}

// releaseCall is release.lua's call for a lease on scopes (waited: see
// newCall).
func (s *Store) releaseCall(lease string, scopes []store.ReleaseScope, waited bool) *call {
	c := newCall(releaseLua, len(scopes), waited)
	for i := range scopes {
		c.args = append(c.args, s.keyArgs(scopes[i].Key).key)
	}
	c.args = append(c.args, s.nowArg(), lease, s.idleTTLArg, s.channelArg, len(scopes))
	for i := range scopes {
		rs := &scopes[i]
		var gate int64
		if !rs.Gate.IsZero() {
			gate = rs.Gate.UnixMicro()
		}
		learned := "0"
		if rs.Learned {
			learned = "1"
		}
		var data any = "" // (an empty []byte would be boxed)
		if len(rs.Data) > 0 {
			data = rs.Data
		}
		c.args = append(c.args, s.keyArgs(rs.Key).scopeArg, intArg(int64(rs.Ticket.Slot)), rs.Ticket.WindowIndex, gate, rs.QuotaDelta,
			intArg(rs.QuotaFloor), us(rs.QuotaWindow), learned, rs.Version, data, us(rs.Delay), max(rs.Concurrency, 1))
	}
	return c
}

// minusOne is -1 boxed once: a slot of a scope without a slot delay, a
// release without a quota floor (Go boxes 0 to 255 without allocating,
// not -1).
var minusOne any = int64(-1)

func intArg(v int64) any {
	if v == -1 {
		return minusOne
	}
	return v
}

// giveBack is the release of an admission whose caller stopped waiting
// before the reply (cmd) came: its leases, and its quota costs, are given
// back at once instead of expiring after LeaseTTL. Nil when the reply
// refused it.
func (s *Store) giveBack(cmd *redis.Cmd, lease string, scopes []store.Scope) *call {
	res, err := cmd.Slice()
	if err != nil || len(res) != 5+4*len(scopes) || toInt(res[0]) != 1 {
		return nil
	}
	rel := make([]store.ReleaseScope, len(scopes))
	for i := range scopes {
		sc := &scopes[i]
		r := res[5+4*i:]
		rel[i] = store.ReleaseScope{Key: sc.Key, Ticket: store.Ticket{Slot: int(toInt(r[0])), WindowIndex: toInt(r[1])},
			QuotaDelta: -sc.Cost, QuotaFloor: -1, QuotaWindow: sc.Window}
	}
	return s.releaseCall(lease, rel, false)
}

// Watch implements store.Store: one subscription to the release
// channel for the whole store, made by the first watcher (it returns once
// Redis confirmed it, so no release after Watch is missed) and kept until
// Close; go-redis resubscribes after a reconnection.
func (s *Store) Watch(fn func(key string)) (stop func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.nextID
	s.nextID++
	s.watchers[id] = fn
	if s.pubsub == nil && !s.closed {
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
		ps := s.rdb.Subscribe(ctx, s.channel)
		if _, err := ps.Receive(ctx); err != nil {
			// Redis is away: the waiters fall back to the times the
			// refusals named; the subscription connects when Redis is
			// back.
			s.opts.Logger.Debug("redisstore: subscribe", "err", err)
		}
		cancel()
		s.pubsub = ps
		s.done.Add(1)
		go s.dispatch(ps.Channel())
	}
	return func() {
		s.mu.Lock()
		delete(s.watchers, id)
		s.mu.Unlock()
	}
}

// dispatch hands each release to the watchers.
func (s *Store) dispatch(ch <-chan *redis.Message) {
	defer s.done.Done()
	var fns []func(string)
	for msg := range ch {
		s.mu.Lock()
		fns = fns[:0]
		for _, fn := range s.watchers {
			fns = append(fns, fn)
		}
		s.mu.Unlock()
		for _, fn := range fns {
			fn(msg.Payload)
		}
	}
}

// renewLoop renews this process's leases every LeaseTTL/3.
func (s *Store) renewLoop() {
	defer s.done.Done()
	every := s.opts.LeaseTTL / 3
	for {
		var c <-chan time.Time
		var t throttle.Timer
		if s.opts.Clock != nil {
			t = s.opts.Clock.NewTimer(every)
			c = t.C()
		} else {
			rt := time.NewTimer(every)
			c = rt.C
			t = realTimer{rt}
		}
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-c:
		}
		s.Renew(context.Background())
	}
}

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

// Renew extends every lease this process holds by LeaseTTL now. The store
// calls it every LeaseTTL/3; tests in fake time call it directly. It
// returns how many leases were still held in Redis.
func (s *Store) Renew(ctx context.Context) int {
	s.mu.Lock()
	var keys, fields []string
	for lease, l := range s.leases {
		keys = append(keys, l.keys...)
		for _, slot := range l.slots {
			fields = append(fields, leaseField(lease, slot))
		}
	}
	s.mu.Unlock()
	if len(keys) == 0 {
		return 0
	}
	// One pipeline, one key a call: the keys of different scopes may
	// live on different cluster nodes.
	calls := make([]*call, len(keys))
	for i := range keys {
		c := newCall(renewLua, 1, false)
		c.args = append(c.args, keys[i], s.nowArg(), s.leaseTTLArg, fields[i])
		calls[i] = c
	}
	cctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	s.exec(cctx, calls)
	renewed := 0
	for _, c := range calls {
		n, err := c.cmd.Int()
		if err != nil {
			s.opts.Logger.Debug("redisstore: renew", "err", err)
			continue
		}
		renewed += n
	}
	return renewed
}

var _ store.Store = (*Store)(nil)
