// Package throttleprom exports a throttle.ThrottlingManager's statistics
// as Prometheus metrics: a prometheus.Collector (client_golang) that takes
// one ThrottlingManager.StatsInto snapshot per scrape and exports it as
// constant metrics. It needs no Hooks and starts no goroutine.
//
// The import path ends in prometheus, the package is named throttleprom,
// so that it does not shadow client_golang's prometheus package:
//
//	import throttleprom "github.com/crawlerkit/throttle/metrics/prometheus"
//
//	reg.MustRegister(throttleprom.NewCollector(m, throttleprom.Options{}))
//
// It is a module of its own, so the core module does not depend on
// client_golang.
//
// # Metrics
//
// Totals of the manager (counters count each request once in each of its
// scopes, forgotten scopes included):
//
//	throttle_requests_total                  counter  requests admitted
//	throttle_responses_total{class}          counter  released requests by class: 1xx ... 5xx, errors (transport error, no response)
//	throttle_backoff_signals_total           counter  responses that were backoff signals
//	throttle_in_flight                       gauge    permits held
//	throttle_waiting                         gauge    callers blocked in Acquire
//	throttle_scopes                          gauge    scopes held
//	throttle_global_concurrency              gauge    Config.GlobalConcurrency
//
// Per scope, for the named scopes and scope="other":
//
//	throttle_scope_in_flight{scope}                 gauge    permits held
//	throttle_scope_waiting{scope}                   gauge    callers blocked in Acquire on it
//	throttle_scope_concurrency{scope}               gauge    effective concurrency
//	throttle_scope_requests_total{scope}            counter  requests admitted
//	throttle_scope_responses_total{scope,class}     counter  released requests by class
//	throttle_scope_backoff_signals_total{scope}     counter  backoff signals
//
// and for the named scopes only (a sum of delays means nothing):
//
//	throttle_scope_delay_seconds{scope}             gauge    effective delay between starts, before jitter
//	throttle_scope_pace_starts_per_second{scope}    gauge    the pace all rules allow (Pace.Rate; +Inf: unbounded;
//	                                                         absent for a custom ScopeManager)
//	throttle_scope_backoff_delay_seconds{scope}     gauge    the delay backoff raised (0: none)
//
// # Cardinality
//
// A scope label per host would make a series per host a crawl meets, and
// a crawl meets millions. So at most Options.MaxScopes scopes (default
// 50) get a scope label of their own: at each collection, the busiest by
// permits in flight, then callers waiting, then requests (then by key).
// The others are summed under scope="other", as are a scope whose key is
// "other" and one whose key is not valid UTF-8. A scrape has at most
// 14 x MaxScopes + 23 series.
//
// Which scopes are named can change from one scrape to the next: a
// scope's series stops when it drops out of the top, and starts again,
// with its whole count, when it comes back. Over hours, more than
// MaxScopes scopes may so appear, each only while it is among the
// busiest. The counters of "other" never
// go down: a scope that joins the top, or is forgotten, leaves what it
// counted in "other", and "other" counts from then on only what the
// scopes it sums add. So rate() and increase() are right for every series,
// and the named scopes' counters plus "other" may add up to more than the
// totals.
package throttleprom
