package throttle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle/robots"
)

// robotsFailureRetry is the first retry delay after a failed fetch.
const robotsFailureRetry = time.Minute

// maxRobotsRedirects is how many redirects a robots.txt fetch follows.
const maxRobotsRedirects = 5

type robotsFetchKey struct{}

// robotsCache holds the robots.txt of each origin and the delay each host
// scope got from it.
//
// Its bounds: at most MaxOrigins entries once their fetches ended (an
// entry being fetched is never dropped), the oldest dropped first, at a
// cost per drop that does not grow with the cache; their rules within
// MaxBytes; a host's delay only while an origin of the host is cached.
type robotsCache struct {
	m      *ThrottlingManager
	cfg    RobotsConfig
	client *http.Client

	mu      sync.RWMutex
	bytes   int64 // the cached rules' estimated size
	origins map[origin]*robotsEntry
	// oldest and newest end the list of the entries in the order they
	// were filed (a fetch again files a new entry), which eviction reads
	// from the oldest.
	oldest, newest *robotsEntry
	hosts          map[string]*robotsHost // by the host's scope key
	warned         map[string]bool
}

// robotsHost is what the cache holds for a host scope: the delay its
// robots.txt asks for, and how many cached origins have that host.
type robotsHost struct {
	delay   time.Duration
	origins int
}

type robotsEntry struct {
	key        origin
	host       string // the scope key of key's host; "" when it has none
	prev, next *robotsEntry

	done     chan struct{}  // closed when the fetch in progress ends
	notify   []func()       // called when it ends (watch), after done is closed
	ready    bool           // a fetch has ended
	robots   *robots.Robots // nil: no rules
	expires  time.Time
	failures int   // fetches failed since the last success (5xx, network errors)
	size     int64 // the rules' HeapSize, counted in robotsCache.bytes
}

func newRobotsCache(m *ThrottlingManager, cfg RobotsConfig) *robotsCache {
	c := &robotsCache{m: m, cfg: cfg, client: cfg.Client,
		origins: map[origin]*robotsEntry{}, hosts: map[string]*robotsHost{}, warned: map[string]bool{}}
	if c.client == nil {
		c.client = &http.Client{Transport: m.Transport(http.DefaultTransport), CheckRedirect: limitRedirects}
	}
	return c
}

func limitRedirects(req *http.Request, via []*http.Request) error {
	if len(via) > maxRobotsRedirects {
		return errTooManyRedirects
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		// Not for the base RoundTripper, which may serve file: URLs.
		return fmt.Errorf("throttle: robots.txt: redirect to %s URL %s", req.URL.Scheme, req.URL.Redacted())
	}
	return nil
}

var errTooManyRedirects = errors.New("throttle: robots.txt: more than 5 redirects")

func (o origin) String() string {
	if o.https {
		return "https://" + o.host
	}
	return "http://" + o.host
}

// transportOf returns the Transport of c's manager that ctx came through
// (viaTransport), or nil (Acquire, RobotsFor: the fetch uses c.client).
func (c *robotsCache) transportOf(ctx context.Context) *Transport {
	if t, _ := ctx.Value(viaTransportKey{}).(*Transport); t != nil && t.m == c.m {
		return t
	}
	return nil
}

// newEntryLocked files a new entry for key, of the host scope host (""
// if none), whose fetch the caller starts; old is the expired entry it
// replaces, or nil.
func (c *robotsCache) newEntryLocked(key origin, host string, old *robotsEntry) *robotsEntry {
	ne := &robotsEntry{key: key, host: host, done: make(chan struct{})}
	if old == nil {
		c.evictLocked(nil, 1)
		c.fileLocked(ne)
		return ne
	}
	// Expired: keep its rules and failures until the new fetch ends, and
	// their size with them. Filed before old is dropped, so the host
	// keeps its delay meanwhile.
	ne.robots, ne.failures, ne.size = old.robots, old.failures, old.size
	c.fileLocked(ne)
	c.dropLocked(old)
	return ne
}

// hostOf returns the scope key of req's host, "" if it has none.
func hostOf(req *http.Request) string {
	h, err := requestHost(req)
	if err != nil {
		return ""
	}
	return h
}

// robotsWatch is what watch found.
type robotsWatch uint8

const (
	robotsFresh   robotsWatch = iota // nothing to wait for
	robotsPending                    // a fetch runs; notify is called when it ends
	robotsStarted                    // watch started a fetch; notify is called when it ends
	robotsNeeded                     // a fetch is needed, and mayStart was false: nothing done
)

