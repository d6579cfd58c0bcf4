package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
)

// A Scenario is a server model, a client setup and the policies to run
// against them.
type Scenario struct {
	// Name identifies the scenario (-scenario NAME); About describes it.
	Name, About string
	// Duration is the virtual length of a run.
	Duration time.Duration
	// Clients is the number of crawler processes (a fleet), each with its
	// own frontier and, unless a policy is Shared, its own policy
	// instance; Workers is the number of workers of each.
	Clients, Workers int
	// Frontier makes one client's frontier: a function that returns the
	// host of each next URL.
	Frontier func(rng *rand.Rand) func() string
	// NewServer makes a fresh server model for one run starting at start.
	NewServer func(start time.Time, rng *rand.Rand) Server
	// Limit is the true per-host rate in req/s, from which reference
	// policies guess.
	Limit float64
	// Capacity is what the server can take in req/s, the denominator of
	// OKPerCapacity; 0 when it does not apply.
	Capacity float64
	// MeasureFrom and MeasureTo bound the measurement window from the
	// start; MeasureTo 0 means the end of the run.
	MeasureFrom, MeasureTo time.Duration
	// SignalsFrom, when not zero, starts the window of SignalsPerMin
	// there instead of at MeasureFrom (it ends at MeasureTo too).
	SignalsFrom time.Duration
	// StormFrom and StormTo bound the error storm from the start, if any.
	StormFrom, StormTo time.Duration
	// RetryAfter says the server sends Retry-After, so the gate figures
	// apply.
	RetryAfter bool
	// Policies are the policies to compare.
	Policies []PolicySpec
}

// Names of the single hosts of the single-host scenarios.
const (
	apiHost  = "api.example"
	siteHost = "site.example"
	slowHost = "slow.example"
)

func oneHost(h string) func(*rand.Rand) func() string {
	return func(*rand.Rand) func() string { return func() string { return h } }
}

// ThrottleDefault is the throttle with DefaultConfig: per host one request
// at a time, 1 s ±50 % apart, backoff on.
func ThrottleDefault() PolicySpec {
	return ThrottlePolicy("throttle", "throttle DefaultConfig: per host Concurrency 1, Delay 1s ±50 %, SlotDelay 1s, backoff on",
		throttle.DefaultConfig())
}

// ThrottleAuto is the throttle with AutoThrottle on at target concurrency
// n: Concurrency 8, Delay 0, SlotDelay 0, backoff on.
func ThrottleAuto(n float64) PolicySpec {
	cfg := throttle.DefaultConfig()
	cfg.Default.Concurrency = 8
	cfg.Default.Delay = 0
	cfg.Default.SlotDelay = 0
	cfg.Default.AutoThrottle.Enabled = true
	cfg.Default.AutoThrottle.TargetConcurrency = n
	name := "throttle+auto"
	if n != 1 {
		name = fmt.Sprintf("throttle+auto%g", n)
	}
	return ThrottlePolicy(name, fmt.Sprintf("throttle AutoThrottle on (TargetConcurrency %g), Concurrency 8, Delay 0, SlotDelay 0, backoff on", n), cfg)
}

// ThrottleRampup is the throttle with DefaultConfig and rampup on.
func ThrottleRampup() PolicySpec {
	cfg := throttle.DefaultConfig()
	cfg.Default.Rampup.Enabled = true
	return ThrottlePolicy("throttle+rampup", "throttle DefaultConfig with Rampup on (1 signal/window of 60s, up to GlobalConcurrency 16)", cfg)
}

// References returns the reference policies: colly's LimitRule
// (Parallelism 2, Delay 1s), Scrapy's AutoThrottle alone, and a fixed
// x/time/rate limiter at half and at double the true limit.
func References() []PolicySpec {
	return []PolicySpec{
		CollyPolicy(2, time.Second),
		ScrapyPolicy(8, 5*time.Second, time.Minute, 1),
		RatePolicy("rate-half", 0.5, 8),
		RatePolicy("rate-double", 2, 8),
	}
}

