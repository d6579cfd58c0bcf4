// Package hooks holds the functions a throttle.ThrottlingManager calls on
// events, and the events they get, to feed metrics, logs or traces. Set
// them in throttle.Config.Hooks before throttle.New:
//
//	backoffs := expvar.NewMap("backoffs") // safe for concurrent use
//	cfg := throttle.DefaultConfig()
//	cfg.Hooks = hooks.Hooks{
//		Backoff: func(e hooks.Backoff) { backoffs.Add(e.Scope, 1) },
//	}
//	m, err := throttle.New(cfg)
//
// Each field of Hooks is one kind of event and gets the event type of its
// own name, a plain struct:
//
//   - Admitted: a permit was granted (Acquire, TryAcquire, the Transport),
//     with how long its caller waited.
//   - Released: a permit was released, with the status, the error and the
//     latency.
//   - DelayChanged: a response changed a scope's delay or concurrency, with
//     the part that sets the delay now (DelayChanged.Reason).
//   - Backoff: a response was a backoff signal for a scope.
//   - GateSet: a server-given wait (Retry-After, RateLimit) holds a scope.
//   - Warning: the manager warned about its settings or its load.
//
// Package hooks imports nothing of throttle's, so code that only builds
// Hooks (a metrics package, a tracing wrapper such as metrics/otel's
// SpanEvents) needs no more of the manager than this.
//
// # When hooks run
//
// The manager calls a hook without any of its locks held, on the goroutine
// of the call that caused the event: Admitted on the caller of Acquire,
// TryAcquire or the Transport's RoundTrip, before it gets its permit; the
// release events on the caller of Release (or of the response body's
// Close or last Read, through the Transport; or of the Acquire that
// reclaims a permit held past MaxHold), after the permit's slots are free;
// the warnings at New, or on the call that found them. Events come from
// many goroutines, so a hook may run on several at once and must be safe
// for concurrent use. A hook must be quick, as its caller waits for it; it
// may call the manager (Stats, for one). The Admitted hook runs while its
// caller holds the new permit: an Acquire from it may wait for that
// permit's own slot, which is never freed while the hook waits.
//
// A release calls, in this order: DelayChanged, Backoff and GateSet for
// each scope of the permit whose policy changed (with a Store as without),
// then Released, then Warning for a warning the release found. A
// ReadyQueue waiting for the freed slot hears of the release before the
// hooks, so a slow hook holds up only its own caller. A hook that panics
// leaves no lock held, no slot taken and no caller queued, and the panic
// reaches the goroutine that caused the event; a panic in a release's
// hook does so after the release's other hooks have had their events
// (and after every permit that MaxHold reclaims at once is released), and
// a panic in Admitted gives the permit back first, so its caller never
// gets it.
//
// # robots.txt
//
// The robots.txt fetches the manager makes itself (throttle.RobotsConfig)
// are permits too: their Admitted, Released and Backoff events have Robots
// set, so a metric of the caller's requests can skip them, as
// throttle.Stats does (Counts.Robots).
//
// examples/expvar (the standard library's expvar) and
// examples/ext/prometheus (Prometheus series with a bounded scope label)
// in the repository feed metrics from these hooks.
package hooks
