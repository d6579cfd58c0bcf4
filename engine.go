package throttle

import (
	"context"
	"time"
)

// An engine holds the scopes' admission state: this process's memory
// (localEngine, admit.go) or a Config.Store (storeEngine, shared.go).
// Acquire, TryAcquire and Release are one path for both: the path asks
// the engine engineAt picks (admit.go), and a caller that must wait
// waits in waitTurn, whichever engine it waits on. The policies are the
// same either way; with a Store they also send what they learned to it.
type engine interface {
	// try admits p at now if it can, without waiting; else it says why
	// and when to try again. errUseLocal: the Store failed, and the
	// local engine takes the request (StoreFallbackLocal).
	try(ctx context.Context, p *Permit, now time.Time) (bool, Admission, error)
	// acquire admits p, not before notBefore, waiting its turn
	// (waitTurn) as long as ctx allows; errUseLocal as for try.
	acquire(ctx context.Context, p *Permit, now, notBefore time.Time) (*Permit, error)
	// release ends p, admitted by this engine, with fb: the slots go
	// back and each scope's policy learns from fb.
	release(p *Permit, now time.Time, fb *Feedback)
}

// A turn is one caller's wait for admission on an engine: its place in
// the local scopes' queues, or its lease's turn in a Store.
type turn interface {
	// ask tries to admit the caller once. It returns true once admitted;
	// else the time to ask again at the latest (zero: only when woken),
	// or the error that ends the wait (a deadline that comes first, the
	// scope refusing, the Store failing).
	ask() (admitted bool, again time.Time, err error)
	// wake is signalled when asking again may admit the caller.
	wake() <-chan struct{}
	// woke runs after a wake-up or the time, before the next ask.
	woke()
	// cancelled leaves the turn when the caller's context ends with err,
	// and returns the error Acquire returns.
	cancelled(err error) error
}

// waitTurn is the admission loop of both engines: ask, and until
// admitted, wait for a wake-up, the time the answer named, or the end of
// ctx. It holds at most one timer.
func (m *ThrottlingManager) waitTurn(ctx context.Context, t turn) error {
	var timer Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		admitted, again, err := t.ask()
		if admitted || err != nil {
			return err
		}
		var timerC <-chan time.Time
		if !again.IsZero() {
			timerC = m.armUntil(&timer, again)
		} else if timer != nil {
			timer.Stop()
		}
		select {
		case <-ctx.Done():
			return t.cancelled(ctx.Err())
		case <-t.wake():
		case <-timerC:
			m.timerFired(again)
		}
		t.woke()
	}
}
