package throttle

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// Transport is an http.RoundTripper that sends every request through a
// ThrottlingManager. Make one with ThrottlingManager.Transport.
//
// It acquires a permit with the request's context before sending, and
// releases it when the response body is closed or read to EOF (at once
// for a response without a body, or on a transport error), with the
// response's feedback. Latency is measured with net/http/httptrace from
// the moment a connection is obtained to the first response byte, as
// Scrapy measures it; a base RoundTripper that reports no connection (a
// fake one in tests) gets the time RoundTrip took.
//
// It follows the RoundTripper contract: it is safe for concurrent use, it
// never modifies the request (the trace goes on a shallow copy), it closes
// the request body when it returns early, and it returns err == nil
// whenever a response came back, a 429 included. An http.Client calls it
// once per redirect hop, so each hop is throttled; scopes attached to the
// context with WithScopes persist across hops. A Retry-After on a 3xx
// response delays the hop to its Location (RFC 9110 10.2.3), capped at the
// default scope's Backoff.RedirectMaxDelay.
//
// A body that never ends (a server that sends its headers, then trickles
// the body or stalls) holds the permit's slots for as long as the caller
// keeps it open. The slots are freed when the caller closes the body, or
// when a Read on it fails: cancelling the request's context, its deadline
// or http.Client.Timeout makes a Read in progress fail at once. A caller
// that cancels while not reading frees the slots at its next Read or at
// Close. A caller that never closes a response body keeps the permit's
// slots. The zero value is not usable: RoundTrip panics.
type Transport struct {
	m    *ThrottlingManager
	base http.RoundTripper

	redirMu sync.Mutex
	redirN  atomic.Int32
	redir   map[string]time.Time // redirect target URL -> not before
}

var _ http.RoundTripper = (*Transport)(nil)

// maxRedirectGates bounds the remembered Retry-After of redirects.
const maxRedirectGates = 1024

// Transport returns an http.RoundTripper that throttles requests through
// m and sends them with base (nil means http.DefaultTransport).
func (m *ThrottlingManager) Transport(base http.RoundTripper) *Transport {
	if base == nil {
		base = http.DefaultTransport
	}
	return &Transport{m: m, base: base}
}

// CloseIdleConnections closes the base RoundTripper's idle connections
// when it has that method (as *http.Transport does), so that
// http.Client.CloseIdleConnections reaches it through the throttle.
func (t *Transport) CloseIdleConnections() {
	type closeIdler interface{ CloseIdleConnections() }
	if ci, ok := t.base.(closeIdler); ok {
		ci.CloseIdleConnections()
	}
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req == nil {
		return nil, ErrNilRequest
	}
	ctx := req.Context()
	r := new(roundTrip)
	p, err := t.m.acquire(t.admission(ctx), req, t.redirectGate(req), &r.p)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	clock := t.m.clock
	lt := newLatencyTrace(clock)
	r.req = *req.WithContext(lt.context(ctx, &r.ctx)) // a copy on the stack, then in r
	traced := &r.req
	defer func() {
		// The base RoundTripper or the FeedbackFunc panicked: give the
		// slots back (doneAt does nothing if they were), then go on.
		if r := recover(); r != nil {
			p.doneAt(clock.Now(), Feedback{NoAdjust: true, Err: errPanicked}, false)
			panic(r)
		}
	}()
	start := p.acquired() // the clock's reading at admission, taken just now
	if t.m.obs.acquire || p.ext != nil && p.ext.shared {
		// Observers ran since (a hook may take its time), or the
		// acquired time is a Store's: read the local clock.
		start = clock.Now()
	}
	resp, err := t.base.RoundTrip(traced)
	now := clock.Now()
	if err != nil {
		var fb Feedback
		t.feedback(&fb, now, nil, err)
		fb.Latency = lt.latency(start, now)
		p.done(now, &fb, false)
		return nil, err // lt is not reused: a hook may still come (see latencyTrace)
	}
	if resp.Request == traced {
		resp.Request = req
	}
	var fb Feedback
	t.feedback(&fb, now, resp, nil)
	fb.Latency = lt.latency(start, now)
	lt.reuse()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && fb.HasWait && fb.Wait > 0 {
		t.setRedirectGate(req, resp, now.Add(min(fb.Wait, t.m.cfg.Default.Backoff.RedirectMaxDelay)))
	}
	if resp.Body == nil || resp.Body == http.NoBody {
		p.done(now, &fb, false)
		return resp, nil
	}
	resp.Body = &releasingBody{rc: resp.Body, p: p, fb: fb}
	return resp, nil
}

