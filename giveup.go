package throttle

import (
	"fmt"
	"time"
)

// refusing returns a *WaitError with ErrScopeRefusing if a scope of hs has
// refused for longer than Config.MaxRefusal; adm is the request's refusal.
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
			return &WaitError{Scope: s.key, ReadyAt: adm.At, RefusingSince: time.Unix(0, since), Err: ErrScopeRefusing}
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
		return fmt.Errorf("%w (Config.MaxWaiting %d)", ErrTooManyWaiting, limit)
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
