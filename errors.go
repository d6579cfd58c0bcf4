// This file holds the package's exported errors: the error variables, in
// one block, and the error types, with their methods.

package throttle

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// The package's errors, each the kind of a failure: test for one with
// errors.Is, since most come wrapped or inside an error type that holds
// the details (errors.As).
var (
	// Errors of scopers, and of Acquire, TryAcquire and the Transport
	// for a request that cannot be scoped: a nil request, a URL without
	// a host or with an unusable one, a Scoper that gave no scope, a
	// scope with an empty key, more than 32 scopes for one request, a
	// negative Scope.Cost.
	ErrNilRequest    = errors.New("throttle: nil request")
	ErrNoHost        = errors.New("throttle: request URL has no host")
	ErrInvalidHost   = errors.New("throttle: invalid host")
	ErrNoScope       = errors.New("throttle: request has no scope")
	ErrEmptyScopeKey = errors.New("throttle: empty scope key")
	ErrTooManyScopes = fmt.Errorf("throttle: more than %d scopes for one request", maxScopesPerRequest)
	ErrNegativeCost  = errors.New("throttle: negative scope cost")

	// ErrInvalidConfig is wrapped by every *ConfigError.
	ErrInvalidConfig = errors.New("throttle: invalid config")

	// ErrTooManyWaiting is wrapped by the error Acquire returns at once
	// when Config.MaxWaiting callers already wait, e.g. "throttle: too
	// many callers waiting (Config.MaxWaiting 100)": the caller may drop
	// the request or try later, instead of queueing without bound. It
	// comes without an error type: the only detail, the limit, is the
	// caller's own Config.MaxWaiting.
	ErrTooManyWaiting = errors.New("throttle: too many callers waiting")

	// ErrScopeRefusing is the Err of the *WaitError that Acquire and
	// TryAcquire return at once when a scope of the request has answered
	// nothing but backoff signals for longer than Config.MaxRefusal and
	// the request would have to wait: WaitError.Scope names the scope,
	// ReadyAt says when the request could start, RefusingSince since
	// when the scope refuses.
	ErrScopeRefusing = errors.New("throttle: scope refuses")

	// ErrDisallowed is matched (errors.Is) by *DisallowedError.
	ErrDisallowed = errors.New("throttle: disallowed by robots.txt")

	// ErrHeldTooLong is the error of the feedback a permit is released
	// with when Config.MaxHold reclaims it.
	ErrHeldTooLong = errors.New("throttle: permit held longer than MaxHold, reclaimed")

	// ErrImport is wrapped by every error Import returns about its input.
	ErrImport = errors.New("throttle: cannot import learned state")

	// ErrQueueClosed is returned by a ReadyQueue's Push, Pop and TryPop
	// once the queue is closed (ReadyQueue.Close), by a Pop blocked at
	// the time too.
	ErrQueueClosed = errors.New("throttle: ready queue closed")
)

// A ConfigError names the configuration field that is invalid, the value
// it refused and why. The zero value names no field; it still matches
// ErrInvalidConfig. A plain value: copy it freely, but don't change it
// while another goroutine reads it.
type ConfigError struct {
	Field  string // e.g. `Scopes["api"].Delay`
	Reason string // e.g. "must be >= 0"
	// Value is the value refused, e.g. -1s (a time.Duration); nil when
	// the field holds no number, bool, string or duration to show (a
	// Scopes key, a list, a Store).
	Value any

	hint string // how to fix it, when the field was left at zero
}

