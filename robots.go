package throttle

// robots.txt as the manager applies it: RobotsConfig (its defaults and
// validation); the stage every request passes before admission (before:
// ensure, the origin's file fresh or fetched, waiting for the fetch if
// need be, then Enforce); the delay a scope gets as it is made
// (scopeCreated); and Stats.Robots. The fetch itself and the cache's
// upkeep are in robotsfetch.go; the parser is package robots.

import (
	"context"
	"net/http"
	"time"

	"github.com/crawlerkit/throttle/robots"
)

// RobotsConfig configures how the manager fetches robots.txt, applies its
// Crawl-delay and Request-rate, and (with Enforce) its Allow and Disallow
// rules. The zero value has robots.txt handling off; DefaultConfig().Robots
// has it on. A manager reads its RobotsConfig once, at New.
//
// On the first request to an origin (scheme, host and port) through
// Acquire, the Transport or a ReadyQueue, its /robots.txt is fetched once,
// through the throttle itself (it is a request in the host's scope), and
// cached for TTL; concurrent first requests share the one fetch. The fetch is no
// caller's: a caller whose context ends stops waiting for it, with its
// context's error, and the fetch goes on for the others. A valid Crawl-delay
// or Request-rate for the user agent sets the host's scope to Concurrency 1
// and Delay = min(value, MaxDelay); it never lowers a configured delay.
// That delay is a floor: with the default ScopeManager no two starts in
// the scope are closer than it, whatever Jitter draws (jitter only
// lengthens the gap), on every path that admits requests (with a Store,
// from the first page after the robots.txt fetch on). On
// a scope configured explicitly (Config.Scopes or ScopeConfigFunc) the
// configuration wins and one warning names both values, unless the scope
// sets IgnoreRobotsTxt, which silences robots.txt altogether.
//
// The fetch is counted apart from the caller's requests: Stats counts it
// in Counts.Robots only (not in Requests, Responses or Signals), and the
// hooks' events mark it (hooks.Released.Robots, with its URL). In the
// scope it takes a slot while it runs, and the scope learns from its
// answer as from any (a 429 or 503 on it backs the scope off, a
// Retry-After gates it), and it waits its turn like any request. But in
// a scope with the default ScopeManager it is no start for the scope's
// Delay or SlotDelay: the origin's first page starts as soon as
// robots.txt is in, not a Delay later. It does count as a start, so the
// next request waits the scope's delay after the fetch started, when
// robots.txt asks for a delay (a Crawl-delay or Request-rate: the polite
// reading; the scope's delay is then the larger of it and Delay), and
// when its answer was a backoff signal or the scope is backing off (the
// raised delay). With a custom ScopeManager or a Store it is a start like
// any request.
//
// Failures never hold crawling up for long: a request waits at most
// FetchTimeout for its origin's robots.txt. A 4xx answer means no rules
// (cached for TTL), except a 429, which is no answer yet: a 5xx, a 429, a
// network error or a timeout mean no new rules this time (rules fetched
// before are kept) and the fetch is retried after 1 minute, doubling per
// failure up to TTL. More than 5 redirects mean no rules, as RFC 9309
// allows; a redirect to a URL that is not http or https is a failure,
// never sent.
//
// The Allow and Disallow rules are enforced only with Enforce: then
// Acquire and the Transport return a *DisallowedError (errors.Is
// ErrDisallowed) for a URL the rules disallow for UserAgent, before the
// request is sent and without taking a slot, and a ReadyQueue's Pop and
// TryPop return the request with that error instead of a Permit;
// robots.txt itself is never refused. An origin whose robots.txt could not be fetched (a 5xx, a
// network error, a timeout) and has no earlier copy disallows every URL,
// as RFC 9309 2.3.1.4 requires, until a fetch succeeds: its URLs get a
// *DisallowedError with Unreachable set and RetryAt. A 4xx robots.txt
// allows everything. Without Enforce, check the rules yourself with
// RobotsFor.
//
// TryAcquire never fetches robots.txt and never enforces it: call
// RobotsFor and check Allowed before trying a URL. A ReadyQueue, built on
// TryAcquire, fetches and enforces it itself, without blocking: see
// ReadyQueue.
//
// The delay applies to the scope whose key is the request's host, so it
// has an effect with HostScope and scopers that include the host.
//
// The zero RobotsConfig turns robots.txt handling off (Enabled false);
// start from DefaultConfig().Robots to keep it on. A plain value, but copies
// share the Client: don't change it while another goroutine reads it.
type RobotsConfig struct {
	// Enabled turns robots.txt handling on. Default true.
	Enabled bool
	// UserAgent is the product token matched against robots.txt groups,
	// for the delay and, under Enforce, the rules. Empty means the
	// product token of each request's User-Agent header (of the first
	// request of the origin, for the delay); with none, only the "*"
	// group applies. Default "".
	UserAgent string
	// MaxDelay caps the delay robots.txt can ask for. Default 60s.
	MaxDelay time.Duration
	// TTL is how long a fetched robots.txt is used; it must be > 0 when
	// Enabled. Default 24h.
	TTL time.Duration
	// FetchTimeout bounds the wait for one robots.txt fetch; it must be > 0
	// when Enabled. Default 10s.
	FetchTimeout time.Duration
	// Client, when set, fetches every robots.txt, for Acquire callers
	// and Transports alike. Nil means: a request made through a
	// Transport fetches with that Transport, so its base RoundTripper
	// (proxy, TLS settings) is used; an Acquire caller's, with a client
	// over http.DefaultTransport wrapped by the manager's Transport; both
	// follow up to 5 redirects.
	Client *http.Client
	// MaxOrigins bounds the cache: beyond it the entries fetched longest
	// ago are dropped (and fetched again when their origin is met again),
	// at a cost that does not grow with the cache. Origins whose fetch is
	// running are kept until it ends, so a burst of new origins may pass
	// it for as long as their fetches run. Default 100000.
	MaxOrigins int
	// Enforce makes Acquire, the Transport and ReadyQueue refuse, with a
	// *DisallowedError, a URL that its origin's robots.txt disallows for
	// UserAgent, or any URL of an origin whose robots.txt is unreachable
	// (see above). Default (and zero value) false: the rules are only
	// parsed, for RobotsFor. Read once, at New; it holds for every
	// goroutine using the manager.
	Enforce bool
	// MaxBytes bounds the memory the cached rules take (estimated): a
	// link farm serving 500 KiB files of rules would otherwise hold about
	// 2.8 MB per origin. Beyond it the oldest entries are dropped (and
	// fetched again when their host is met again). Default 256 MiB; zero
	// means no bound.
	MaxBytes int64
}