func or(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// RateLimitScenario: one API host behind a hidden token bucket of limit
// req/s (burst = limit) answering 429 above it, with or without
// Retry-After; both answers take service. 8 workers; the second half is
// measured. d overrides the duration (default 40 min).
func RateLimitScenario(name string, limit float64, service time.Duration, retryAfter bool, d time.Duration) Scenario {
	return rateLimitScenario(name, limit, service, 0, retryAfter, d)
}

func rateLimitScenario(name string, limit float64, service time.Duration, spread float64, retryAfter bool, d time.Duration) Scenario {
	d = or(d, 40*time.Minute)
	ra := "no Retry-After"
	if retryAfter {
		ra = "Retry-After"
	}
	svc := service.String()
	if spread > 0 {
		svc += fmt.Sprintf(" ±%g %%", 100*spread)
	}
	return Scenario{
		Name:     name,
		About:    fmt.Sprintf("hidden token bucket %g req/s (burst %g), 429 above it with %s, service %s; 8 workers", limit, limit, ra, svc),
		Duration: d, Clients: 1, Workers: 8,
		Frontier: oneHost(apiHost),
		NewServer: func(_ time.Time, rng *rand.Rand) Server {
			return &RateLimitServer{Limit: limit, Service: service, Spread: spread, Rand: rng, RetryAfter: retryAfter}
		},
		Limit: limit, Capacity: limit,
		MeasureFrom: d / 2, RetryAfter: retryAfter,
		Policies: append([]PolicySpec{ThrottleDefault(), ThrottleAuto(1), ThrottleRampup()}, References()...),
	}
}

// CapacityScenario: a server with 4 workers, 200 ms ±50 % per request, a
// FIFO queue and 503 beyond 20 waiting: capacity 20 req/s, latency grows
// with load. 8 workers; the second half is measured. d overrides the
// duration (default 20 min).
func CapacityScenario(d time.Duration) Scenario {
	d = or(d, 20*time.Minute)
	return Scenario{
		Name:     "capacity",
		About:    "4 server workers, service 200ms ±50 %, FIFO queue, 503 beyond 20 waiting (capacity 20 req/s); 8 workers",
		Duration: d, Clients: 1, Workers: 8,
		Frontier: oneHost(siteHost),
		NewServer: func(_ time.Time, rng *rand.Rand) Server {
			return &CapacityServer{Workers: 4, Service: 200 * time.Millisecond, Spread: 0.5, QueueLimit: 20,
				RejectLatency: 5 * time.Millisecond, Rand: rng}
		},
		Limit: 20, Capacity: 20,
		MeasureFrom: d / 2,
		Policies:    append([]PolicySpec{ThrottleDefault(), ThrottleAuto(1), ThrottleAuto(4), ThrottleRampup()}, References()...),
	}
}

// StormScenario: every request is answered 503 from 40 % to 60 % of the
// run (minutes 10-15 of the default 25), else 200; both in 50 ms. The
// server has no rate limit: the rate references guess around 1 req/s,
// the polite default. 8 workers; the whole run is measured.
func StormScenario(d time.Duration) Scenario {
	d = or(d, 25*time.Minute)
	from, to := d*2/5, d*3/5
	return Scenario{
		Name:     "storm",
		About:    fmt.Sprintf("503 to every request from %v to %v, else 200; 50 ms; no rate limit (rate refs guess around 1 req/s); 8 workers", from, to),
		Duration: d, Clients: 1, Workers: 8,
		Frontier: oneHost(siteHost),
		NewServer: func(start time.Time, _ *rand.Rand) Server {
			return &StormServer{From: start.Add(from), To: start.Add(to), Latency: 50 * time.Millisecond}
		},
		Limit:     1,
		StormFrom: from, StormTo: to,
		Policies: append([]PolicySpec{ThrottleDefault(), ThrottleAuto(1), ThrottleRampup()}, References()...),
	}
}

// Skew parameters: hosts, share of the slow host, workers, latency.
const (
	skewHosts   = 200
	skewWorkers = 16
	skewLatency = 500 * time.Millisecond
)

// SkewScenario: 200 hosts, half the URLs for one of them; every host
// answers 200 in 500 ms and the polite rate is 1 req/s per host, so the
// heavy host is bound by its Delay; one process with a pool of 16
// workers. The worker-bound ideal is 16 / 0.5 s = 32 req/s. The throttle
// runs twice: with a throttle.ReadyQueue (workers take the request whose
// host can start soonest) and blocking in frontier order, like the
// references. The run after the first minute is measured.
func SkewScenario(d time.Duration) Scenario {
	d = or(d, 10*time.Minute)
	hosts := make([]string, skewHosts)
	hosts[0] = slowHost
	for i := 1; i < skewHosts; i++ {
		hosts[i] = fmt.Sprintf("h%03d.example", i)
	}
	ready := ThrottleDefault()
	ready.Name, ready.Ready = "throttle/ready", true
	ready.About = "throttle DefaultConfig, workers take requests from a throttle.ReadyQueue"
	fifo := ThrottleDefault()
	fifo.Name = "throttle/fifo"
	fifo.About = "throttle DefaultConfig, workers block in frontier order"
	return Scenario{
		Name: "skew",
		About: fmt.Sprintf("%d hosts, half the URLs for %s, 200 in %v, polite 1 req/s per host; pool of %d workers (ideal %g req/s)",
			skewHosts, slowHost, skewLatency, skewWorkers, skewWorkers/skewLatency.Seconds()),
		Duration: d, Clients: 1, Workers: skewWorkers,
		Frontier: func(rng *rand.Rand) func() string {
			return func() string {
				if rng.IntN(2) == 0 {
					return hosts[0]
				}
				return hosts[1+rng.IntN(skewHosts-1)]
			}
		},
		NewServer: func(time.Time, *rand.Rand) Server { return &PlainServer{Latency: skewLatency} },
		Limit:     1, Capacity: skewWorkers / skewLatency.Seconds(),
		MeasureFrom: time.Minute,
		Policies:    append([]PolicySpec{ready, fifo}, References()...),
	}
}

// FleetScenario: n crawler processes of 4 workers each crawl one site
// whose agreed rate is 1 req/s (the throttle's default politeness); the
// site answers 200 in 50 ms and enforces nothing. Every policy runs once
// per process, sharing nothing; throttle/memstore is one manager per
// process sharing a store.Memory (the redisstore module runs the
// same scenario on Redis). The second half is measured; OKPerCapacity is
// the rate over the agreed one.
func FleetScenario(n int, d time.Duration) Scenario {
	d = or(d, 10*time.Minute)
	shared := StorePolicy("throttle/memstore", "throttle DefaultConfig, a manager per process sharing a store.Memory",
		func(c throttle.Clock) store.Store { return store.NewMemory(c) })
	return Scenario{
		Name:     "fleet",
		About:    fmt.Sprintf("%d processes x 4 workers, one site, agreed rate 1 req/s, 200 in 50 ms, nothing enforced", n),
		Duration: d, Clients: n, Workers: 4,
		Frontier:  oneHost(siteHost),
		NewServer: func(time.Time, *rand.Rand) Server { return &PlainServer{Latency: 50 * time.Millisecond} },
		Limit:     1, Capacity: 1,
		MeasureFrom: d / 2,
		Policies:    append([]PolicySpec{ThrottleDefault(), shared}, References()...),
	}
}

// SweepCase is one case of the rampup sweep: a hidden limit, a service
// time, its spread, Retry-After or not.
type SweepCase struct {
	Limit      float64
	Service    time.Duration
	RetryAfter bool
	// Spread draws each service time from Service ± Spread (a fraction).
	Spread float64
}

// SweepCases are the cases of the rampup sweep: limits 1, 4, 20 and 50
// req/s, a fixed service time of 50 ms or 2 s, with and without
// Retry-After; then the same without Retry-After and with the service time
// drawn from ±10 %, because with a fixed one the slots of rampup's
// concurrency phase stay in phase (see README).
func SweepCases() []SweepCase {
	var cs []SweepCase
	for _, spread := range []float64{0, 0.1} {
		for _, l := range []float64{1, 4, 20, 50} {
			for _, s := range []time.Duration{50 * time.Millisecond, 2 * time.Second} {
				for _, ra := range []bool{false, true} {
					if ra && spread > 0 {
						continue
					}
					cs = append(cs, SweepCase{l, s, ra, spread})
				}
			}
		}
	}
	return cs
}

// Name returns the case's scenario name, e.g. "rampup-50rps-2s-ra", or
// "rampup-4rps-2s-j10" with ±10 % service time.
func (c SweepCase) Name() string {
	n := fmt.Sprintf("rampup-%grps-%v", c.Limit, c.Service)
	if c.RetryAfter {
		n += "-ra"
	}
	if c.Spread > 0 {
		n += fmt.Sprintf("-j%g", 100*c.Spread)
	}
	return n
}

// SweepConcurrency is the concurrency rampup may reach in a case, and the
// workers the case runs with: twice what the limit needs at that service
// time (limit x service), at least 16.
func (c SweepCase) SweepConcurrency() int {
	return max(16, int(math.Ceil(2*c.Limit*c.Service.Seconds())))
}

// SweepRampup is the throttle configuration of a sweep case: rampup on,
// SlotDelay 0 (with the default 1 s each slot could start only once a
// second, so rampup would need one slot per req/s of the limit),
// GlobalConcurrency and Rampup.MaxConcurrency SweepConcurrency, Window
// 60 s (the default: rampup aims at one signal per window).
func (c SweepCase) SweepRampup() PolicySpec {
	n := c.SweepConcurrency()
	cfg := throttle.DefaultConfig()
	cfg.GlobalConcurrency = n
	cfg.Default.SlotDelay = 0
	cfg.Default.Rampup.Enabled = true
	cfg.Default.Rampup.MaxConcurrency = n
	return ThrottlePolicy("throttle+rampup",
		fmt.Sprintf("throttle Rampup on, SlotDelay 0, GlobalConcurrency = Rampup.MaxConcurrency = %d, Window %v", n, cfg.Default.Window), cfg)
}

// SweepDuration is a case's default duration: rampup climbs one level per
// quiet window, 10 levels of delay from 1 s then one per unit of
// concurrency; the run is twice the climb plus ten windows, at least 40
// minutes, so the measured second half is steady.
func (c SweepCase) SweepDuration() time.Duration {
	levels := 10 + math.Ceil(c.Limit*c.Service.Seconds())
	return max(40*time.Minute, time.Duration(2*(levels+10))*time.Minute)
}

// SweepScenario is the scenario of one sweep case, with only the
// throttle's rampup. d overrides the duration.
func SweepScenario(c SweepCase, d time.Duration) Scenario {
	sc := rateLimitScenario(c.Name(), c.Limit, c.Service, c.Spread, c.RetryAfter, or(d, c.SweepDuration()))
	n := c.SweepConcurrency()
	sc.Workers = n
	sc.About = strings.Replace(sc.About, "8 workers", fmt.Sprintf("%d workers", n), 1)
	sc.Policies = []PolicySpec{c.SweepRampup()}
	return sc
}

// ColdRampupConfig is the throttle configuration of the cold family
// (policy "throttle+cold"): the README's configuration for an API whose
// limit you don't know, DefaultConfig with Rampup on and every other
// setting default. Cases whose limit the client's GlobalConcurrency
// cannot carry at their latency raise GlobalConcurrency and
// Rampup.MaxConcurrency (see ColdCase.Policy); nothing else is changed
// per case.
func ColdRampupConfig() throttle.Config {
	cfg := throttle.DefaultConfig()
	cfg.Default.Rampup.Enabled = true
	return cfg
}

// ColdKind is the server model of a cold case.
type ColdKind int

// The server models of the cold family.
const (
	// ColdBucket is a token bucket with a burst of its own (BurstServer).
	ColdBucket ColdKind = iota
	// ColdFixed is a quota per window aligned to the window
	// (FixedWindowServer).
	ColdFixed
	// ColdSliding is a quota in any trailing window (SlidingWindowServer).
	ColdSliding
	// ColdCounting is a quota in any trailing window that counts refused
	// requests too (SlidingWindowServer with CountRefused), as HAProxy's
	// stick table on http_req_rate does.
	ColdCounting
	// ColdCounter is go-chi/httprate's sliding-window counter with its
	// X-RateLimit-* headers (CounterServer).
	ColdCounter
)

// Cold family defaults: a run's length, and the start of its measured
// window (the steady-state figures are measured after the first two
// minutes, once the cold start is over;
// ColdStart90 and First5Share over the whole run).
const (
	coldDuration    = 10 * time.Minute
	coldMeasureFrom = 2 * time.Minute
)

// ColdCase is one case of the cold family: one API host behind a hidden
// limit, crawled from a cold start, the throttle knowing nothing of it.
type ColdCase struct {
	Kind ColdKind
	// Limit is the token bucket's rate in req/s and Burst its burst
	// (BurstServer: 1 + Burst tokens); ColdBucket only.
	Limit float64
	Burst int
	// Quota is the requests allowed per Window; ColdFixed, ColdSliding
	// and ColdCounting only.
	Quota  int
	Window time.Duration
	// Latency is every answer's service time.
	Latency time.Duration
	// Status is the status above the limit; 0 means 429.
	Status int
	// RetryAfter makes the server send Retry-After with its refusals.
	RetryAfter bool
	// References adds the reference policies (References) to the case's
	// scenario.
	References bool
}

// ColdCases are the cases of the cold family, each run from a cold start
// for 10 minutes:
//
//   - token buckets (429, no Retry-After) of 1, 5, 20 and 50 req/s, each
//     with burst 0 and 10 (BurstServer: nginx's burst, 1 and 11 tokens),
//     at 1 ms, 50 ms and 2 s latency: the whole cross product, 24 cases;
//   - the same 5 req/s burst-0 bucket at 50 ms answering 503, nginx
//     limit_req's defaults;
//   - per-minute quotas of 60 and 600 requests, fixed windows (aligned to
//     the minute) and sliding ones, at 50 ms, without Retry-After; and the
//     fixed ones again with Retry-After to the window's end.
//
// The reference policies run in four of them: the 5 req/s bucket with
// burst 10 and the 50 req/s one with burst 0 at 50 ms, the 600/min fixed
// window, the 503 limiter (50 ms everywhere, where the references'
// request rates stay moderate).
func ColdCases() []ColdCase {
	var cs []ColdCase
	for _, l := range []float64{1, 5, 20, 50} {
		for _, b := range []int{0, 10} {
			for _, lat := range []time.Duration{time.Millisecond, 50 * time.Millisecond, 2 * time.Second} {
				refs := lat == 50*time.Millisecond && (l == 5 && b == 10 || l == 50 && b == 0)
				cs = append(cs, ColdCase{Kind: ColdBucket, Limit: l, Burst: b, Latency: lat, References: refs})
			}
		}
	}
	cs = append(cs, ColdCase{Kind: ColdBucket, Limit: 5, Burst: 0, Latency: 50 * time.Millisecond, Status: 503, References: true})
	cs = append(cs, ColdCase{Kind: ColdCounting, Quota: 50, Window: 10 * time.Second, Latency: time.Millisecond})
	cs = append(cs, ColdCase{Kind: ColdCounter, Quota: 10, Window: time.Second, Latency: time.Millisecond})
	for _, ra := range []bool{false, true} {
		for _, k := range []ColdKind{ColdFixed, ColdSliding} {
			if ra && k == ColdSliding {
				continue
			}
			for _, q := range []int{60, 600} {
				refs := !ra && k == ColdFixed && q == 600
				cs = append(cs, ColdCase{Kind: k, Quota: q, Window: time.Minute, Latency: 50 * time.Millisecond, RetryAfter: ra, References: refs})
			}
		}
	}
	return cs
}

// Rate is the case's limit in req/s: the bucket's rate, or the quota over
// its window.
func (c ColdCase) Rate() float64 {
	if c.Kind == ColdBucket {
		return c.Limit
	}
	return float64(c.Quota) / c.Window.Seconds()
}

// Name returns the case's scenario name: "cold-5rps-b0-50ms" for a token
// bucket, with "-503" when it answers 503; "cold-60pm-fixed" or
// "cold-600pm-sliding" for a per-minute quota ("cold-100per1h0m0s-fixed"
// for another window); "-ra" with Retry-After.
func (c ColdCase) Name() string {
	var n string
	if c.Kind == ColdBucket {
		n = fmt.Sprintf("cold-%grps-b%d-%v", c.Limit, c.Burst, c.Latency)
	} else {
		per := fmt.Sprintf("per%v", c.Window)
		if c.Window == time.Minute {
			per = "pm"
		}
		kind := "fixed"
		switch c.Kind {
		case ColdSliding:
			kind = "sliding"
		case ColdCounting:
			kind = "counting"
		case ColdCounter:
			kind = "httprate"
		}
		n = fmt.Sprintf("cold-%d%s-%s", c.Quota, per, kind)
	}
	if c.Status != 0 && c.Status != 429 {
		n += fmt.Sprintf("-%d", c.Status)
	}
	if c.RetryAfter {
		n += "-ra"
	}
	return n
}

// Workers is the case's workers: twice what the limit needs in flight at
// its latency (limit x latency), at least 16, so they are never the
// bottleneck.
func (c ColdCase) Workers() int {
	return max(16, int(math.Ceil(2*c.Rate()*c.Latency.Seconds())))
}

// Policy is the cold family's throttle policy for the case,
// "throttle+cold": ColdRampupConfig, where the manager's GlobalConcurrency
// cannot carry the limit at the case's latency (limit x latency above it:
// 20 and 50 req/s at 2 s) raised, with Rampup.MaxConcurrency, to Workers,
// so the case's capacity stays the server's limit.
func (c ColdCase) Policy() PolicySpec {
	cfg, raised := c.config()
	about := coldAbout(cfg)
	if raised {
		about += fmt.Sprintf(" (GlobalConcurrency and Rampup.MaxConcurrency raised to %d for %g req/s x %v)", cfg.GlobalConcurrency, c.Rate(), c.Latency)
	}
	return ThrottlePolicy("throttle+cold", about, cfg)
}

// config returns the case's ColdRampupConfig and whether it raised the
// concurrency.
func (c ColdCase) config() (throttle.Config, bool) {
	cfg := ColdRampupConfig()
	if c.Rate()*c.Latency.Seconds() <= float64(cfg.GlobalConcurrency) {
		return cfg, false
	}
	n := max(cfg.GlobalConcurrency, c.Workers())
	cfg.GlobalConcurrency = n
	cfg.Default.Rampup.MaxConcurrency = max(cfg.Default.Rampup.MaxConcurrency, n)
	return cfg, true
}

// coldAbout describes a configuration of the cold family by the settings
// that matter to it, so the text follows ColdRampupConfig.
func coldAbout(cfg throttle.Config) string {
	d := cfg.Default
	maxc := "0 = GlobalConcurrency"
	if d.Rampup.MaxConcurrency > 0 {
		maxc = strconv.Itoa(d.Rampup.MaxConcurrency)
	}
	return fmt.Sprintf("throttle ColdRampupConfig(): Rampup %v (MaxConcurrency %s, signals %d-%d/window), Concurrency %d, Delay %v, SlotDelay %v, Window %v, GlobalConcurrency %d",
		onOff(d.Rampup.Enabled), maxc, d.Rampup.MinSignals, d.Rampup.MaxSignals, d.Concurrency, d.Delay, d.SlotDelay, d.Window, cfg.GlobalConcurrency)
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// ColdScenario is the scenario of one cold case: one API host, the case's
// server, Workers workers, the throttle+cold policy (and the references
// if the case has them). It starts cold, so ColdStart90 and First5Share
// tell the start; the window after the first minute is measured for the
// steady-state figures. d overrides the duration (default 10 min).
func ColdScenario(c ColdCase, d time.Duration) Scenario {
	d = or(d, coldDuration)
	rate := c.Rate()
	status := limitStatus(c.Status)
	var limit string
	switch c.Kind {
	case ColdBucket:
		tokens := "1 token"
		if c.Burst > 0 {
			tokens = fmt.Sprintf("%d tokens", 1+c.Burst)
		}
		limit = fmt.Sprintf("token bucket %g req/s, burst %d (%s)", c.Limit, c.Burst, tokens)
	case ColdFixed:
		limit = fmt.Sprintf("quota %d per %v, fixed windows aligned to the %v", c.Quota, c.Window, c.Window)
	case ColdSliding:
		limit = fmt.Sprintf("quota %d in any trailing %v (sliding window)", c.Quota, c.Window)
	case ColdCounting:
		limit = fmt.Sprintf("%d requests in any trailing %v, refused ones counted (HAProxy's http_req_rate)", c.Quota, c.Window)
	case ColdCounter:
		limit = fmt.Sprintf("go-chi/httprate's sliding counter, %d per %v, X-RateLimit-* headers", c.Quota, c.Window)
	}
	ra := "no Retry-After"
	if c.RetryAfter {
		ra = "Retry-After"
		if c.Kind == ColdFixed {
			ra += " to the window's end"
		}
	}
	about := fmt.Sprintf("%s, %d above it with %s, latency %v; %d workers; cold start, capacity %g req/s", limit, status, ra, c.Latency, c.Workers(), rate)
	if cfg, raised := c.config(); raised {
		base := ColdRampupConfig().GlobalConcurrency
		about += fmt.Sprintf(", GlobalConcurrency raised to %d (%d slots carry only %g req/s at %v)", cfg.GlobalConcurrency, base, float64(base)/c.Latency.Seconds(), c.Latency)
	}
	policies := []PolicySpec{c.Policy()}
	if c.References {
		policies = append(policies, References()...)
	}
	return Scenario{
		Name:     c.Name(),
		About:    about,
		Duration: d, Clients: 1, Workers: c.Workers(),
		Frontier: oneHost(apiHost),
		NewServer: func(time.Time, *rand.Rand) Server {
			switch c.Kind {
			case ColdFixed:
				return &FixedWindowServer{Quota: c.Quota, Window: c.Window, Status: c.Status, RetryAfter: c.RetryAfter, Latency: c.Latency}
			case ColdCounter:
				return &CounterServer{Quota: c.Quota, Window: c.Window, Latency: c.Latency}
			case ColdSliding, ColdCounting:
				return &SlidingWindowServer{Quota: c.Quota, Window: c.Window, Status: c.Status, RetryAfter: c.RetryAfter, Latency: c.Latency,
					CountRefused: c.Kind == ColdCounting}
			}
			return &BurstServer{Rate: c.Limit, Burst: c.Burst, Status: c.Status, RetryAfter: c.RetryAfter, Latency: c.Latency}
		},
		Limit: rate, Capacity: rate,
		MeasureFrom: min(coldMeasureFrom, d/2), RetryAfter: c.RetryAfter,
		Policies: policies,
	}
}

// ColdStormScenario is the storm scenario (StormScenario) with a 6-minute
// storm, minutes 12-18 of 30, run with the cold family's policy next to
// throttle+rampup and throttle+auto; d overrides the duration (the storm
// stays at 40-60 % of it). The server has no limit, so no capacity and
// no cold-start figures: it checks that the cold family's configuration
// still goes quiet in a storm and comes back after it.
func ColdStormScenario(d time.Duration) Scenario {
	sc := StormScenario(or(d, 30*time.Minute))
	sc.Name = "cold-storm"
	cfg := ColdRampupConfig()
	sc.Policies = []PolicySpec{ThrottlePolicy("throttle+cold", coldAbout(cfg), cfg), ThrottleDefault(), ThrottleRampup(), ThrottleAuto(1)}
	return sc
}

// ColdScenarios returns the cold family: the scenario of each of
// ColdCases, then ColdStormScenario. It is not in the default set
// (Scenarios); AllScenarios has both. d, if not zero, overrides every
// duration.
func ColdScenarios(d time.Duration) []Scenario {
	var s []Scenario
	for _, c := range ColdCases() {
		s = append(s, ColdScenario(c, d))
	}
	return append(s, ColdStormScenario(d))
}

// AllScenarios returns every scenario: the default set, then the cold
// family. d, if not zero, overrides every duration.
func AllScenarios(d time.Duration) []Scenario {
	return append(Scenarios(d), ColdScenarios(d)...)
}

// Scenarios returns the default set, in report order; d, if not zero,
// overrides every duration.
func Scenarios(d time.Duration) []Scenario {
	s := []Scenario{
		RateLimitScenario("ratelimit", 4, 50*time.Millisecond, false, d),
		RateLimitScenario("ratelimit-ra", 4, 50*time.Millisecond, true, d),
		CapacityScenario(d),
		StormScenario(d),
		SkewScenario(d),
		FleetScenario(4, d),
	}
	for _, c := range SweepCases() {
		s = append(s, SweepScenario(c, d))
	}
	return s
}

// Select returns the scenarios whose name matches one of the
// comma-separated patterns (path.Match syntax; "all" matches every one).
func Select(all []Scenario, patterns string) ([]Scenario, error) {
	var out []Scenario
	for _, sc := range all {
		for _, p := range strings.Split(patterns, ",") {
			p = strings.TrimSpace(p)
			ok, err := path.Match(p, sc.Name)
			if err != nil {
				return nil, fmt.Errorf("sim: bad scenario pattern %q: %w", p, err)
			}
			if ok || p == "all" {
				out = append(out, sc)
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sim: no scenario matches %q", patterns)
	}
	return out, nil
}
