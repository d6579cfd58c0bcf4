package throttle

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeRT answers from a function: a fake server without sockets.
type fakeRT func(req *http.Request) (*http.Response, error)

func (f fakeRT) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func respond(req *http.Request, status int, body string, kv ...string) *http.Response {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)), Request: req}
}

func (m *ThrottlingManager) inFlight(t testing.TB, key string) int {
	s := m.mustScope(t, key)
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.pol.(*defaultScope).adm.InFlight)
}

func TestTransportHoldsSlotUntilBodyClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		client := &http.Client{Transport: m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			return respond(req, 200, "hello"), nil
		}))}
		resp, err := client.Get("http://a.example/")
		require.NoError(t, err)
		assert.Equal(t, 1, m.inFlight(t, "a.example"), "held while the body is open")
		_, _, _ = m.TryAcquire(get(t, "http://a.example/")) // must not admit: concurrency 1
		p, adm, err := m.TryAcquire(get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.Nil(t, p)
		assert.Equal(t, ReasonConcurrency, adm.Reason)
		resp.Body.Close()
		assert.Equal(t, 0, m.inFlight(t, "a.example"))
		resp.Body.Close() // twice is harmless

		// Read to EOF releases too.
		resp, err = client.Get("http://a.example/")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Equal(t, "hello", string(b))
		assert.Equal(t, 0, m.inFlight(t, "a.example"), "released at EOF")
		resp.Body.Close()
	})
}

func TestTransportNoBodyReleasesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		m := newManager(t, cfg)
		rt := m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			r := respond(req, 204, "")
			r.Body = http.NoBody
			return r, nil
		}))
		resp, err := rt.RoundTrip(get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.Equal(t, 204, resp.StatusCode)
		assert.Equal(t, 0, m.inFlight(t, "a.example"))
	})
}

// Test429IsAResponseNotAnError: err == nil whenever a response came back.
func TestTransport429IsAResponse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, plainConfig())
		rt := m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			return respond(req, 429, "slow down", "Retry-After", "30"), nil
		}))
		resp, err := rt.RoundTrip(get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.Equal(t, 429, resp.StatusCode)
		resp.Body.Close()
		p, adm, err := m.TryAcquire(get(t, "http://a.example/"))
		require.NoError(t, err)
		assert.Nil(t, p)
		assert.Equal(t, ReasonGate, adm.Reason)
		assert.Equal(t, time.Now().Add(30*time.Second), adm.At, "gated by Retry-After")
	})
}

type trackingBody struct {
	io.Reader
	closed atomic.Bool
}

func (b *trackingBody) Close() error { b.closed.Store(true); return nil }

func TestTransportDoesNotModifyRequestAndClosesBodyOnError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, plainConfig())
		var seenCtx context.Context
		rt := m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			seenCtx = req.Context()
			return respond(req, 200, ""), nil
		}))
		req := get(t, "http://a.example/")
		before := *req
		resp, err := rt.RoundTrip(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, before.Context(), req.Context(), "request's context untouched")
		assert.NotEqual(t, req.Context(), seenCtx, "the base saw a traced copy")
		assert.Same(t, req, resp.Request, "resp.Request is the caller's request")

		// An early return (a cancelled context) closes the request body.
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		body := &trackingBody{Reader: strings.NewReader("x")}
		req2, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://a.example/", body)
		_, err = rt.RoundTrip(req2)
		assert.ErrorIs(t, err, context.Canceled)
		assert.True(t, body.closed.Load())
	})
}

func TestTransportErrorIsFeedback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = 0
		m := newManager(t, cfg)
		timeout := &net.OpError{Op: "read", Err: errTimeout{}}
		rt := m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			return nil, timeout
		}))
		_, err := rt.RoundTrip(get(t, "http://a.example/"))
		require.ErrorIs(t, err, timeout)
		assert.Equal(t, 0, m.inFlight(t, "a.example"))
		s := m.mustScope(t, "a.example")
		s.mu.Lock()
		d, why := s.pol.(*defaultScope).delay()
		s.mu.Unlock()
		assert.Equal(t, time.Second, d, "a timeout is a backoff signal: MinDelay from zero")
		assert.Equal(t, ReasonBackoff, why)
	})
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

