package throttle

import (
	"errors"
	"strconv"
	"time"
)

// ErrTooManyWaiting is matched (errors.Is) by *TooManyWaitingError.
var ErrTooManyWaiting = errors.New("throttle: too many callers waiting")

// TooManyWaitingError is returned by Acquire at once when Config.MaxWaiting
// callers already wait: the caller may drop the request or try later,
// instead of queueing without bound.
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

// refusing returns a *RefusingError if a scope of hs has refused for
// longer than Config.MaxRefusal; adm is the request's refusal.
func (m *ThrottlingManager) refusing(hs []held, now time.Time, adm Admission) error {
	if m.cfg.MaxRefusal <= 0 {
		return nil
	}
	for i := range hs {
		s := hs[i].s
		s.mu.Lock()
		since := s.counts.refusing
		s.mu.Unlock()
		if since != 0 && time.Duration(now.UnixNano()-since) > m.cfg.MaxRefusal {
			return &RefusingError{Scope: s.key, Since: time.Unix(0, since), RetryAt: adm.At}
		}
	}
	return nil
}

// countWaiting counts a caller that starts waiting: it warns the first
// time DelayedWarnThreshold wait at once, and refuses one beyond
// MaxWaiting.
func (m *ThrottlingManager) countWaiting() error {
	n := m.waiting.Add(1)
	if limit := m.cfg.MaxWaiting; limit > 0 && n > int64(limit) {
		m.waiting.Add(-1)
		return &TooManyWaitingError{Limit: limit}
	}
	if m.cfg.DelayedWarnThreshold > 0 && n >= int64(m.cfg.DelayedWarnThreshold) && !m.warned.Swap(true) {
		defer func() {
			if r := recover(); r != nil { // the Warning hook panicked: this caller is not waiting
				m.waiting.Add(-1)
				panic(r)
			}
		}()
		m.warn("throttle: many callers waiting at once", "", "waiting", n, "threshold", m.cfg.DelayedWarnThreshold)
	}
	return nil
}
