// Package fieldtest is a field-test suite: it runs crawls through the
// throttle's http.RoundTripper, in real time, against real rate limiters
// (nginx limit_req, HAProxy stick tables, github.com/go-chi/httprate)
// that the tests start themselves on loopback, and reports how close each
// crawl got to the server's limit and how many backoff signals (429 and
// 503 answers) it drew on the way.
//
// # Run
//
// From the repository root (go.work includes this module):
//
//	THROTTLE_FIELD=1 go test -v -count=1 github.com/crawlerkit/throttle/fieldtest
//
// Each case crawls for 2 minutes (the fleet's starvation crawl for 3) and
// the cases run in parallel, so the suite takes about 3 minutes;
// THROTTLE_FIELD_DURATION=30s shortens the crawls for a quick local run
// (the steady part of a crawl shorter than 2 minutes is its second half). Without THROTTLE_FIELD=1 or
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
// limit and at most 4 backoff signals per minute, and no transport errors
// before the crawl's end.
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
// # Reuse
//
// [StartNginx], [StartHAProxy] and [StartHTTPRate] start the servers for
// any test and stop them when it ends; [Crawl] and [Summarize] run a crawl
// and compute its figures.
package fieldtest
