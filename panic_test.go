package throttle

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle/hooks"
	"github.com/stretchr/testify/require"
)

func mustPanic(t *testing.T, f func()) (v any) {
	t.Helper()
	defer func() { v = recover() }()
	f()
	t.Fatal("no panic")
	return nil
}

// panicky wraps the default policy and panics in the method named by
// when, while armed.
type panicky struct {
	ScopeManager
	armed *atomic.Value // string: the method to panic in
}

func (p *panicky) boom(method string) {
	if v, _ := p.armed.Load().(string); v == method {
		panic("boom in " + method)
	}
}
func (p *panicky) Admit(now time.Time, cost int64) Admission {
	p.boom("Admit")
	return p.ScopeManager.Admit(now, cost)
}
func (p *panicky) Start(now time.Time, cost int64) Ticket {
	p.boom("Start")
	return p.ScopeManager.Start(now, cost)
}
func (p *panicky) Finish(now time.Time, t Ticket, fb *Feedback) {
	p.ScopeManager.Finish(now, t, fb)
	p.boom("Finish")
}
func (p *panicky) Idle(now time.Time) Idleness {
	p.boom("Idle")
	return p.ScopeManager.Idle(now)
}
func (p *panicky) SetConfig(now time.Time, cfg ScopeConfig) {
	p.boom("SetConfig")
	p.ScopeManager.SetConfig(now, cfg)
}

// TestPanickingScopeManager: a custom ScopeManager that panics in any of
// its methods leaves no lock held and no slot taken; the panic reaches the
// caller as a *ScopeManagerPanic; the manager keeps working.
func TestPanickingScopeManager(t *testing.T) {
	var armed atomic.Value
	armed.Store("")
	cfg := DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, Jitter{}
	cfg.Scopes = map[string]ScopeConfig{"bad": cfg.Default}
	sc := cfg.Scopes["bad"]
	sc.NewManager = func(p ScopeParams) ScopeManager {
		return &panicky{ScopeManager: NewDefaultScopeManager(p), armed: &armed}
	}
	cfg.Scopes["bad"] = sc
	m := newManager(t, cfg)
	ctx := context.Background()
	both := get(t, "http://good/")
	both = both.WithContext(WithScopeKeys(both.Context(), "good", "bad"))
	good := get(t, "http://good/")

	for _, method := range []string{"Admit", "Start", "Finish", "SetConfig"} {
		armed.Store(method)
		v := mustPanic(t, func() {
			if method == "SetConfig" {
				m.SetScopeConfig("bad", cfg.Default)
				return
			}
			p, err := m.Acquire(ctx, both)
			require.NoError(t, err)
			p.Release(&http.Response{StatusCode: 200}, nil)
		})
		var pv *ScopeManagerPanic
		require.ErrorAs(t, v.(error), &pv, method)
		require.Equal(t, "bad", pv.Scope)
		require.Equal(t, method, pv.Method)
		armed.Store("")
		// No lock held, no slot taken: both scopes admit at once, from
		// another goroutine too.
		done := make(chan error, 1)
		go func() {
			p, err := m.Acquire(ctx, both)
			if err == nil {
				p.Release(&http.Response{StatusCode: 200}, nil)
			}
			done <- err
		}()
		select {
		case err := <-done:
			require.NoError(t, err, method)
		case <-time.After(10 * time.Second):
			t.Fatalf("after a panic in %s the scopes are stuck", method)
		}
		p, _, err := m.TryAcquire(good)
		require.NoError(t, err)
		require.NotNil(t, p, "after a panic in %s good's slot is taken", method)
		p.Release(nil, nil)
	}
	require.Zero(t, m.Stats().InFlight)
}

// TestPanickingUserCode: a Scoper, a FeedbackFunc, a base RoundTripper and
// hooks that panic leave no slot taken and no caller counted as waiting.
func TestPanickingUserCode(t *testing.T) {
	var scoperPanics, feedbackPanics, admittedPanics atomic.Bool
	cfg := DefaultConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = 0, 0, Jitter{}
	cfg.Scoper = func(r *http.Request) ([]Scope, error) {
		if scoperPanics.Load() {
			panic("scoper")
		}
		return HostScope(r)
	}
	cfg.Feedback = func(now time.Time, resp *http.Response, err error) Feedback {
		if feedbackPanics.Load() {
			panic("feedback")
		}
		return DefaultFeedback(now, resp, err)
	}
	cfg.Hooks.Admitted = func(hooks.Admitted) {
		if admittedPanics.Load() {
			panic("admitted")
		}
	}
	m := newManager(t, cfg)
	ctx := context.Background()
	req := get(t, "http://h.test/")
	free := func(what string) {
		t.Helper()
		p, _, err := m.TryAcquire(req)
		require.NoError(t, err, what)
		require.NotNil(t, p, "%s: the slot is still taken", what)
		p.Release(nil, nil)
		require.Zero(t, m.Stats().InFlight, what)
		require.Zero(t, m.Waiting(), what)
	}

	scoperPanics.Store(true)
	require.Equal(t, "scoper", mustPanic(t, func() { m.Acquire(ctx, req) }))
	scoperPanics.Store(false)
	free("Scoper")

	p, err := m.Acquire(ctx, req)
	require.NoError(t, err)
	feedbackPanics.Store(true)
	require.Equal(t, "feedback", mustPanic(t, func() { p.Release(&http.Response{StatusCode: 200}, nil) }))
	feedbackPanics.Store(false)
	free("FeedbackFunc")

	rt := m.Transport(roundTripFunc(func(*http.Request) (*http.Response, error) { panic("base transport") }))
	require.Equal(t, "base transport", mustPanic(t, func() { rt.RoundTrip(req) }))
	free("base RoundTripper")
	feedbackPanics.Store(true)
	rt = m.Transport(roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Request: r}, nil
	}))
	require.Equal(t, "feedback", mustPanic(t, func() { rt.RoundTrip(req) }))
	feedbackPanics.Store(false)
	free("FeedbackFunc in the Transport")

	admittedPanics.Store(true)
	require.Equal(t, "admitted", mustPanic(t, func() { m.Acquire(ctx, req) }))
	admittedPanics.Store(false)
	free("Admitted hook")
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestPanickingReleasedHookStillWakesPop: a Released hook that panics does
// not keep the release from the ReadyQueue: a Pop waiting for the slot gets
// it at once, and the hook's panic reaches Release's caller.
func TestPanickingReleasedHookStillWakesPop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panics atomic.Bool
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Hooks.Released = func(e hooks.Released) {
			// Only the held permit's release panics: Pop's goroutine,
			// woken by it, may release its own before panics is cleared.
			if panics.Load() && e.URL != nil && e.URL.Path == "/held" {
				panic("released")
			}
		}
		m := newManager(t, cfg)
		q := NewReadyQueue(m)
		p, err := m.Acquire(context.Background(), get(t, "http://a/held"))
		require.NoError(t, err)
		require.NoError(t, q.Push(get(t, "http://a/next"), 0))
		done := make(chan string, 1)
		go func() {
			req, p2, err := q.Pop(context.Background())
			if err != nil {
				done <- err.Error()
				return
			}
			p2.Release(nil, nil)
			done <- req.URL.String()
		}()
		synctest.Wait() // Pop waits for the slot
		panics.Store(true)
		require.Equal(t, "released", mustPanic(t, func() { p.Release(nil, nil) }))
		panics.Store(false)
		synctest.Wait()
		select {
		case got := <-done:
			require.Equal(t, "http://a/next", got)
		default:
			t.Fatal("Pop still waits: the release did not reach the ReadyQueue")
		}
	})
}
