package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrUnavailable is matched (errors.Is) by every *Error.
var ErrUnavailable = errors.New("throttle: store unavailable")

// An Error is returned by throttle's Acquire and TryAcquire when the Store
// failed and throttle.Config.StoreFallbackLocal is false (the
// default: fail closed). It wraps the
// store's error. The manager never makes one with a nil Err; Error panics
// on a zero Error. A plain value: copy it freely, but don't change it
// while another goroutine reads it.
type Error struct {
	Op  string // "admit" or "release"
	Err error
}

// Error names the operation and the store's error.
func (e *Error) Error() string { return "throttle: store " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the store's error.
func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *Error) Is(target error) bool { return target == ErrUnavailable }

// ErrPastDeadline is what a Store's Admit returns, itself or wrapped, when
// it refuses a call because the context's deadline has passed by the
// store's own clock (which may run a little ahead of the caller's): the
// caller gave up, the store did not fail. The manager returns a
// *throttle.WaitError wrapping context.DeadlineExceeded for it, and with
// StoreFallbackLocal does not take the store for down. It wraps
// context.DeadlineExceeded itself.
var ErrPastDeadline = fmt.Errorf("throttle: store: the caller's deadline has passed by the store's clock: %w", context.DeadlineExceeded)
