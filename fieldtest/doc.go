// Package fieldtest is a field-test suite: it runs crawls through the
// throttle's http.RoundTripper, in real time, against real rate limiters
// (nginx limit_req, HAProxy stick tables, github.com/go-chi/httprate)
// that the tests start themselves on loopback, and reports how close each
// crawl got to the server's limit and how many backoff signals (429 and
// 503 answers) it drew on the way.
//
// # Run
//
// The whole suite (the fixed cases, the random cases, the fleet and the
// fidelity check) is one command, from the repository root (go.work
// includes this module); -v prints every case's figures:
//
//	THROTTLE_FIELD=1 go test -count=1 ./fieldtest/
//
// Each fixed case crawls for 2 minutes (the random ones and the
// fleet's starvation crawl for 3) and every case runs at once (TestMain
// raises -parallel to their number), so the suite takes about 3 minutes of wall time, and must
// take no more than 8. THROTTLE_FIELD_DURATION=30s shortens the crawls
// for a quick local run (the steady part of a crawl shorter than 2
// minutes is its second half, and its first half stands for the first
// minute everywhere below). Without THROTTLE_FIELD=1 or
// THROTTLE_REQUIRE_FIELD=1 every test skips. The servers need the Debian
// packages nginx and haproxy; when a binary is missing its tests skip,
// or fail under THROTTLE_REQUIRE_FIELD=1 (as CI sets it).
//
// # Cases
//
// Each case is a crawl of 16 goroutines through one http.Client whose
// Transport is a ThrottlingManager's, configured by [APIConfig]:
//
//   - nginx-429: limit_req rate=5r/s burst=5 nodelay, limit_req_status 429
//   - nginx-503: the same with limit_req's default status, 503
//   - nginx-429-retry-after: nginx-429 with "Retry-After: 1" on refusals
//   - haproxy-429: 429 while the client's http_req_rate(10s) is over 50
//     (5 req/s; refused requests count)
//   - httprate: 10 requests per 1 s sliding window, X-RateLimit-* headers
//     on every answer and "Retry-After: 1" on refusals
//
// For each case the test prints a [Summary] (go test -v shows it) and
// asserts loose bounds over [60 s, end]: a 2xx rate of at least 0.8 of the
// limit (0.7 for HAProxy, whose counter of refused requests makes the
// climb from a cold start slow; see its case), at most 4 backoff signals
// per minute, and no transport errors before the crawl's end.
//
// # Random cases
//
// Besides the fixed cases, TestFieldRandom draws 4 limiter shapes at each
// run, 2 of nginx and 2 of HAProxy, from the space of package
// internal/sim's grid (a sim.Shape each, configured by [NginxFor] and
// [HAProxyFor]), by a seeded math/rand/v2 generator, stratified within
// each server (each parameter's range cut in two halves, one shape in
// each): limits of 0.5-20 req/s (nginx per minute below 2 req/s),
// refusals 429 or 503, no Retry-After or one of 1-5 s, robots.txt on or
// off; nginx with a burst of 0-10, in nodelay or delay mode; HAProxy over
// a period of 1-10 s. The servers answer at once. With robots.txt on, the
// crawl's Config has Robots.Enabled and the throttle fetches /robots.txt
// through its Transport; both servers answer it 404 behind their limiter,
// which counts it as any request, as a site without robots.txt does.
//
// The test prints the seed first, and at the end a table of each case's
// figures; THROTTLE_FIELD_SEED=<seed> replays a draw:
//
//	THROTTLE_FIELD=1 THROTTLE_FIELD_SEED=42 go test -count=1 -v -run TestFieldRandom ./fieldtest/
//
// Each case is crawled as a fixed case is, and measured against the
// grid's targets: a 2xx rate of at least 0.9 of the limit over the last
// third of the crawl; 90 % of the limit within 60 s (the first time the
// 2xx answers in a trailing 60 s, over 60 s, are 90 % of the limit, the
// time before the crawl counting as none: [Summary].Cold); at most 2
// refusals (429 and 503) a minute after the first minute. A crawl shorter
// than 2 minutes takes half its length for the minute of the last two.
// The table says which targets each case missed: the pace misses the
// cold start on some shapes yet (limiters that count refusals, a
// Retry-After of seconds: 1-4 minutes, as the grid finds too). What
// fails a case is worse than the pace has been on any seed measured: less
// than 0.6 of the limit over the last third, more than 6 refusals a
// minute, or a transport error. The random cases crawl 3 minutes (as the
// fleet's starvation crawl does, so the suite takes no longer), so that
// the last third is past the slow cold starts. A failure names the
// shape (sim.Shape.Name: the limiter's sim.Limiter.String, "-robots" with
// robots.txt on) and the seed, and prints the [Summary].
//
// # The fleet
//
// TestFleetColdStart runs, beside the cases, 4 worker processes (the test
// binary run again, 4 goroutines each) that share one Redis store
// (redis-server, started by the test) and crawl one nginx (5 r/s, burst 5,
// 429 with "Retry-After: 1"), and one process crawling another such nginx
// alone. The fleet must reach 90 % of the limit no more than 30 s after
// the lone process, then hold at least 90 % with at most 2 signals per
// minute, and no worker may send a request inside a Retry-After gate
// another worker received. Without redis-server it skips, or fails under
// THROTTLE_REQUIRE_REDIS=1.
//
// TestFleetNoRequestStarves runs such a fleet for 3 minutes (or
// THROTTLE_FIELD_DURATION) with every request bounded by a 30 s client
// timeout that includes its wait in the throttle: no request may be lost
// to a wait, and none may wait longer than 15 s (the store serves the
// fleet's waiters first come, first served).
//
// # Peers
//
// TestPeers compares the throttle with real crawlers on the same limiters.
// It is not part of the suite (THROTTLE_FIELD does not run it) and prints
// one Markdown table:
//
//	bash scripts/peers.sh [duration]     # default 3m per run, ~27 min in all; 30s for a quick run
//
// which runs THROTTLE_PEERS=1 THROTTLE_PEERS_DURATION=<duration> go test
// -run '^TestPeers$' with a long enough -timeout;
// THROTTLE_PEERS_CLIENTS=throttle,colly runs some clients only, and a -run
// pattern as 'TestPeers/haproxy' some limiters only. The clients, each
// keeping 16 requests going, with the programs in peers/:
//
//   - throttle: [APIConfig], 16 goroutines through the Transport, in the
//     test's process, as the cases above;
//   - scrapy: Scrapy (Debian's python3-scrapy) with AutoThrottle on at its
//     defaults, CONCURRENT_REQUESTS 16, ROBOTSTXT_OBEY off, the retry
//     middleware at its defaults, one URL over and over (dont_filter);
//   - crawlee: Crawlee's HttpCrawler at its defaults (npm crawlee, the
//     version peers/package.json pins, installed by the test into the
//     user's cache directory on first use), on Node;
//   - colly: colly at its defaults with Async, AllowURLRevisit and a
//     LimitRule of Parallelism 16, no delay.
//
// The limiters are the five cases above and three shapes they lack:
// HAProxy over a 1 s period (5 per 1 s), nginx with a burst and a longer
// Retry-After (rate=5r/s burst=10, 429, Retry-After: 3), and HAProxy below
// 1 req/s (5 per 10 s). For each limiter in turn, every client crawls its
// own server (the limiters key on the client's IP, 127.0.0.1 for all) for
// the duration, all clients at once. Each server logs every answer with
// its time in ms ([ReadAccessLog]), and the figures come from those logs,
// the same way for every client:
//
//   - share of the limit: the 2xx rate over the last third of the run,
//     over the limit;
//   - refusals (429 and 503) per minute after the client's first minute;
//   - time to 90 %: from the client's first request to the first time its
//     2xx rate over the trailing minute was 90 % of the limit;
//   - requests: every answer of the run.
//
// A run shorter than 3 minutes takes a third of the run for "minute" in
// the second and third figures, as the table's header says; the header
// also gives the machine's load average at the end of the runs, since a
// busy machine moves every client's figures. A missing
// scrapy, node or npm, nginx or haproxy skips its client or limiters with
// a note under the table. The test checks that the access log counts the
// 2xx and refusals that the throttle's crawl counted itself.
//
// # Fidelity of the limiter models
//
// TestFidelity checks the models of real limiters in internal/sim
// (sim.Limiter) against the servers they model, beside the cases:
//
//   - nginx limit_req 20r/s: burst 0 nodelay (503); burst 5 nodelay, 429
//     with "Retry-After: 1"; burst 5 in delay mode; 1000r/m burst 8
//     delay=3;
//   - HAProxy http_req_rate: over 30 per 1 s; over 300 per 10 s, 429 with
//     "Retry-After: 2".
//
// Each server gets one seeded trace of 2,000-3,000 requests over 80 s
// (phases below, near and above the limit, bursts, pauses of up to 2.5
// times the limiter's memory), all servers at once, about 90 s in all.
// Each server logs every request to the test over UDP syslog
// ([ArrivalLog]): its arrival in milliseconds by the clock its limiter
// reads (nginx's monotonic clock, rebuilt from $connection_time; the date
// of a one-thread HAProxy when it tracked the request) and its status.
// Those times are fed to the model, so the machine's timing noise does
// not count against it. The model must give the server's status for at
// least 99 % of the requests; in delay mode, nginx must have held the
// delayed requests at least the model's delay, half of them within 10
// ms of it. The test prints each server's agreement. Run it alone with:
//
//	THROTTLE_FIELD=1 go test -count=1 -run TestFidelity -v ./fieldtest/
//
// # Reuse
//
// [StartNginx], [StartHAProxy] and [StartHTTPRate] start the servers for
// any test and stop them when it ends, logging every answer when their
// options name an AccessLog ([ReadAccessLog] reads it); [NginxFor] and
// [HAProxyFor] configure them as a sim.Limiter describes; [Crawl] and
// [Summarize] run a crawl and compute its figures.
package fieldtest