// feedback fills *fb, zero, with the manager's FeedbackFunc on a round
// trip's outcome; the default one fills it in place, with no copy of the
// Feedback returned (see Permit.Release).
func (t *Transport) feedback(fb *Feedback, now time.Time, resp *http.Response, err error) {
	if t.m.customFeedback {
		*fb = t.m.feedback(now, resp, err)
		return
	}
	defaultFeedback(fb, now, resp, err)
}

// admission returns the context a request with the context ctx is
// admitted with: ctx itself, or, when the robots.txt fetch the request may
// start goes through t (fetchesVia), ctx carrying t (viaTransport), so
// acquire needs no Transport. The request is sent with its own context.
func (t *Transport) admission(ctx context.Context) context.Context {
	if !t.m.robotsTxt.fetchesVia() {
		return ctx
	}
	return &viaTransport{Context: ctx, t: t}
}

// latencyTrace records the httptrace times of one round trip: when the
// transport got its connection and the response's first byte. Its hooks
// may run on the transport's goroutines. Both come before the base
// RoundTrip returns a response, so a latencyTrace is reused once
// RoundTrip has read it (reuse): a round trip allocates neither it nor
// its two hooks. After an error it is left to the garbage collector: an
// HTTP/2 response that arrives after its request gave up still calls
// GotFirstResponseByte.
type latencyTrace struct {
	conn, first atomic.Int64 // UnixNano; 0 when not seen
	clock       Clock
	hooks       httptrace.ClientTrace // its closures made once, reading the fields above
	// traced is httptrace.WithClientTrace(context.Background(), &hooks),
	// made once: the part of a request's traced context that answers
	// the trace (tracedContext).
	traced context.Context
}

var latencyTraces = sync.Pool{New: func() any {
	lt := new(latencyTrace)
	lt.hooks.GotConn = func(httptrace.GotConnInfo) { lt.conn.Store(lt.clock.Now().UnixNano()) }
	lt.hooks.GotFirstResponseByte = func() { lt.first.Store(lt.clock.Now().UnixNano()) }
	lt.traced = httptrace.WithClientTrace(context.Background(), &lt.hooks)
	return lt
}}

// context returns ctx with lt's hooks as its ClientTrace, as
// httptrace.WithClientTrace(ctx, &lt.hooks) does. When ctx carries a
// ClientTrace of the caller's, it is that: WithClientTrace composes the
// two, on a copy of the hooks (composing changes them, and lt is reused).
// Otherwise it is into, a zero tracedContext, filled: without WithValue's
// checks and its allocation.
func (lt *latencyTrace) context(ctx context.Context, into *tracedContext) context.Context {
	if httptrace.ContextClientTrace(ctx) != nil {
		hooks := lt.hooks
		return httptrace.WithClientTrace(ctx, &hooks)
	}
	into.Context, into.traced = ctx, lt.traced
	return into
}

// roundTrip is what RoundTrip allocates for one request, in one
// allocation: its Permit, the context that traces its latency, and the
// request sent (a shallow copy of the caller's with that context).
type roundTrip struct {
	p   Permit
	ctx tracedContext
	req http.Request
}

// tracedContext is a request's context with a latencyTrace's hooks: the
// trace's key answers from traced, any other from the request's context.
// It holds the request's context, not the latencyTrace, which is reused
// while the base RoundTripper may still read the context (a body's read
// watches it).
type tracedContext struct {
	context.Context
	traced context.Context
}

