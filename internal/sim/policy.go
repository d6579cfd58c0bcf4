package sim

import (
	"context"
	"fmt"
	"github.com/crawlerkit/throttle/throttletest"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"golang.org/x/time/rate"
)

// A Policy decides when one client process may send each request. The
// simulator calls it from its event loop, never concurrently.
type Policy interface {
	// Try asks whether a request for host may start at now. If so it
	// returns a ticket to give to Done; if not, the earliest time worth
	// asking again, zero when only a Done of this policy can change the
	// answer (every slot is taken).
	Try(now time.Time, host string) (tk any, retryAt time.Time, ok bool)
	// Done reports the response to a request Try admitted, at the time it
	// is delivered.
	Done(now time.Time, tk any, r Response)
}

// Env is what a policy factory gets to build one instance.
type Env struct {
	// Clock is the run's virtual clock.
	Clock *throttletest.Clock
	// Seed seeds the instance's randomness; never zero.
	Seed uint64
	// Limit is the scenario's true per-host rate in req/s: the hidden
	// limit, the capacity, or the agreed polite rate. Only reference
	// policies that guess a fixed rate use it.
	Limit float64
	// Store is the store the run's instances share, when the policy has
	// NewStore; nil otherwise.
	Store store.Store
	// Robots, for a policy with Robots set, fetches a host's robots.txt
	// from the server at the current time: the fetch reaches the server
	// (and its limiter) as any request does, and is answered 404 when the
	// limiter accepts it (no robots.txt), its refusal otherwise.
	Robots func(host string) Response
}

// A PolicySpec names a policy and makes its instances.
type PolicySpec struct {
	// Name is the policy's name in tables, JSON and plot legends.
	Name string
	// About says in a few words how it is configured.
	About string
	// New makes the policy of one client process (or of all of them when
	// Shared).
	New func(env Env) Policy
	// Shared makes all the client processes of a scenario use one
	// instance: the shared store of a fleet.
	Shared bool
	// NewStore, when not nil, makes one store per run on the run's clock,
	// which every instance gets in Env.Store: one manager per process
	// sharing their state, as a fleet on Redis.
	NewStore func(clock throttle.Clock) store.Store
	// Ready makes the workers take their requests from a
	// throttle.ReadyQueue on the policy's manager (the request that can
	// start soonest, fed from the frontier when none can start now)
	// instead of taking the next URL in frontier order and waiting for
	// it. Only throttle policies (ThrottlePolicy) have one.
	Ready bool
	// Robots turns a throttle policy's robots.txt handling on: the
	// manager fetches a host's robots.txt (Env.Robots) when the policy
	// first meets the host, before its first request, as Acquire does.
	Robots bool
}

// ThrottlePolicy returns a policy that admits requests with a
// throttle.ThrottlingManager made from cfg: TryAcquire to start, Release
// with the response at delivery. Clock, JitterSeed and Logger are set per
// instance; robots.txt handling is turned off unless the spec's Robots is
// set (then robots.txt is fetched from Env.Robots, see PolicySpec.Robots).
func ThrottlePolicy(name, about string, cfg throttle.Config) PolicySpec {
	spec := PolicySpec{Name: name, About: about}
	spec.New = func(env Env) Policy {
		c := cfg
		c.Clock = env.Clock
		c.Store = env.Store
		c.JitterSeed = env.Seed
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		if os.Getenv("THROTTLE_SIM_DEBUG") == "1" {
			// The policy's adjustments, stamped with the virtual time.
			c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Float64("t", env.Clock.Now().Sub(Epoch).Seconds())
					}
					return a
				}}))
		}
		p := &throttlePolicy{reqs: make(map[string]*http.Request)}
		c.Robots.Enabled = env.Robots != nil
		if c.Robots.Enabled {
			p.robots = env.Robots
			// The fetch goes through the manager's Transport over a
			// RoundTripper that asks the server model at once: admitted,
			// answered and released at the same virtual instant.
			c.Robots.Client = &http.Client{Transport: robotsTransport{p}}
		}
		m, err := throttle.New(c)
		if err != nil {
			panic(fmt.Sprintf("sim: policy %s: %v", name, err))
		}
		p.m, p.tr = m, m.Transport(serverTransport{p})
		return p
	}
	return spec
}

type throttlePolicy struct {
	m      *throttle.ThrottlingManager
	tr     http.RoundTripper          // the manager's Transport over the server model, for robots.txt
	robots func(host string) Response // Env.Robots; nil when robots.txt is off
	reqs   map[string]*http.Request   // one request per host, reused: TryAcquire only reads it
	seen   map[string]bool            // hosts whose robots.txt was fetched
}