// TestTransportRedirectHopsThrottled: each hop is throttled; context
// scopes persist across hops.
func TestTransportRedirectHops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = 2 * time.Second
		cfg.Default.SlotDelay = 0
		m := newManager(t, cfg)
		var mu sync.Mutex
		var hops []string
		t0 := time.Now()
		client := &http.Client{Transport: m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			hops = append(hops, req.URL.Host+req.URL.Path+"@"+time.Since(t0).String())
			mu.Unlock()
			switch req.URL.Path {
			case "/a":
				return respond(req, 302, "", "Location", "/b"), nil
			case "/b":
				return respond(req, 302, "", "Location", "http://other.example/c"), nil
			}
			return respond(req, 200, "done"), nil
		}))}
		resp, err := client.Get("http://a.example/a")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, []string{"a.example/a@0s", "a.example/b@2s", "other.example/c@2s"}, hops,
			"same-host hop waits for the delay; the other host doesn't")

		// With context scopes, every hop uses them.
		hops = nil
		t0 = time.Now()
		req, _ := http.NewRequestWithContext(WithScopeKeys(context.Background(), "pinned"), http.MethodGet, "http://x.example/a", nil)
		resp, err = client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, []string{"x.example/a@0s", "x.example/b@2s", "other.example/c@4s"}, hops,
			"all hops in scope \"pinned\"")
	})
}

func TestTransportRedirectRetryAfter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
		cfg.Default.Backoff.RedirectMaxDelay = 10 * time.Second
		m := newManager(t, cfg)
		t0 := time.Now()
		var atB, atC time.Duration
		client := &http.Client{Transport: m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			switch req.URL.Path {
			case "/a":
				return respond(req, 303, "", "Location", "/b", "Retry-After", "3"), nil
			case "/b":
				atB = time.Since(t0)
				return respond(req, 307, "", "Location", "/c", "Retry-After", "3600"), nil
			}
			atC = time.Since(t0)
			return respond(req, 200, ""), nil
		}))}
		resp, err := client.Get("http://a.example/a")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, 3*time.Second, atB, "Retry-After on a 3xx delays the next hop")
		assert.Equal(t, 13*time.Second, atC, "capped at RedirectMaxDelay")
		// The 3xx's wait gates only the hop, not the scope.
		p, _, err := m.TryAcquire(get(t, "http://a.example/zzz"))
		require.NoError(t, err)
		require.NotNil(t, p)
		p.Release(ok200, nil)
	})
}

// TestTransportLatencyFromTrace: on a real connection, latency is from
// connection obtained to first response byte, not the time spent waiting
// for the permit.
func TestTransportLatencyFromTrace(t *testing.T) {
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	var got []time.Duration
	var mu sync.Mutex
	cfg := plainConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
	cfg.Default.NewManager = func(p ScopeParams) ScopeManager {
		return &recordingScope{ScopeManager: NewDefaultScopeManager(p), onFinish: func(fb *Feedback) {
			mu.Lock()
			got = append(got, fb.Latency)
			mu.Unlock()
		}}
	}
	m := newManager(t, cfg)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: m.Transport(base)}
	start := time.Now()
	for i := 0; i < 3; i++ {
		resp, err := client.Get(srv.URL)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	took := time.Since(start)
	require.Len(t, got, 3)
	for _, d := range got {
		// A round trip's part: positive, and within the three requests'
		// time however slow the machine.
		assert.Greater(t, d, time.Duration(0))
		assert.LessOrEqual(t, d, took)
	}
	assert.Equal(t, int32(3), served.Load())
}

// recordingScope wraps the default ScopeManager: the documented way to
// customise a policy.
type recordingScope struct {
	ScopeManager
	onFinish func(fb *Feedback)
}

func (r *recordingScope) Finish(now time.Time, t Ticket, fb *Feedback) {
	r.onFinish(fb)
	r.ScopeManager.Finish(now, t, fb)
}

func TestTransportBodyReadErrorIsFeedback(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay = 0
		m := newManager(t, cfg)
		rt := m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			r := respond(req, 200, "")
			r.Body = io.NopCloser(io.MultiReader(strings.NewReader("par"), errReader{io.ErrUnexpectedEOF}))
			return r, nil
		}))
		resp, err := rt.RoundTrip(get(t, "http://a.example/"))
		require.NoError(t, err)
		_, err = io.ReadAll(resp.Body)
		assert.True(t, errors.Is(err, io.ErrUnexpectedEOF))
		assert.Equal(t, 0, m.inFlight(t, "a.example"), "released when the body broke off")
		resp.Body.Close()
		s := m.mustScope(t, "a.example")
		s.mu.Lock()
		assert.True(t, s.pol.(*defaultScope).backoff.delay > 0, "a body cut short is a backoff signal")
		s.mu.Unlock()
	})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// A redirect hop waiting for its 3xx's Retry-After holds nobody else in