// watch is ensure for a caller that must not block (ReadyQueue): when
// req's origin has no fresh robots.txt, it registers notify, called once
// on the fetch's goroutine when the fetch running (or, with mayStart, the
// one watch starts) ends. The fetch is no caller's, as ensure's: it runs
// with ctx's values, bounded by FetchTimeout, and a panic in it is logged.
func (c *robotsCache) watch(ctx context.Context, req *http.Request, now time.Time, notify func(), mayStart bool) robotsWatch {
	key, ok := originOf(req)
	if !ok || isRobotsFetch(req) {
		return robotsFresh
	}
	e, fresh := c.lockStale(key, now)
	switch {
	case fresh:
		return robotsFresh
	case e != nil && !e.ready:
		e.notify = append(e.notify, notify)
		c.mu.Unlock()
		return robotsPending
	case !mayStart:
		c.mu.Unlock()
		return robotsNeeded
	}
	ne := c.newEntryLocked(key, hostOf(req), e)
	ne.notify = append(ne.notify, notify)
	c.mu.Unlock()
	c.start(ctx, req, key, ne, false)
	return robotsStarted
}

// robotsRun is a fetch in progress as the caller that started it sees it:
// a panic in the fetch (user code: a Scoper, a hook, a base RoundTripper)
// reaches that caller if it still waits, as it would have on the caller's
// own goroutine, and is logged otherwise.
type robotsRun struct {
	state atomic.Int32 // runWaiting, runLeft or runPanicked
	pv    any          // the fetch's panic, set before runPanicked
}

const (
	runWaiting  = iota // the starter waits for the fetch
	runLeft            // the starter has gone
	runPanicked        // the fetch panicked while the starter waited
)

// leave is called by the starter when it stops waiting; it re-panics with
// the fetch's panic, if the fetch panicked meanwhile.
func (r *robotsRun) leave() {
	if !r.state.CompareAndSwap(runWaiting, runLeft) {
		panic(r.pv)
	}
}

// start fetches key's robots.txt for e on a new goroutine. What the fetch
// needs of req is read now: the caller may change req once it has left.
// waiting says the caller waits for the fetch (it calls leave when it
// stops); a caller that does not is gone from the start.
func (c *robotsCache) start(ctx context.Context, req *http.Request, key origin, e *robotsEntry, waiting bool) *robotsRun {
	f := robotsFetch{key: key, e: e, rt: c.transportOf(ctx), ua: req.Header.Get("User-Agent"), agent: c.cfg.UserAgent}
	if f.agent == "" {
		f.agent = robots.ProductToken(req.UserAgent())
	}
	host, err := requestHost(req)
	f.host, f.hasHost = host, err == nil
	// The fetch is a request of the host, not of the caller's context: it
	// gets the Scoper's scopes, not those attached with WithScopes (a
	// robots.txt must not spend an API's credits), and it outlives the
	// caller.
	fctx := withValues(context.WithValue(context.WithoutCancel(ctx), robotsFetchKey{}, true), func(v *ctxValues) { v.scopes, v.hasScopes = nil, false })
	run := &robotsRun{}
	if !waiting {
		run.state.Store(runLeft)
	}
	go func() {
		var recorded, ended bool
		defer func() {
			pv := recover()
			if !ended { // it panicked (or called runtime.Goexit): a failure
				if !recorded {
					c.record(&f, nil, false)
				}
				c.end(e)
			}
			if pv == nil {
				return
			}
			run.pv = pv
			if !run.state.CompareAndSwap(runWaiting, runPanicked) {
				c.m.log.Error("throttle: robots.txt fetch panicked", "origin", key.String(), "panic", pv, "stack", string(debug.Stack()))
			}
		}()
		rules, ok, err := c.get(fctx, &f)
		rules, failures := c.record(&f, rules, ok)
		recorded = true
		if err != nil {
			c.m.log.Debug("throttle: robots.txt fetch failed", "origin", key.String(), "error", err, "failures", failures)
		}
		if f.hasHost {
			d, has := rules.Delay(f.agent)
			if !has {
				d = 0
			}
			// Before the callers waiting for the fetch are let go, so
			// none starts without the delay.
			c.setHostDelay(f.host, min(d, c.cfg.MaxDelay))
		}
		c.end(e)
		ended = true
	}()
	return run
}

// robotsFetch is what one fetch needs; rt is the Transport the request
// came through (viaTransport), or nil.
type robotsFetch struct {
	key     origin
	e       *robotsEntry
	rt      *Transport
	ua      string // the User-Agent header of the request that started it
	agent   string // the product token matched against robots.txt groups
	host    string // the scope key of the origin's host, if hasHost
	hasHost bool
}