// Error names the field, the value refused and the reason, e.g.
// `throttle: config Scopes["api"].Delay = -1s: must be >= 0`; for a field
// that New found at zero where DefaultConfig sets a value, it adds how to
// fix it: `throttle: config GlobalConcurrency = 0: must be >= 1
// (DefaultConfig() has 16: start from throttle.DefaultConfig() and change
// what you need)`.
func (e *ConfigError) Error() string {
	s := "throttle: config " + e.Field
	switch v := e.Value.(type) {
	case nil:
	case string:
		s += " = " + strconv.Quote(v)
	default:
		s += fmt.Sprintf(" = %v", v)
	}
	s += ": " + e.Reason
	if e.hint != "" {
		s += " (" + e.hint + ")"
	}
	return s
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// WaitError is returned by Acquire when a request does not start because
// waiting for it ended or would be in vain; Err, which it wraps, says
// which:
//
//   - the context's error: the caller's context ended while it waited;
//   - context.DeadlineExceeded, at once: the context's deadline falls
//     before the earliest possible start;
//   - ErrScopeRefusing, at once (from TryAcquire too): Scope has answered
//     nothing but backoff signals since RefusingSince, for longer than
//     Config.MaxRefusal. A crawler can drop the request or reschedule it
//     for ReadyAt instead of parking a worker for hours; the scope's own
//     probes still go through when their time comes, so it is noticed
//     when the site answers again.
//
// One type serves the three, as they tell the same things: which scope
// held the request back and when it could start; errors.Is on the error
// tells them apart. A caller that stops waiting consumes nothing and
// holds no slot.
//
// The manager never makes one with a nil Err; Error panics on a zero
// WaitError. A plain value: copy it freely, but don't change it while
// another goroutine reads it.
type WaitError struct {
	Scope   string    // the scope that held the request back, if known
	Reason  Reason    // why it waited, if known
	ReadyAt time.Time // the earliest start, if known
	// RefusingSince is, with ErrScopeRefusing, the first backoff signal
	// of Scope since it last answered otherwise; zero otherwise.
	RefusingSince time.Time
	Err           error
}

// Error says which scope held the request back, why, and when it could
// have started; for a refusing scope, since when it refuses.
func (e *WaitError) Error() string {
	if e.Err == ErrScopeRefusing {
		msg := "throttle: scope " + strconv.Quote(e.Scope) + " has answered only backoff signals since " + e.RefusingSince.Format(time.RFC3339)
		if !e.ReadyAt.IsZero() {
			msg += "; worth trying again at " + e.ReadyAt.Format(time.RFC3339)
		}
		return msg
	}
	msg := "throttle: stopped waiting"
	if e.Scope != "" {
		msg += " for scope " + strconv.Quote(e.Scope)
	}
	if e.Reason != ReasonNone {
		msg += " (" + e.Reason.String() + ")"
	}
	if !e.ReadyAt.IsZero() {
		msg += " ready at " + e.ReadyAt.Format(time.RFC3339Nano)
	}
	return msg + ": " + e.Err.Error()
}

// Unwrap returns Err.
func (e *WaitError) Unwrap() error { return e.Err }

// ScopeManagerPanic is what Acquire, Release and SetScopeConfig panic with
// when a custom ScopeManager panicked: the scope, the method and the value,
// raised again after the manager released its locks and the request's
// slots. It is a panic value, not an error any call returns, and a type
// of its own so that a recover still gets the ScopeManager's own Value.
// The zero value names no scope, method or value. A plain value: copy it
// freely, but don't change it while another goroutine reads it.
type ScopeManagerPanic struct {
	Scope  string
	Method string
	Value  any
}

// Error describes the panic.
func (p *ScopeManagerPanic) Error() string {
	return fmt.Sprintf("throttle: the ScopeManager of scope %q panicked in %s: %v", p.Scope, p.Method, p.Value)
}

// DisallowedError is returned by Acquire and the Transport under
// RobotsConfig.Enforce for a URL that its origin's robots.txt disallows
// for the user agent, or whose origin's robots.txt could not be fetched
// (Unreachable). It is returned before the request is sent, holding no
// slot; through an http.Client it comes wrapped in a *url.Error, which
// errors.Is and errors.As see through. Dropping the URL is the answer to
// a Disallow; an Unreachable origin is worth trying again at RetryAt. It
// is a type of its own, not a WaitError: no scope held the request back,
// robots.txt refused its URL, and its fields say which rules refused it.
//
// The manager makes it and never changes it after returning it, so any
// goroutine may read it (URL is the request's, shared: read it only). The
// zero value is no refusal the manager would make; its Error still reads.
type DisallowedError struct {
	// URL is the refused request's URL: the request's own, not a copy.
	URL *url.URL
	// Origin is the origin whose robots.txt refused it, e.g.
	// "https://shop.example:8443".
	Origin string
	// UserAgent is what was matched against robots.txt's groups:
	// RobotsConfig.UserAgent, else the product token of the request's
	// User-Agent header; "" means only the "*" group applied.
	UserAgent string
	// Unreachable says robots.txt could not be fetched (a 5xx, a network
	// error, a timeout) and no earlier copy is cached: RFC 9309 2.3.1.4
	// requires assuming complete disallow then, until a fetch succeeds.
	Unreachable bool
	// RetryAt is, when Unreachable, when robots.txt will be fetched again
	// (by the first request of the origin after it); zero when unknown.
	RetryAt time.Time
}

// Error names the URL, the origin and the agent, or says the origin's
// robots.txt is unreachable.
func (e *DisallowedError) Error() string {
	agent := strconv.Quote(e.UserAgent)
	if e.UserAgent == "" {
		agent = `"*"`
	}
	u := ""
	if e.URL != nil {
		u = e.URL.Redacted()
	}
	if e.Unreachable {
		msg := "throttle: robots.txt of " + e.Origin + " is unreachable, which disallows every URL (RFC 9309), " + u
		if !e.RetryAt.IsZero() {
			msg += " included; fetched again after " + e.RetryAt.Format(time.RFC3339)
		} else {
			msg += " included"
		}
		return msg
	}
	return "throttle: robots.txt of " + e.Origin + " disallows " + u + " for user agent " + agent
}

// Is reports whether target is ErrDisallowed.
func (e *DisallowedError) Is(target error) bool { return target == ErrDisallowed }