// its scope back.
func TestTransportRedirectWaitDoesNotBlockScope(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := plainConfig()
		cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Concurrency = 0, 0, 4
		m := newManager(t, cfg)
		client := &http.Client{Transport: m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
			if req.URL.Path == "/a" {
				return respond(req, 302, "", "Location", "/b", "Retry-After", "30"), nil
			}
			return respond(req, 200, ""), nil
		}))}
		done := make(chan struct{})
		go func() {
			defer close(done)
			resp, err := client.Get("http://a.example/a")
			if assert.NoError(t, err) {
				resp.Body.Close()
			}
		}()
		synctest.Wait() // the /b hop waits 30 s
		t0 := time.Now()
		resp, err := client.Get("http://a.example/other")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, t0, time.Now(), "not queued behind the waiting hop")
		<-done
	})
}

// TestTransportCloseIdleConnections: http.Client.CloseIdleConnections
// reaches the base transport through the throttle's Transport (a user's
// crawler closing its client left the base's keep-alive connections
// open), and a base without the method is left alone.
func TestTransportCloseIdleConnections(t *testing.T) {
	var closed atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closed.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	cfg := plainConfig()
	cfg.Default.Delay, cfg.Default.SlotDelay = 0, 0
	m := newManager(t, cfg)
	base := &http.Transport{}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: m.Transport(base)}
	resp, err := client.Get(srv.URL)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	require.Zero(t, closed.Load(), "kept alive")
	client.CloseIdleConnections()
	require.Eventually(t, func() bool { return closed.Load() == 1 }, 5*time.Second, time.Millisecond,
		"the server saw the idle connection closed")

	// A base RoundTripper without CloseIdleConnections: nothing to do.
	(&http.Client{Transport: m.Transport(fakeRT(func(req *http.Request) (*http.Response, error) {
		return respond(req, 200, ""), nil
	}))}).CloseIdleConnections()
}

// TestLatencyTraceReusedEmpty: a latencyTrace comes back from reuse with
// no times of its last round trip, so a round trip whose hooks never fire
// (an in-memory RoundTripper, a cached answer) measures its own time, and
// its hooks read the clock it is given now.
func TestLatencyTraceReusedEmpty(t *testing.T) {
	clock := &stepClock{t: time.Unix(1e9, 0)}
	start := clock.Now()
	for i := range 100 {
		lt := newLatencyTrace(clock)
		require.Zero(t, lt.conn.Load(), "round trip %d", i)
		require.Zero(t, lt.first.Load(), "round trip %d", i)
		assert.Equal(t, 3*time.Second, lt.latency(start, start.Add(3*time.Second)), "no hook fired: the round trip's time")
		lt.hooks.GotConn(httptrace.GotConnInfo{})
		clock.t = clock.t.Add(20 * time.Millisecond)
		lt.hooks.GotFirstResponseByte()
		assert.Equal(t, 20*time.Millisecond, lt.latency(start, start.Add(3*time.Second)), "connection to first byte")
		lt.reuse()
	}
}

// TestTransportCallerTrace: a caller's ClientTrace on the request's
// context gets its events, for that request only: the Transport's own
// hooks, reused for later requests, keep none of it.
func TestTransportCallerTrace(t *testing.T) {
	cfg := plainConfig()
	cfg.Default.Delay = 0
	m := newManager(t, cfg)
	rt := fakeRT(func(req *http.Request) (*http.Response, error) {
		if tr := httptrace.ContextClientTrace(req.Context()); tr != nil && tr.GotFirstResponseByte != nil {
			tr.GotFirstResponseByte()
		}
		return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
	})
	client := &http.Client{Transport: m.Transport(rt)}
	var mine atomic.Int32
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		GotFirstResponseByte: func() { mine.Add(1) },
	})
	for i := range 4 {
		req, err := http.NewRequest(http.MethodGet, "http://a.example/", nil)
		require.NoError(t, err)
		if i == 0 {
			req = req.WithContext(ctx)
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, int32(1), mine.Load())
}
