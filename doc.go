// Package throttle decides when a web crawler may send each request, per
// host and per any grouping you define, and learns from the responses how
// fast each site can go.
//
// # Use
//
// Wrap your client's transport:
//
//	m, err := throttle.New(throttle.DefaultConfig())
//	client := &http.Client{Transport: m.Transport(http.DefaultTransport)}
//
// or acquire and release around any client by hand:
//
//	p, err := m.Acquire(ctx, req) // blocks until every scope of req admits it
//	resp, err := client.Do(req)
//	p.Release(resp, err)          // feedback: latency, status, headers, error
//
// When the wait would outlast ctx's deadline, Acquire fails at once, as
// x/time/rate's Limiter.Wait does, with a *WaitError whose ReadyAt says
// when the request could start: a worker loop puts the request back for
// then instead of trying again at once, which would fail at once again.
//
// A crawler with many hosts and a bounded worker pool pushes its requests
// into a ReadyQueue, from which each worker pops the request that can
// start soonest, already admitted, so a slow host's backlog holds no one
// up. It is built on TryAcquire, which never blocks and tells when a
// request could start.
//
// # Scopes
//
// Every request is throttled by one or more scopes: string keys such as a
// host, a registrable domain, an API endpoint or "credits". By default the
// scope is the request URL's host without its port (HostScope: a site's
// ports share its limits); HostPortScope keeps each port apart.
// Config.Scoper replaces the default for all requests
// (RegistrableDomainScope, AddScopes, and package scopers'
// DomainHierarchy, IP, PathPrefix ...); WithScopeKeys and WithScopes
// replace it for the requests of one context. A request starts only when all its scopes admit it at the same
// instant, and holds nothing while it waits.
//
// # Rules
//
// Each scope has a ScopeManager, the default one made by
// NewDefaultScopeManager and configured by a ScopeConfig:
//
//   - Concurrency: at most this many permits at once [1].
//   - Delay: between consecutive starts [1s], randomised per start by
//     Jitter [±50 %], drawn uniformly: starts are at least
//     Delay×(1+Jitter.Min) apart (Delay/2 by default: half the delays
//     drawn are shorter than Delay), and a symmetric jitter averages
//     Delay.
//   - SlotDelay: between starts in the same slot [0]. With Concurrency c
//     it caps the scope at c starts per SlotDelay; New warns when that
//     leaves Delay no effect.
//   - Quota per Window [none per 60s]: costs admitted in a window never
//     exceed it; actual costs reported at Release correct the count.
//   - AutoThrottle [off]: Scrapy's latency/N rule.
//   - Backoff [on]: 429, 5xx overload statuses and timeouts raise the
//     delay; Retry-After and the RateLimit headers gate the scope; recovery
//     is a bisection that settles just above what the server tolerates.
//   - Rampup [off]: for paid APIs, steer the scope's start rate to the
//     fastest the server allows, with as many slots as that rate needs at
//     the latency seen. It doubles the rate per round trip until a rate is
//     refused, bisects between the last good and the refused rate, holds
//     2 % under the ceiling it found and probes it again within 10
//     Windows, for at most MaxSignals refusals a Window. It takes the
//     rate-limit signals (429s, and 5xx between successes) and follows a
//     server whose limit is below the configured pace; an outage (four 5xx
//     in a row) goes to backoff's probing. See RampupConfig, and the
//     design at the top of rampup.go.
//
// Config.GlobalConcurrency [16] caps permits across all scopes. Scopes
// that hold nothing are forgotten after Config.IdleTimeout, so a crawl over
// millions of hosts stays bounded in memory.
//
// The rules combine into one effective pace per scope, a Pace: the start
// rate they allow together and the rule that binds it. Stats reports it
// for every scope (ScopeStats.Pace) and the status page (package status)
// shows it, so when a setting seems to do nothing, the binding rule names
// the one that wins.
//
// To follow a crawl as it runs, Config.Hooks (package hooks) calls your
// functions on events, to feed metrics: a permit granted or released, a
// scope's delay changed, a backoff signal, a server-given wait, a
// warning.
//
// # robots.txt
//
// With Config.Robots on (the default), the first request to an origin
// through Acquire, the Transport or a ReadyQueue fetches its robots.txt,
// once, through the throttle, and caches it for a day. A Crawl-delay or
// Request-rate sets the host's scope to one request at a time at that
// delay, a floor that jitter only lengthens. The fetch
// is the manager's, not a page: Stats counts it in Counts.Robots, apart
// from Requests and Responses, and the hooks' events mark it (Robots,
// with its URL). It holds a slot while it runs and the scope learns from
// its answer, but it is no start for the scope's Delay: the origin's
// first page starts as soon as robots.txt is in, unless robots.txt asks
// for a delay (then the first page waits that delay after the fetch), its
// answer was a 429 or 503, the host is backing off, or the scope is under
// rampup, whose pace is the server's limit, which counts the fetch. The Allow and Disallow rules are enforced
// only with RobotsConfig.Enforce: Acquire, the Transport and a ReadyQueue
// then refuse a disallowed URL with a *DisallowedError before sending it, and every URL
// of an origin whose robots.txt is unreachable (a 5xx, a network error),
// as RFC 9309 requires. Otherwise check them with RobotsFor. See
// RobotsConfig.
//
// # Time
//
// Policies never read a clock: every ScopeManager method is given now, so
// policies are tested with plain values. The manager reads time from
// Config.Clock; package throttletest has a fake clock for your tests.
// Waiting costs no goroutine beyond the caller's own and at most one timer.
//
// # Sharing limits across processes
//
// A fleet of worker processes crawling the same sites shares one set of
// limits through a store (Config.Store, a store.Store): the redisstore
// module keeps each scope's admission state (slots as leases, starts,
// quota counts, gates) and learned state in Redis, so a 429 seen by one
// worker slows them all, and AutoThrottle, backoff and rampup learn once
// for the fleet. An admission attempt is one round trip covering all of
// the request's scopes; waiters are woken by release notifications.
// Package store defines what a store implements, and its Memory shares
// state among managers of one process; package storetest is the
// conformance suite a store must pass. When the store fails, Acquire fails
// fast (failing closed, with a *store.Error) or continues on local state
// (StoreFallbackLocal).
//
// # Writing a ScopeManager
//
// Most users never write one: ScopeConfig configures the default policy.
// These names are the kit for those who replace or wrap it
// (Config.NewScopeManager, ScopeConfig.NewManager): ScopeManager and
// ScopeManagerFactory, what a factory is given (ScopeParams), what a
// manager answers and keeps (Admission, Ticket, Idleness, Reason), the
// panic a failing one raises (ScopeManagerPanic), and
// NewDefaultScopeManager to wrap. A custom ScopeManager keeps the
// robots.txt delay and the manager's guard against its panics, and gets
// Stats' counts; it has no Pace, exports nothing and cannot share a Store
// (see ScopeManager). Clock and Timer are the kit for a clock of one's
// own (Config.Clock): package throttletest's fake clock is one.
package throttle
