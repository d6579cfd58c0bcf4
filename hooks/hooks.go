package hooks

import (
	"context"
	"net/url"
	"time"
)

// Hooks are the functions a throttle.ThrottlingManager calls on events, to
// feed metrics, logs or traces: set them in throttle.Config.Hooks before
// throttle.New. Each field is one kind of event and gets the event type of
// its own name (the Backoff hook gets a Backoff). Each may be nil: a nil
// hook is not called, and while DelayChanged, Backoff and GateSet are all
// nil the manager does not even look for their events. The zero Hooks
// calls nothing.
//
// Hooks is a plain value: New keeps its own copy, so setting a field in
// the Config after New changes nothing. The manager calls a hook without
// any of its locks held, on the goroutine of the call that caused the
// event; calls come from many goroutines, so a hook may run on several at
// once and must be safe for concurrent use. It must be quick, as its
// caller waits for it, and it may call the manager (Stats, for one). See
// the package doc for the order of the events and for panics.
type Hooks struct {
	// Admitted: a permit was granted (Acquire, TryAcquire, the
	// Transport), just before its caller gets it.
	Admitted func(Admitted)
	// Released: a permit was released (Release, ReleaseFeedback, the
	// Transport's response body closed or read to EOF, or a permit held
	// past MaxHold reclaimed), after its slots are free.
	Released func(Released)
	// DelayChanged: a response changed a scope's effective delay or
	// concurrency (AutoThrottle, backoff, rampup).
	DelayChanged func(DelayChanged)
	// Backoff: a response was a backoff signal for a scope (by default a
	// status of the scope's Backoff.Statuses, such as 429 or 503, or a
	// timeout, refused or reset connection).
	Backoff func(Backoff)
	// GateSet: a server-given wait (Retry-After, RateLimit) holds a scope
	// until a later time than before.
	GateSet func(GateSet)
	// Warning: the manager warned about its settings or its load, once
	// per kind (see Warning).
	Warning func(Warning)
}

// Admitted is the event of the Admitted hook: a granted permit. It is a
// value the hook owns (Scopes is its own slice), except URL, which is
// shared with the request: hooks may run on several goroutines at once, so
// they read URL and never change it. In the zero value Scopes and URL are
// nil, Context nil and Robots false.
type Admitted struct {
	// Scopes are the keys of the permit's scopes, sorted.
	Scopes []string
	// At is when the permit was granted, by the manager's clock.
	At time.Time
	// Waited is how long the caller waited, since Acquire (or TryAcquire,
	// or the Transport's RoundTrip) was called; zero or more.
	Waited time.Duration
	// URL is the URL of the request the permit was granted for: the
	// request's own *url.URL, not a copy, so read it but do not change
	// it. Nil when the request had none (scopes from WithScopes).
	URL *url.URL
	// Context is the request's context (http.Request.Context), never nil
	// in an event from the manager, so that a hook can tie the wait to
	// the caller's trace: an OpenTelemetry span event per wait (package
	// github.com/crawlerkit/throttle/metrics/otel, SpanEvents).
	Context context.Context
	// Robots is true for a robots.txt fetch the manager made itself
	// (throttle.RobotsConfig), false for the caller's requests. Stats
	// counts these in Counts.Robots only; a metric of pages skips them.
	Robots bool
}

// Released is the event of the Released hook: a released permit. It is a
// value the hook owns (Scopes is its own slice), except URL, which is
// shared with the request: hooks may run on several goroutines at once, so
// they read URL and never change it. In the zero value Scopes and URL are
// nil, Context nil and Robots false.
type Released struct {
	// Scopes are the keys of the permit's scopes, sorted.
	Scopes []string
	// Status is the response's status code; 0 without a response.
	Status int
	// Err is the error the request ended with, if any.
	Err error
	// Latency is how long the request took, as the scopes learned it.
	Latency time.Duration
	// URL is the URL of the request the permit was granted for: the
	// request's own *url.URL, not a copy, so read it but do not change
	// it. Nil when the request had none (scopes from WithScopes).
	URL *url.URL
	// Context is the request's context (http.Request.Context), never nil
	// in an event from the manager, as in Admitted.
	Context context.Context
	// Robots is true for a robots.txt fetch the manager made itself
	// (throttle.RobotsConfig), false for the caller's requests: a metric
	// of pages skips the events with Robots set, as Stats does
	// (Counts.Robots).
	Robots bool
}

// DelayChanged is the event of the DelayChanged hook: a response changed a
// scope's effective limits. The zero value is an empty event. Each hook
// call gets its own copy.
type DelayChanged struct {
	// Scope is the scope's key.
	Scope string
	// OldDelay and NewDelay are the scope's delay between starts before
	// and after the response.
	OldDelay, NewDelay time.Duration
	// OldConcurrency and NewConcurrency are the permits the scope admits
	// at once before and after the response.
	OldConcurrency, NewConcurrency int
	// Reason names the part that sets the delay now, in the words of
	// throttle.Reason's String: "delay" (the configured Delay),
	// "rampup" (rampup's rate), "robots" (robots.txt's Crawl-delay or
	// Request-rate), "autothrottle" (AutoThrottle's delay) or "backoff"
	// (the delay raised by backoff signals). A few fixed words, so it
	// suits a metric's label.
	Reason string
}

// Backoff is the event of the Backoff hook: a response was a backoff
// signal for a scope. The zero value is an empty event. Each hook call
// gets its own copy.
type Backoff struct {
	// Scope is the scope's key.
	Scope string
	// Status is the response's status code; 0 for a transport error.
	Status int
	// Delay is the scope's delay between starts after the signal.
	Delay time.Duration
	// Outage is true while the scope is probing an outage.
	Outage bool
	// Robots is true when the signal was the answer to a robots.txt
	// fetch the manager made itself: the scope backs off all the same,
	// but Counts.Signals does not count it.
	Robots bool
}

// GateSet is the event of the GateSet hook: a server-given wait
// (Retry-After, RateLimit) holds a scope. The zero value is an empty
// event. Each hook call gets its own copy.
type GateSet struct {
	// Scope is the scope's key.
	Scope string
	// Until is when the scope may start requests again, by the manager's
	// clock.
	Until time.Time
}

// Warning is the event of the Warning hook: a warning the manager also
// logs through throttle.Config.Logger, each kind once per manager: at New,
// settings that contradict each other or cannot take effect; at a scope's
// 100th released request, a Concurrency that had no effect; DelayedWarnThreshold
// callers waiting at once; a permit held past MaxHold. The warnings
// about robots.txt's delay against a configured scope and about a
// failing Store are only logged. The zero value is an empty event. Each hook call
// gets its own copy.
type Warning struct {
	// Message is the logged message (without the log's attributes),
	// starting "throttle: ".
	Message string
	// Scope is the scope's key; "" when the warning is not about one
	// scope.
	Scope string
}