// robotsTransport is the robots.txt client's RoundTripper: the manager's
// Transport, made after the Config that names this client.
type robotsTransport struct{ p *throttlePolicy }

func (t robotsTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.p.tr.RoundTrip(req)
}

// serverTransport answers a robots.txt fetch from the server model.
type serverTransport struct{ p *throttlePolicy }

func (t serverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r := t.p.robots(req.URL.Host)
	if r.Status >= 200 && r.Status < 300 {
		r.Status = http.StatusNotFound
	}
	return response(r), nil
}

// request returns the request for host, made once: TryAcquire and
// ReadyQueue only read it.
func (p *throttlePolicy) request(host string) *http.Request {
	req := p.reqs[host]
	if req == nil {
		var err error
		if req, err = http.NewRequest(http.MethodGet, "http://"+host+"/", nil); err != nil {
			panic(err)
		}
		p.reqs[host] = req
	}
	return req
}

// newQueue returns a ReadyQueue on the policy's manager, for one client's
// workers.
func (p *throttlePolicy) newQueue() *throttle.ReadyQueue { return throttle.NewReadyQueue(p.m) }

// queuePolicy is a policy whose workers can take their requests from a
// throttle.ReadyQueue (PolicySpec.Ready); the permits it gives are the
// policy's tickets.
type queuePolicy interface {
	newQueue() *throttle.ReadyQueue
	request(host string) *http.Request
}

func (p *throttlePolicy) Try(_ time.Time, host string) (any, time.Time, bool) {
	req := p.request(host)
	if p.robots != nil && !p.seen[host] {
		if p.seen == nil {
			p.seen = make(map[string]bool)
		}
		p.seen[host] = true
		if _, err := p.m.RobotsFor(context.Background(), req); err != nil {
			panic(fmt.Sprintf("sim: RobotsFor %s: %v", host, err))
		}
	}
	pm, adm, err := p.m.TryAcquire(req)
	if err != nil {
		panic(fmt.Sprintf("sim: TryAcquire %s: %v", host, err))
	}
	if pm != nil {
		return pm, time.Time{}, true
	}
	return nil, adm.At, false
}

func (p *throttlePolicy) Done(_ time.Time, tk any, r Response) {
	tk.(*throttle.Permit).Release(response(r), nil)
}

// response is r as an *http.Response with an empty body.
func response(r Response) *http.Response {
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	resp := &http.Response{StatusCode: r.Status, Header: h, Body: http.NoBody, ContentLength: 0}
	if r.RetryAfter > 0 {
		resp.Header.Set("Retry-After", strconv.Itoa(int(r.RetryAfter/time.Second)))
	}
	return resp
}

// CollyPolicy models colly's LimitRule for each host: at most Parallelism
// requests at once, and after each response the slot is held for Delay
// more before it is reused (RandomDelay none). Colly's rule with
// DomainGlob "*" would share the slots among all hosts; this is the
// per-domain reading, the more favourable one.
func CollyPolicy(parallelism int, delay time.Duration) PolicySpec {
	return PolicySpec{
		Name:  "colly",
		About: fmt.Sprintf("colly LimitRule: Parallelism %d, Delay %v held after each response", parallelism, delay),
		New: func(Env) Policy {
			return &collyPolicy{par: parallelism, delay: delay, hosts: make(map[string]*collyHost)}
		},
	}
}

type collyPolicy struct {
	par   int
	delay time.Duration
	hosts map[string]*collyHost
}

type collyHost struct {
	inFlight int
	holds    []time.Time // when each slot held after a response is given back
}

func (p *collyPolicy) host(h string) *collyHost {
	c := p.hosts[h]
	if c == nil {
		c = &collyHost{}
		p.hosts[h] = c
	}
	return c
}

func (p *collyPolicy) Try(now time.Time, host string) (any, time.Time, bool) {
	c := p.host(host)
	kept := c.holds[:0]
	for _, t := range c.holds {
		if t.After(now) {
			kept = append(kept, t)
		}
	}
	c.holds = kept
	if c.inFlight+len(c.holds) < p.par {
		c.inFlight++
		return host, time.Time{}, true
	}
	if len(c.holds) == 0 {
		return nil, time.Time{}, false
	}
	first := c.holds[0]
	for _, t := range c.holds {
		if t.Before(first) {
			first = t
		}
	}
	return nil, first, false
}

func (p *collyPolicy) Done(now time.Time, tk any, _ Response) {
	c := p.host(tk.(string))
	c.inFlight--
	if p.delay > 0 {
		c.holds = append(c.holds, now.Add(p.delay))
	}
}

