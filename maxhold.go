package throttle

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// holds lists the permits held, oldest first, when Config.MaxHold is set:
// a body that never ends (a tarpit) would otherwise hold its slots until
// the caller gives up. Nothing runs in the background: the oldest start is
// checked on each Acquire and TryAcquire, and a caller waiting for a slot
// sets its timer to the oldest permit's deadline.
type holds struct {
	mu         sync.Mutex
	head, tail *Permit
	oldest     atomic.Int64 // Unix ns of head's acquisition; 0: none
}

func (h *holds) add(p *Permit, now time.Time) {
	e := p.extension()
	h.mu.Lock()
	e.hlocal = now.UnixNano()
	e.hprev, e.hnext = h.tail, nil
	if h.tail != nil {
		h.tail.ext.hnext = p
	} else {
		h.head = p
		h.oldest.Store(e.hlocal)
	}
	h.tail = p
	e.hlisted = true
	h.mu.Unlock()
}

func (h *holds) remove(p *Permit) {
	h.mu.Lock()
	h.unlink(p)
	h.mu.Unlock()
}

func (h *holds) unlink(p *Permit) {
	e := p.ext
	if e == nil || !e.hlisted {
		return
	}
	if e.hprev != nil {
		e.hprev.ext.hnext = e.hnext
	} else {
		h.head = e.hnext
	}
	if e.hnext != nil {
		e.hnext.ext.hprev = e.hprev
	} else {
		h.tail = e.hprev
	}
	e.hprev, e.hnext, e.hlisted = nil, nil, false
	if h.head != nil {
		h.oldest.Store(h.head.ext.hlocal)
	} else {
		h.oldest.Store(0)
	}
}

// subscribeMaxHold subscribes MaxHold to the seam (observers.go) when
// Config.MaxHold is set: reclaim before each admission, list each permit
// granted and unlist it when released, and give a caller waiting for a
// release the oldest permit's deadline.
func (m *ThrottlingManager) subscribeMaxHold(o *observers) {
	if m.cfg.MaxHold <= 0 {
		return
	}
	o.beforeAdmit = append(o.beforeAdmit, m.reclaim)
	o.admitted = append(o.admitted, func(p *Permit, _ time.Time) { m.holds.add(p, m.clock.Now()) })
	o.releasing = append(o.releasing, m.unhold)
	o.freedAt = append(o.freedAt, m.holdDeadline)
}

// unhold takes p off the list of held permits, if it is on it. Whether it
// is is read under the list's lock: reclaim may be unlinking p at the same
// moment (it lost the race to release p, but took it off the list).
func (m *ThrottlingManager) unhold(p *Permit) {
	if p.ext != nil {
		m.holds.remove(p)
	}
}

// deadline returns when the oldest permit is due to be reclaimed (zero:
// none held).
func (m *ThrottlingManager) holdDeadline() time.Time {
	if o := m.holds.oldest.Load(); o != 0 {
		return time.Unix(0, o).Add(m.cfg.MaxHold)
	}
	return time.Time{}
}

// reclaim releases, as timeouts, the permits held longer than MaxHold at
// now, and warns once. Called with no lock held. A hook that panics in a
// release (Released) or in the warning keeps no permit from being
// released: they all are, then the first panic goes on.
func (m *ThrottlingManager) reclaim(now time.Time) {
	o := m.holds.oldest.Load()
	if o == 0 || time.Duration(now.UnixNano()-o) < m.cfg.MaxHold {
		return
	}
	var due []*Permit
	h := &m.holds
	h.mu.Lock()
	for p := h.head; p != nil && time.Duration(now.UnixNano()-p.ext.hlocal) >= m.cfg.MaxHold; {
		next := p.ext.hnext
		h.unlink(p)
		if p.released.CompareAndSwap(false, true) {
			due = append(due, p)
		}
		p = next
	}
	h.mu.Unlock()
	var ps panics
	for _, p := range due {
		ps.call(func() {
			fb := Feedback{Err: ErrHeldTooLong, Timeout: true, Backoff: true, Latency: m.cfg.MaxHold}
			m.release(p, now, &fb)
		})
	}
	if len(due) > 0 && !m.warnedHold.Swap(true) {
		ps.call(func() {
			m.warn(fmt.Sprintf("throttle: a permit was held longer than MaxHold (%v) and its slots were reclaimed; "+
				"a response body that never ends holds a slot until the caller closes it", m.cfg.MaxHold), "")
		})
	}
	ps.raise()
}