// record records the outcome of f and returns the rules to apply (the ones
// fetched, or on a failure those fetched before, if any) and the failures
// since the last success.
func (c *robotsCache) record(f *robotsFetch, rules *robots.Robots, ok bool) (*robots.Robots, int) {
	now := c.m.clock.Now()
	e := f.e
	c.mu.Lock()
	defer c.mu.Unlock()
	if ok {
		e.robots, e.failures = rules, 0
		e.expires = now.Add(c.cfg.TTL)
		c.bytes -= e.size
		e.size = rules.HeapSize()
		c.bytes += e.size
		c.trimLocked(e)
	} else {
		e.failures++
		retry := robotsFailureRetry << min(e.failures-1, 20)
		e.expires = now.Add(min(retry, c.cfg.TTL))
	}
	return e.robots, e.failures
}

// end marks e's fetch as over and lets its waiters go: those blocked on
// done, then those watching.
func (c *robotsCache) end(e *robotsEntry) {
	c.mu.Lock()
	e.ready = true
	close(e.done)
	c.evictLocked(e, 0) // back within MaxOrigins after a burst
	notify := e.notify
	e.notify = nil
	c.mu.Unlock()
	for _, f := range notify {
		f()
	}
}

// get fetches and parses f's robots.txt with ctx. ok=false means a
// failure to retry later (a 5xx, a 429, a network error or a timeout); a
// 4xx or a redirect loop is ok with no rules (nil).
func (c *robotsCache) get(ctx context.Context, f *robotsFetch) (*robots.Robots, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.FetchTimeout)
	defer cancel()
	rq, err := http.NewRequestWithContext(ctx, http.MethodGet, f.key.String()+"/robots.txt", nil)
	if err != nil {
		return nil, true, err // no URL to fetch: no rules
	}
	if f.ua != "" {
		rq.Header.Set("User-Agent", f.ua)
	}
	client := c.client
	if f.rt != nil && c.cfg.Client == nil {
		client = &http.Client{Transport: f.rt, CheckRedirect: limitRedirects}
	}
	resp, err := client.Do(rq)
	if err != nil {
		if errors.Is(err, errTooManyRedirects) {
			return nil, true, nil
		}
		return nil, false, err
	}
	defer resp.Body.Close() // unread bytes past the cap are never read
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r, err := robots.Parse(resp.Body)
		if err != nil {
			return nil, false, err
		}
		return r, true, nil
	case resp.StatusCode == http.StatusTooManyRequests:
		// No answer yet, not "no robots.txt": as a 5xx (Google reads
		// it so), else a site that rate-limits its robots.txt would
		// lose its rules and its delay for TTL.
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		return nil, true, nil // unavailable: no rules
	}
	return nil, false, fmt.Errorf("throttle: robots.txt: status %s", strconv.Itoa(resp.StatusCode))
}

// setHostDelay records the delay robots.txt asks of host and applies it to
// the host's scope if the manager holds one.
func (c *robotsCache) setHostDelay(host string, d time.Duration) {
	c.mu.Lock()
	if h := c.hosts[host]; h != nil { // the fetch's entry counts in it
		h.delay = d
	}
	c.mu.Unlock()
	sh := c.m.shardOf(host)
	sh.mu.RLock()
	s := sh.m[host]
	sh.mu.RUnlock()
	if s == nil {
		return // applied when the scope is created
	}
	cfg, _, err := c.m.scopeConfig(host) // user code: before taking the lock
	if err != nil {
		return
	}
	s.mu.Lock()
	warn := c.apply(s, d, &cfg)
	wakeNeeding(s, s.queue.head)
	s.mu.Unlock()
	warn()
}

// hostDelay returns the robots.txt delay recorded for host.
func (c *robotsCache) hostDelay(host string) time.Duration {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.hostDelayLocked(host)
}

func (c *robotsCache) hostDelayLocked(host string) time.Duration {
	if h := c.hosts[host]; h != nil {
		return h.delay
	}
	return 0
}

// apply gives d to s (locked) unless s is explicit, whose configuration
// is cfg; it returns the warning to log, once per scope, after s is
// unlocked.
func (c *robotsCache) apply(s *scope, d time.Duration, cfg *ScopeConfig) (warn func()) {
	nop := func() {}
	if !s.explicit {
		s.pol.setRobotsDelay(d)
		return nop
	}
	if cfg.IgnoreRobotsTxt || d == 0 {
		return nop
	}
	c.mu.Lock()
	already := c.warned[s.key]
	c.warned[s.key] = true
	c.mu.Unlock()
	if already {
		return nop
	}
	return func() {
		c.m.log.Warn("throttle: robots.txt asks for a delay; the scope's configuration wins",
			"scope", s.key, "robots_delay", d, "configured_delay", cfg.Delay,
			"configured_concurrency", cfg.Concurrency, "hint", "set IgnoreRobotsTxt on the scope to silence this")
	}
}

