// This file holds the package's exported errors: the error variables and
// the error types, with their methods.

package throttle

import (
	"strconv"
	"time"
)

// WaitError is returned by Acquire when a caller stops waiting: its
// context ended, or its deadline falls before the earliest possible start.
// It wraps the context's error (context.DeadlineExceeded for a deadline
// that cannot be met).
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