// defaultRobotsConfig returns the robots.txt defaults, DefaultConfig().Robots.
func defaultRobotsConfig() RobotsConfig {
	return RobotsConfig{Enabled: true, MaxDelay: time.Minute, TTL: 24 * time.Hour, FetchTimeout: 10 * time.Second, MaxOrigins: 100000, MaxBytes: 256 << 20}
}

func (c RobotsConfig) validate() error {
	for _, d := range []struct {
		n string
		v time.Duration
	}{{"MaxDelay", c.MaxDelay}, {"TTL", c.TTL}, {"FetchTimeout", c.FetchTimeout}} {
		if err := checkDuration("Robots."+d.n, d.v); err != nil {
			return err
		}
	}
	if c.Enabled && c.TTL == 0 { // robots.txt would be fetched before every request
		return &ConfigError{Field: "Robots.TTL", Reason: "must be > 0 when Robots.Enabled"}
	}
	if c.Enabled && c.FetchTimeout == 0 {
		return &ConfigError{Field: "Robots.FetchTimeout", Reason: "must be > 0 when Robots.Enabled"}
	}
	if c.MaxOrigins < 0 {
		return &ConfigError{Field: "Robots.MaxOrigins", Reason: "must be >= 0"}
	}
	if c.MaxBytes < 0 {
		return &ConfigError{Field: "Robots.MaxBytes", Reason: "must be >= 0"}
	}
	return nil
}

