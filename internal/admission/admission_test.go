package admission

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

// TestClockBackNeverLengthensAWait (issue 22 item 7): a State whose clock
// goes back (store.Memory on a Clock set back, a wall clock stepped back)
// sees its recorded starts in the future. Each rule's wait is then what
// it was before the jump: the gap and the slot delay count from the
// previous start, the quota window from its start, and the gate keeps the
// time it had left; never the jump on top.
func TestClockBackNeverLengthensAWait(t *testing.T) {
	const (
		gap       = 2 * time.Second
		slotDelay = 3 * time.Second
		window    = 10 * time.Second
		gateWait  = 30 * time.Second
	)
	for _, back := range []time.Duration{time.Hour, time.Second, time.Millisecond} {
		for _, tc := range []struct {
			name string
			// run starts a request at t0 (cost 1), then checks another
			// at t0-back; want is how long it waits at most, why the rule.
			setup func(a *State, l *Limits) (quota int64)
			want  time.Duration
			why   Reason
		}{
			{"gap", func(a *State, l *Limits) int64 { l.Gap = gap; return 0 }, gap, Delay},
			{"slot delay", func(a *State, l *Limits) int64 { l.Conc, l.SlotDelay = 1, slotDelay; return 0 }, slotDelay, SlotDelay},
			{"quota window", func(a *State, l *Limits) int64 { return 1 }, window, Quota},
			{"gate", func(a *State, l *Limits) int64 {
				a.SetGate(t0.Add(time.Second + gateWait)) // a response 1 s after the start
				return 0
			}, time.Second + gateWait, Gate},
		} {
			a := &State{}
			l := Limits{Conc: 2, GapWhy: Delay}
			quota := tc.setup(a, &l)
			a.Start(t0, &l, quota, window, 1)
			a.Finish(0)
			now := t0.Add(-back)
			at, why := a.Check(now, &l, quota, window, 1)
			if why != tc.why || at.Sub(now) > tc.want {
				t.Errorf("%s, clock back %v: waits %v (%v), want at most %v (%v)", tc.name, back, at.Sub(now), why, tc.want, tc.why)
			}
			// And the next start is the last one: the clock goes on
			// from now, with nothing left of the jump.
			a.Start(at, &l, quota, window, 1)
			a.Finish(0)
			if next, _ := a.Check(at, &l, quota, window, 1); next.Sub(at) > max(tc.want, window) {
				t.Errorf("%s, clock back %v: then waits %v", tc.name, back, next.Sub(at))
			}
		}
	}
}

// TestClockForwardUnchanged: a clock that only goes forward sees exact
// waits, the same as before the clamp.
func TestClockForwardUnchanged(t *testing.T) {
	a := &State{}
	l := Limits{Conc: 2, Gap: 2 * time.Second, SlotDelay: time.Second, GapWhy: Delay}
	a.Start(t0, &l, 0, 0, 1)
	a.SetGate(t0.Add(5 * time.Second))
	l.SlotDelay = 3 * time.Second
	if at, why := a.Check(t0.Add(time.Second), &l, 0, 0, 1); why != Gate || !at.Equal(t0.Add(5*time.Second)) {
		t.Fatalf("got %v %v, want the gate at t0+5s", at.Sub(t0), why)
	}
	a.Gate = time.Time{}
	l.SlotDelay = 0
	if at, why := a.Check(t0.Add(time.Second), &l, 0, 0, 1); why != Delay || !at.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("got %v %v, want the gap at t0+2s", at.Sub(t0), why)
	}
}

// BenchmarkCheck: one admission check and start of a scope with a delay,
// the hot path's share of admission.
func BenchmarkCheck(b *testing.B) {
	a := &State{}
	l := Limits{Conc: 1, Gap: time.Second, GapWhy: Delay}
	now := t0
	for b.Loop() {
		if _, why := a.Check(now, &l, 0, 0, 1); why == None {
			a.Start(now, &l, 0, 0, 1)
			a.Finish(-1)
		}
		now = now.Add(300 * time.Millisecond)
	}
}