// fileLocked adds e at the newest end of the cache.
func (c *robotsCache) fileLocked(e *robotsEntry) {
	c.origins[e.key] = e
	e.prev, e.next = c.newest, nil
	if c.newest != nil {
		c.newest.next = e
	} else {
		c.oldest = e
	}
	c.newest = e
	c.bytes += e.size
	if e.host != "" {
		h := c.hosts[e.host]
		if h == nil {
			h = &robotsHost{}
			c.hosts[e.host] = h
		}
		h.origins++
	}
}

// dropLocked removes e from the cache, and its host's delay with the
// host's last cached origin (a scope made after that gets the delay from
// the fetch its first request makes).
func (c *robotsCache) dropLocked(e *robotsEntry) {
	if c.origins[e.key] == e {
		delete(c.origins, e.key)
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		c.oldest = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		c.newest = e.prev
	}
	e.prev, e.next = nil, nil
	c.bytes -= e.size
	if h := c.hosts[e.host]; h != nil {
		if h.origins--; h.origins <= 0 {
			delete(c.hosts, e.host)
		}
	}
}

// trimLocked keeps the cached rules within MaxBytes, dropping the oldest
// ready entries other than keep (the one just fetched, which its caller
// is about to use).
func (c *robotsCache) trimLocked(keep *robotsEntry) {
	for e := c.oldest; e != nil && c.cfg.MaxBytes > 0 && c.bytes > c.cfg.MaxBytes; {
		next := e.next
		if e.ready && e != keep && e.size > 0 {
			c.dropLocked(e)
		}
		e = next
	}
	// What is left over the budget is keep's: one file over it is allowed.
}

// evictLocked keeps the cache within MaxOrigins with room more entries,
// dropping the oldest whose fetch has ended, other than keep. Entries
// being fetched are passed over: each costs a step until its fetch ends.
func (c *robotsCache) evictLocked(keep *robotsEntry, room int) {
	if c.cfg.MaxOrigins == 0 {
		return
	}
	for e := c.oldest; e != nil && len(c.origins)+room > c.cfg.MaxOrigins; {
		next := e.next
		if e.ready && e != keep {
			c.dropLocked(e)
		}
		e = next
	}
}

// RobotsFor returns the robots.txt of req's origin, fetching it first if
// it isn't cached (waiting at most Robots.FetchTimeout), so a crawler can
// check Allowed before it queues a URL, and TryAcquire users can fetch it
// when they first meet a host. A nil *robots.Robots allows everything: no
// robots.txt (4xx). One that could not be fetched (5xx, network error, a
// timeout) and has no earlier copy disallows everything, as RFC 9309
// requires, until a fetch succeeds (retried after a minute, then doubling).
// It returns an error when robots.txt handling is off or req has no URL,
// and one wrapping ctx.Err() when ctx ends before the fetch does (the
// fetch goes on for the other callers). Under RobotsConfig.Enforce,
// Acquire and the Transport refuse what this answer disallows.
func (m *ThrottlingManager) RobotsFor(ctx context.Context, req *http.Request) (*robots.Robots, error) {
	if m.robotsTxt == nil {
		return nil, errors.New("throttle: robots.txt handling is off (Config.Robots.Enabled)")
	}
	if req == nil || req.URL == nil {
		return nil, ErrNoHost
	}
	m.robotsTxt.ensure(ctx, req, m.clock.Now())
	key, ok := originOf(req)
	if !ok {
		return nil, nil
	}
	m.robotsTxt.mu.RLock()
	defer m.robotsTxt.mu.RUnlock()
	e := m.robotsTxt.origins[key]
	if e != nil && e.ready {
		if e.failures > 0 && e.robots == nil {
			// RFC 9309 2.3.1.4: unreachable (a server or network error)
			// means the crawler MUST assume complete disallow; with a
			// copy from an earlier fetch, that copy is used.
			return disallowAll, nil
		}
		return e.robots, nil
	}
	if err := ctx.Err(); err != nil { // it ended before the fetch did
		return nil, fmt.Errorf("throttle: robots.txt of %s: %w", key, err)
	}
	return nil, nil
}

// disallowAll is the answer for an origin whose robots.txt is unreachable.
var disallowAll = robots.ParseBytes([]byte("User-agent: *\nDisallow: /\n"))