func (c *tracedContext) Value(key any) any {
	if v := c.traced.Value(key); v != nil {
		return v
	}
	return c.Context.Value(key)
}

// newLatencyTrace returns an empty latencyTrace that reads clock.
func newLatencyTrace(clock Clock) *latencyTrace {
	lt := latencyTraces.Get().(*latencyTrace)
	lt.conn.Store(0)
	lt.first.Store(0)
	lt.clock = clock
	return lt
}

// reuse gives lt back once its round trip has returned a response. (Its
// clock stays: a hook that came late would still find one.)
func (lt *latencyTrace) reuse() { latencyTraces.Put(lt) }

func (lt *latencyTrace) latency(start, end time.Time) time.Duration {
	c, f := lt.conn.Load(), lt.first.Load()
	if c != 0 && f != 0 && f >= c {
		return time.Duration(f - c)
	}
	return end.Sub(start)
}

// releasingBody releases its permit when read to EOF or closed.
type releasingBody struct {
	rc io.ReadCloser
	p  *Permit
	fb Feedback
}

func (b *releasingBody) Read(buf []byte) (int, error) {
	n, err := b.rc.Read(buf)
	switch {
	case err == io.EOF:
		b.p.doneAt(b.p.manager().clock.Now(), b.fb, false)
	case err != nil && !b.p.released.Load():
		// The body broke off: a reset or a timeout is the server's doing.
		fb := b.fb
		fb.Err = err
		if isBackoffError(err) {
			fb.Backoff, fb.Timeout = true, true
		}
		b.p.doneAt(b.p.manager().clock.Now(), fb, false)
	}
	return n, err
}

func (b *releasingBody) Close() error {
	err := b.rc.Close()
	if !b.p.released.Load() {
		b.p.doneAt(b.p.manager().clock.Now(), b.fb, false)
	}
	return err
}

// redirectGate returns the time before which req, a redirect's next hop,
// may not start, and forgets it.
func (t *Transport) redirectGate(req *http.Request) time.Time {
	if t.redirN.Load() == 0 || req.URL == nil {
		return time.Time{}
	}
	u := req.URL.String()
	t.redirMu.Lock()
	defer t.redirMu.Unlock()
	at, ok := t.redir[u]
	if ok {
		delete(t.redir, u)
		t.redirN.Store(int32(len(t.redir)))
	}
	return at
}

func (t *Transport) setRedirectGate(req *http.Request, resp *http.Response, at time.Time) {
	loc, err := resp.Location()
	if err != nil || req.URL == nil {
		return
	}
	now := t.m.clock.Now()
	t.redirMu.Lock()
	defer t.redirMu.Unlock()
	if t.redir == nil {
		t.redir = make(map[string]time.Time)
	}
	if len(t.redir) >= maxRedirectGates {
		for k, v := range t.redir {
			if !v.After(now) || len(t.redir) >= maxRedirectGates {
				delete(t.redir, k)
			}
		}
	}
	t.redir[loc.String()] = at
	t.redirN.Store(int32(len(t.redir)))
}

// viaTransport is the context a request of the Transport t is admitted
// with when a robots.txt fetch the request starts goes through t
// (fetchesVia), so through t's base RoundTripper (its proxy, TLS and
// dialer settings), as the request itself will be sent. The admission
// path (acquire) knows nothing of Transports: it hands the context on,
// and only start, which makes a fetch, reads t back (transportOf). The
// Transport keeps it in the allocation it makes anyway for its latency
// trace (Transport.admission), so it costs no allocation of its own.
type viaTransport struct {
	context.Context
	t *Transport
}

// viaTransportKey is the context key under which viaTransport answers t.
type viaTransportKey struct{}

// Value answers t for viaTransportKey, and the request's values otherwise.
func (v *viaTransport) Value(key any) any {
	if key == (viaTransportKey{}) {
		return v.t
	}
	return v.Context.Value(key)
}