// isRobotsFetch reports whether req is a robots.txt fetch of the
// manager's own (a request of robotsCache.get, or a redirect it follows).
func isRobotsFetch(req *http.Request) bool {
	v, _ := req.Context().Value(robotsFetchKey{}).(bool)
	return v
}

// before does what robots.txt asks of req before it is admitted (Acquire
// and the Transport): it makes sure req's origin has a robots.txt (ensure)
// and, under Enforce, refuses req if that robots.txt disallows it. It
// returns whether req is the manager's own robots.txt fetch (which is
// never refused and fetches nothing), the time (later than now if it
// waited for the fetch), and the error to return: ctx's, as a
// *WaitError, if it ended during the fetch, or a *DisallowedError.
func (c *robotsCache) before(ctx context.Context, req *http.Request, now time.Time) (fetch bool, _ time.Time, _ error) {
	if isRobotsFetch(req) {
		return true, now, nil
	}
	if c.ensure(ctx, req, now) {
		if err := ctx.Err(); err != nil { // it ended while robots.txt was fetched
			return false, now, &WaitError{Reason: ReasonRobots, Err: err}
		}
		now = c.m.clock.Now()
	}
	if c.cfg.Enforce {
		if err := c.enforce(req); err != nil {
			return false, now, err
		}
	}
	return false, now, nil
}

// enforce returns a *DisallowedError if the robots.txt of req's origin,
// as ensure left it, disallows req for the configured user agent (or the
// product token of req's User-Agent), or could not be fetched: RFC 9309
// 2.3.1.4's complete disallow, as RobotsFor answers. A fetch still
// running (a caller that waited FetchTimeout for it) or an entry already
// evicted count as unreachable too: under Enforce no URL goes unchecked.
func (c *robotsCache) enforce(req *http.Request) error {
	key, ok := originOf(req)
	if !ok {
		return nil // not http or https: no robots.txt applies
	}
	agent := c.cfg.UserAgent
	if agent == "" {
		agent = robots.ProductToken(req.UserAgent())
	}
	c.mu.RLock()
	e := c.origins[key]
	var rules *robots.Robots
	var retry time.Time
	unreachable := e == nil || !e.ready
	if !unreachable {
		rules = e.robots
		if e.failures > 0 && rules == nil {
			unreachable, retry = true, e.expires
		}
	}
	c.mu.RUnlock()
	switch {
	case unreachable:
		return &DisallowedError{URL: req.URL, Origin: key.String(), UserAgent: agent, Unreachable: true, RetryAt: retry}
	case rules.Allowed(agent, req.URL.RequestURI()):
		return nil
	}
	return &DisallowedError{URL: req.URL, Origin: key.String(), UserAgent: agent}
}

// robotsStats fills rs with the state of m's robots.txt cache (see
// RobotsStats). It reads every cached origin under the cache's read lock:
// one pass over at most RobotsConfig.MaxOrigins entries.
func (m *ThrottlingManager) robotsStats(rs *RobotsStats) {
	*rs = RobotsStats{}
	c := m.robotsTxt
	if c == nil {
		return
	}
	rs.Enabled, rs.Client, rs.Enforce = true, c.cfg.Client != nil, c.cfg.Enforce
	c.mu.RLock()
	defer c.mu.RUnlock()
	rs.Origins = len(c.origins)
	for _, h := range c.hosts {
		if h.delay > 0 {
			rs.Delays++
		}
	}
	for _, e := range c.origins {
		switch {
		case !e.ready && e.robots == nil && e.failures == 0:
			rs.Fetching++ // a first fetch (a refetch keeps what it had)
		case e.failures > 0:
			rs.Failed++
		case e.robots != nil:
			rs.Rules++
		default:
			rs.NoRules++
		}
	}
}

