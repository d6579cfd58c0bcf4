// Package sim is the traffic simulator of package throttle: it runs whole
// crawls against model servers in virtual time and measures what each
// throttling policy does to the server and to the crawl.
//
// # Virtual time
//
// Nothing runs on goroutines. A Loop is a discrete-event loop ordered by
// (time, sequence number) over the settable fake clock of package
// throttletest (a throttle.Clock); the loop sets the clock to each event's
// time before running it, so a run is single-threaded and, for a seed,
// deterministic.
// Workers are not goroutines either: a worker asks its Policy whether it
// may send (for the throttle, ThrottlingManager.TryAcquire, which never
// blocks); if admitted, the server model answers at the request's arrival
// time and the response is delivered latency later, where the permit is
// released; if not, the worker retries at the time the policy gave, or
// right after the next release of that policy when it gave none.
//
// # Servers and policies
//
// Server models (RateLimitServer, BurstServer, FixedWindowServer,
// SlidingWindowServer, CapacityServer, StormServer, PlainServer) answer
// from their model at the arrival time. Real limiters are modelled
// exactly, from their source, in their own arithmetic: nginx's limit_req
// (NginxLimitReq), HAProxy's http_req_rate (HAProxyReqRate),
// go-redis/redis_rate's GCRA (GCRAServer), go-chi/httprate
// (CounterServer); the nginx and HAProxy models are checked against the
// real servers by the fieldtest module's TestFidelity. A Limiter
// describes any of the limiters by its parameters, builds it
// (Limiter.NewServer) and names it (Limiter.String); StatedServer makes
// one state its limit in RateLimit or X-RateLimit headers,
// RetryAfterServer send a constant Retry-After. Policies are
// the throttle's configurations (ThrottlePolicy) and reference policies
// written here as small state machines: colly's LimitRule (CollyPolicy),
// Scrapy's AutoThrottle rule alone (ScrapyPolicy) and a fixed
// golang.org/x/time/rate limiter (RatePolicy).
//
// # Scenarios and metrics
//
// A Scenario is a server model, a client setup (processes, workers,
// frontier) and the policies to compare. Run runs one (scenario, policy)
// pair and returns its Result: Metrics (2xx rate against the server's
// capacity, backoff signals per minute, mean in-flight at the server, the
// cold start, storm and Retry-After figures) and Series for the plots.
// RunAll runs scenarios with one seed, RunSeeds with several, each row
// then the worst seed for each figure (Aggregate). WriteTable, WriteJSON
// and WriteSVG report them; cmd/throttlesim is the command.
//
// Scenarios is the default set; ColdScenarios, the cold family, crawls
// hidden limits (token buckets with their own burst, per-minute quotas,
// a limiter answering 503) from a cold start with ColdRampupConfig, to
// measure how soon the throttle reaches the limit (Metrics.ColdStart90,
// Metrics.First5Share) as well as its steady state.
package sim
