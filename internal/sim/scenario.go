package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"path"
	"strings"
	"time"

	"github.com/crawlerkit/throttle"
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
// process sharing a throttle.MemoryStore (the redisstore module runs the
// same scenario on Redis). The second half is measured; OKPerCapacity is
// the rate over the agreed one.
func FleetScenario(n int, d time.Duration) Scenario {
	d = or(d, 10*time.Minute)
	shared := StorePolicy("throttle/memstore", "throttle DefaultConfig, a manager per process sharing a MemoryStore",
		func(c throttle.Clock) throttle.Store { return throttle.NewMemoryStore(c) })
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
