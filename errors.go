// This file holds the package's exported errors: the error variables and
// the error types, with their methods.

package throttle

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// Errors returned by scopers and by Acquire for requests that cannot be scoped.
var (
	ErrNilRequest    = errors.New("throttle: nil request")
	ErrNoHost        = errors.New("throttle: request URL has no host")
	ErrInvalidHost   = errors.New("throttle: invalid host")
	ErrNoScope       = errors.New("throttle: request has no scope")
	ErrEmptyScopeKey = errors.New("throttle: empty scope key")
	ErrTooManyScopes = fmt.Errorf("throttle: more than %d scopes for one request", MaxScopesPerRequest)
	ErrNegativeCost  = errors.New("throttle: negative scope cost")
)

// ErrInvalidConfig is wrapped by every *ConfigError.
var ErrInvalidConfig = errors.New("throttle: invalid config")

// A ConfigError names the configuration field that is invalid and why. The
// zero value names no field; it still matches ErrInvalidConfig. A plain
// value: copy it freely, but don't change it while another goroutine reads
// it.
type ConfigError struct {
	Field  string // e.g. `Scopes["api"].Delay`
	Reason string // e.g. "must be >= 0"
}

// Error names the field and the reason, e.g.
// `throttle: Scopes["api"].Delay: must be >= 0`.
func (e *ConfigError) Error() string { return "throttle: " + e.Field + ": " + e.Reason }

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// WaitError is returned by Acquire when a caller stops waiting: its
// context ended, or its deadline falls before the earliest possible start.
// It wraps the context's error (context.DeadlineExceeded for a deadline
// that cannot be met). The manager never makes one with a nil Err; Error
// panics on a zero WaitError. A plain value: copy it freely, but don't
// change it while another goroutine reads it.
type WaitError struct {
	Scope   string    // the scope that held the request back, if known
	Reason  Reason    // why it waited
	ReadyAt time.Time // the earliest start, if known
	Err     error
}

// Error says which scope held the request back, why, and when it could
// have started.
func (e *WaitError) Error() string {
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

// Unwrap returns the context's error.
func (e *WaitError) Unwrap() error { return e.Err }

// ErrTooManyWaiting is matched (errors.Is) by *TooManyWaitingError.
var ErrTooManyWaiting = errors.New("throttle: too many callers waiting")

// TooManyWaitingError is returned by Acquire at once when Config.MaxWaiting
// callers already wait: the caller may drop the request or try later,
// instead of queueing without bound. Acquire never returns one with Limit 0
// (MaxWaiting 0 means no cap); a zero value still matches
// ErrTooManyWaiting. A plain value: copy it freely, but don't change it
// while another goroutine reads it.
type TooManyWaitingError struct {
	Limit int
}

// Error says how many may wait.
func (e *TooManyWaitingError) Error() string {
	return "throttle: " + strconv.Itoa(e.Limit) + " callers already wait (Config.MaxWaiting)"
}

// Is reports whether target is ErrTooManyWaiting.
func (e *TooManyWaitingError) Is(target error) bool { return target == ErrTooManyWaiting }

// ErrScopeRefusing is matched (errors.Is) by *RefusingError.
var ErrScopeRefusing = errors.New("throttle: scope refuses")

// RefusingError is returned by Acquire and TryAcquire at once when a scope
// of the request has answered nothing but backoff signals for longer than
// Config.MaxRefusal and the request would have to wait: a crawler can
// drop or reschedule the request instead of parking a worker for hours.
// The scope's own probes still go through when their time comes, so it is
// noticed when the site answers again.
//
// The zero value names no scope; it still matches ErrScopeRefusing. A plain
// value: copy it freely, but don't change it while another goroutine reads
// it.
type RefusingError struct {
	Scope   string    // the refusing scope
	Since   time.Time // its first signal since it last answered otherwise
	RetryAt time.Time // when the request could start, if known
}

// Error names the scope, since when it refuses and when to try again.
func (e *RefusingError) Error() string {
	msg := "throttle: scope " + strconv.Quote(e.Scope) + " has answered only backoff signals since " + e.Since.Format(time.RFC3339)
	if !e.RetryAt.IsZero() {
		msg += "; worth trying again at " + e.RetryAt.Format(time.RFC3339)
	}
	return msg
}

// Is reports whether target is ErrScopeRefusing.
func (e *RefusingError) Is(target error) bool { return target == ErrScopeRefusing }

// ScopeManagerPanic is what Acquire, Release and SetScopeConfig panic with
// when a custom ScopeManager panicked: the scope, the method and the value,
// raised again after the manager released its locks and the request's
// slots. The zero value names no scope, method or value. A plain value:
// copy it freely, but don't change it while another goroutine reads it.
type ScopeManagerPanic struct {
	Scope  string
	Method string
	Value  any
}

// Error describes the panic.
func (p *ScopeManagerPanic) Error() string {
	return fmt.Sprintf("throttle: the ScopeManager of scope %q panicked in %s: %v", p.Scope, p.Method, p.Value)
}

// ErrDisallowed is matched (errors.Is) by *DisallowedError.
var ErrDisallowed = errors.New("throttle: disallowed by robots.txt")

// DisallowedError is returned by Acquire and the Transport under
// RobotsConfig.Enforce for a URL that its origin's robots.txt disallows
// for the user agent, or whose origin's robots.txt could not be fetched
// (Unreachable). It is returned before the request is sent, holding no
// slot; through an http.Client it comes wrapped in a *url.Error, which
// errors.Is and errors.As see through. Dropping the URL is the answer to
// a Disallow; an Unreachable origin is worth trying again at RetryAt.
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

// ErrHeldTooLong is the error of the feedback a permit is released with
// when Config.MaxHold reclaims it.
var ErrHeldTooLong = errors.New("throttle: permit held longer than MaxHold, reclaimed")

// ErrImport is wrapped by every error Import returns about its input.
var ErrImport = errors.New("throttle: cannot import learned state")