// ScrapyPolicy models Scrapy's downloader slot per host with its
// AutoThrottle extension and nothing else: at most Concurrency requests
// at once; one start per delay, randomised 0.5-1.5x
// (RANDOMIZE_DOWNLOAD_DELAY); the delay starts at StartDelay and after
// each response becomes max(latency/TargetConcurrency, (old+that)/2),
// within [0, MaxDelay], and a response other than 200 may raise it, never
// lower it. No backoff, no Retry-After.
func ScrapyPolicy(concurrency int, startDelay, maxDelay time.Duration, target float64) PolicySpec {
	return PolicySpec{
		Name: "scrapy-auto",
		About: fmt.Sprintf("Scrapy AutoThrottle alone: N=%.1f, concurrency %d, start %v, max %v, no backoff",
			target, concurrency, startDelay, maxDelay),
		New: func(env Env) Policy {
			return &scrapyPolicy{conc: concurrency, start: startDelay, max: maxDelay, target: target,
				rng: rand.New(rand.NewPCG(env.Seed, 0x5c4a9)), slots: make(map[string]*scrapySlot)}
		},
	}
}

type scrapyPolicy struct {
	conc       int
	start, max time.Duration
	target     float64
	rng        *rand.Rand
	slots      map[string]*scrapySlot
}

type scrapySlot struct {
	active   int
	delay    time.Duration
	lastSeen time.Time
	factor   float64 // randomisation drawn at the last start
	started  bool
}

func (p *scrapyPolicy) slot(h string) *scrapySlot {
	s := p.slots[h]
	if s == nil {
		s = &scrapySlot{delay: p.start}
		p.slots[h] = s
	}
	return s
}

func (p *scrapyPolicy) Try(now time.Time, host string) (any, time.Time, bool) {
	s := p.slot(host)
	if s.active >= p.conc {
		return nil, time.Time{}, false
	}
	if s.started && s.delay > 0 {
		if next := s.lastSeen.Add(time.Duration(float64(s.delay) * s.factor)); next.After(now) {
			return nil, next, false
		}
	}
	s.active++
	s.started, s.lastSeen = true, now
	s.factor = 0.5 + p.rng.Float64()
	return host, time.Time{}, true
}

func (p *scrapyPolicy) Done(_ time.Time, tk any, r Response) {
	s := p.slot(tk.(string))
	s.active--
	target := time.Duration(float64(r.Latency) / p.target)
	nd := max(target, (s.delay+target)/2)
	nd = min(max(nd, 0), p.max)
	if r.Status != 200 && nd <= s.delay {
		return
	}
	s.delay = nd
}

// RatePolicy models a fixed golang.org/x/time/rate limiter per host at
// factor times the scenario's true limit (a user's guess), burst 1, with
// at most Concurrency requests at once.
func RatePolicy(name string, factor float64, concurrency int) PolicySpec {
	return PolicySpec{
		Name:  name,
		About: fmt.Sprintf("x/time/rate at %gx the true limit, burst 1, concurrency %d", factor, concurrency),
		New: func(env Env) Policy {
			return &ratePolicy{r: factor * env.Limit, conc: concurrency, hosts: make(map[string]*rateHost)}
		},
	}
}

type ratePolicy struct {
	r     float64
	conc  int
	hosts map[string]*rateHost
}

type rateHost struct {
	lim      *rate.Limiter
	inFlight int
}

func (p *ratePolicy) Try(now time.Time, host string) (any, time.Time, bool) {
	h := p.hosts[host]
	if h == nil {
		h = &rateHost{lim: rate.NewLimiter(rate.Limit(p.r), 1)}
		p.hosts[host] = h
	}
	if h.inFlight >= p.conc {
		return nil, time.Time{}, false
	}
	if h.lim.AllowN(now, 1) {
		h.inFlight++
		return h, time.Time{}, true
	}
	tokens := h.lim.TokensAt(now)
	wait := time.Duration(math.Ceil((1 - tokens) / p.r * float64(time.Second)))
	return nil, now.Add(max(wait, time.Microsecond)), false
}

func (p *ratePolicy) Done(_ time.Time, tk any, _ Response) { tk.(*rateHost).inFlight-- }

// StorePolicy is throttle's default configuration with one manager per
// process, all sharing the store newStore makes: the fleet set-up.
func StorePolicy(name, about string, newStore func(throttle.Clock) store.Store) PolicySpec {
	p := ThrottleDefault()
	p.Name, p.About, p.NewStore = name, about, newStore
	return p
}
