// Package throttleotel observes a throttle.ThrottlingManager's statistics
// with the OpenTelemetry metric API (go.opentelemetry.io/otel/metric):
// Register creates observable instruments on a metric.Meter and one
// callback that takes one ThrottlingManager.StatsInto snapshot per
// collection. It needs no Hooks and starts no goroutine.
//
// The import path ends in otel, the package is named throttleotel, so that
// it does not shadow OpenTelemetry's otel package:
//
//	import throttleotel "github.com/crawlerkit/throttle/metrics/otel"
//
//	reg, err := throttleotel.Register(m, otel.Meter("crawler"), throttleotel.Options{})
//	defer reg.Unregister()
//
// It is a module of its own, so the core module does not depend on
// OpenTelemetry; it uses the API only, and works with any SDK.
//
// # Instruments
//
// Totals of the manager (counters count each request once in each of its
// scopes, forgotten scopes included), with Options.Attributes only:
//
//	throttle.requests                 Int64ObservableCounter        {request}   requests admitted
//	throttle.responses                Int64ObservableCounter        {response}  released requests by ClassKey: 1xx ... 5xx, errors
//	throttle.backoff.signals          Int64ObservableCounter        {signal}    responses that were backoff signals
//	throttle.in_flight                Int64ObservableUpDownCounter  {permit}    permits held
//	throttle.waiting                  Int64ObservableUpDownCounter  {caller}    callers blocked in Acquire
//	throttle.scopes                   Int64ObservableUpDownCounter  {scope}     scopes held
//	throttle.global_concurrency       Int64ObservableGauge          {permit}    Config.GlobalConcurrency
//
// Per scope, with a ScopeKey attribute, for the named scopes and
// OtherScope:
//
//	throttle.scope.in_flight          Int64ObservableUpDownCounter  {permit}    permits held
//	throttle.scope.waiting            Int64ObservableUpDownCounter  {caller}    callers blocked in Acquire on it
//	throttle.scope.concurrency        Int64ObservableGauge          {permit}    effective concurrency
//	throttle.scope.requests           Int64ObservableCounter        {request}   requests admitted
//	throttle.scope.responses          Int64ObservableCounter        {response}  released requests by ClassKey
//	throttle.scope.backoff.signals    Int64ObservableCounter        {signal}    backoff signals
//
// and for the named scopes only (a sum of delays means nothing):
//
//	throttle.scope.delay              Float64ObservableGauge        s           effective delay between starts, before jitter
//	throttle.scope.pace               Float64ObservableGauge        {start}/s   the pace all rules allow (Pace.Rate; +Inf: unbounded;
//	                                                                            not observed for a custom ScopeManager)
//	throttle.scope.backoff.delay      Float64ObservableGauge        s           the delay backoff raised (0: none)
//
// # Cardinality
//
// A scope attribute per host would make a series per host a crawl meets,
// and a crawl meets millions. So at most Options.MaxScopes scopes
// (default 50) have a ScopeKey value of their own: at each collection, the
// busiest by permits in flight, then callers waiting, then requests (then
// by key). The others are summed under OtherScope, as are a scope whose
// key is "other" and one whose key is not valid UTF-8. A collection has at
// most 14 x MaxScopes + 23 data points.
//
// Which scopes are named can change from one collection to the next: over
// hours, more than MaxScopes scopes may so appear, each only while it is
// among the busiest. The counters of OtherScope never go down: a scope that joins the top, or is
// forgotten, leaves what it counted in OtherScope, which counts from then
// on only what the scopes it sums add. So cumulative and delta temporality
// are both right for every attribute set, and the named scopes' counters
// plus OtherScope's may add up to more than the totals.
//
// # Traces
//
// SpanEvents wraps a Config's Hooks (package
// github.com/crawlerkit/throttle/hooks) so that each request's wait in the
// throttle shows on the request's span, from the hooks' events, which
// carry the request's context: a "throttle.admitted" event with how long it
// waited, then "throttle.released" with the status.
package throttleotel
