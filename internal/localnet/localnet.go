// Package localnet serves the examples' simulated hosts (a.example,
// api.bookshop.example ...) so that nothing leaves the machine, and lets
// their tests run them in fake time.
//
// Serve starts a handler on a loopback test server and returns a
// transport that dials it for the simulated hosts only. In a test that
// called InProcess, Serve instead returns a RoundTripper that calls the
// handler in the caller's goroutine, with no network: inside a
// testing/synctest bubble the example then runs in fake time, its
// handlers' time.Sleep and the throttle's waits included, so its test
// checks the throttle's rules exactly however loaded the machine is.
package localnet

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"path"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// inProcess is set by InProcess.
var inProcess atomic.Bool

// Serve serves h for the hosts that match one of patterns (path.Match
// syntax: "a.example", "*.example"; any port). It starts a loopback test
// server and returns an http.Transport that dials it for those hosts and
// refuses every other; stop closes the transport's idle connections and
// the server. After InProcess, it calls h in process instead, and stop
// does nothing.
func Serve(h http.Handler, patterns ...string) (rt http.RoundTripper, stop func()) {
	if inProcess.Load() {
		return Transport(h, patterns...), func() {}
	}
	srv := httptest.NewServer(h)
	addr := srv.Listener.Addr().String()
	var d net.Dialer
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, hostport string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(hostport)
			if err != nil {
				return nil, err
			}
			if !matches(host, patterns) {
				return nil, fmt.Errorf("refusing to dial %s: not a simulated host", hostport)
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 64,
	}
	return tr, func() {
		tr.CloseIdleConnections()
		srv.Close()
	}
}

// InProcess makes Serve return Transport's in-process RoundTripper until
// t ends. Tests that call it must not run in parallel with tests that
// don't.
func InProcess(t testing.TB) {
	t.Helper()
	inProcess.Store(true)
	t.Cleanup(func() { inProcess.Store(false) })
}

// Run runs f in fake time: after InProcess, inside a testing/synctest
// bubble, with the bubble's test context. It returns what f returned and
// fails t at once on f's error. The bubble also fails t when f leaves a
// goroutine blocked behind it.
func Run[R any](t *testing.T, f func(ctx context.Context) (R, error)) R {
	t.Helper()
	InProcess(t)
	var (
		res R
		err error
	)
	synctest.Test(t, func(t *testing.T) { res, err = f(t.Context()) })
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Transport returns a RoundTripper that answers a request for a host that
// matches one of patterns by calling h in the caller's goroutine, as a
// server would see it (Host, RequestURI, RemoteAddr 127.0.0.1), and
// refuses every other host. The request's context is the handler's, so a
// handler sees the client give up; a request whose context ended before
// the answer gets the context's error, as from a real transport. It
// reports the connection and the first response byte to the request's
// httptrace.ClientTrace, so a throttle.Transport measures the latency
// as on a network. Bodies are buffered: a handler that never returns
// hangs the caller.
func Transport(h http.Handler, patterns ...string) http.RoundTripper {
	return roundTripper{h: h, patterns: patterns}
}

type roundTripper struct {
	h        http.Handler
	patterns []string
}

func (rt roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if !matches(req.URL.Hostname(), rt.patterns) {
		return nil, fmt.Errorf("refusing to dial %s: not a simulated host", req.URL.Host)
	}
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	trace := httptrace.ContextClientTrace(ctx)
	if trace != nil && trace.GotConn != nil {
		trace.GotConn(httptrace.GotConnInfo{})
	}
	sr := req.Clone(ctx)
	if sr.Host == "" {
		sr.Host = req.URL.Host
	}
	sr.RequestURI = req.URL.RequestURI()
	sr.RemoteAddr = "127.0.0.1:1"
	if sr.Body == nil {
		sr.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	rt.h.ServeHTTP(rec, sr)
	if trace != nil && trace.GotFirstResponseByte != nil {
		trace.GotFirstResponseByte()
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// matches reports whether host matches one of patterns.
func matches(host string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, host); ok {
			return true
		}
	}
	return false
}