// fetchesVia reports whether the robots.txt fetch a Transport's request
// starts goes through that Transport: robots.txt handling on (c not nil)
// and no RobotsConfig.Client, which fetches for everyone.
func (c *robotsCache) fetchesVia() bool {
	return c != nil && c.cfg.Client == nil
}

// subscribeRobots subscribes robots.txt to the seam (observers.go): a
// scope made after its host's robots.txt asked for a delay gets it as it
// is made.
func (m *ThrottlingManager) subscribeRobots(o *observers) {
	if c := m.robotsTxt; c != nil {
		o.created = append(o.created, c.scopeCreated)
	}
}

// scopeCreated gives the new scope s, not shared yet, the delay robots.txt
// asked of the host its key names.
func (c *robotsCache) scopeCreated(s *scope, cfg *ScopeConfig) {
	if d := c.hostDelay(s.key); d > 0 {
		c.apply(s, d, cfg)() // not shared yet: no lock needed, and the warning now
	}
}

// origin identifies a robots.txt: scheme, host and port. A struct key, so
// looking it up allocates nothing.
type origin struct {
	https bool
	host  string // as in the URL, with its port if any
}

// originOf returns req's origin; ok=false when robots.txt does not apply
// (not http or https).
func originOf(req *http.Request) (origin, bool) {
	u := req.URL
	if u == nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return origin{}, false
	}
	return origin{https: u.Scheme == "https", host: u.Host}, true
}

// fresh reports whether the origin has a robots.txt fresh at now.
func (c *robotsCache) fresh(key origin, now time.Time) bool {
	c.mu.RLock()
	defer c.mu.RUnlock()
	e := c.origins[key]
	return e != nil && e.ready && now.Before(e.expires)
}

// lockStale returns key's entry at now, with c.mu locked, unless it is
// fresh (fresh true, c.mu not held): nil, an entry whose fetch is in
// progress (not ready) or an expired one.
func (c *robotsCache) lockStale(key origin, now time.Time) (e *robotsEntry, fresh bool) {
	if c.fresh(key, now) { // the common case, under the read lock
		return nil, true
	}
	c.mu.Lock()
	e = c.origins[key]
	if e != nil && e.ready && now.Before(e.expires) {
		c.mu.Unlock()
		return nil, true
	}
	return e, false
}

// ensure makes sure req's origin has a robots.txt that is fresh or being
// fetched, starting the fetch if no one else has, and waits for it as long
// as ctx allows (a caller that did not start it, at most FetchTimeout). The
// fetch is no caller's: it runs on its own goroutine, with ctx's values but
// not its cancellation or deadline, bounded by FetchTimeout, so a caller
// that leaves does not make it fail for the others. A request of a
// Transport fetches through that Transport (see viaTransport). It reports
// whether it waited (so the caller's now is stale, and ctx may have ended:
// the caller checks).
func (c *robotsCache) ensure(ctx context.Context, req *http.Request, now time.Time) (waited bool) {
	key, ok := originOf(req)
	if !ok {
		return false
	}
	e, fresh := c.lockStale(key, now)
	switch {
	case fresh:
		return false
	case e != nil && !e.ready: // someone is fetching: wait a bounded time
		done := e.done
		c.mu.Unlock()
		t := c.m.clock.NewTimer(c.cfg.FetchTimeout)
		defer t.Stop()
		select {
		case <-done:
		case <-ctx.Done():
		case <-t.C():
		}
		return true
	}
	ne := c.newEntryLocked(key, hostOf(req), e)
	c.mu.Unlock()
	run := c.start(ctx, req, key, ne, true)
	select { // the fetch ends by FetchTimeout
	case <-ne.done:
	case <-ctx.Done():
	}
	run.leave()
	return true
}
