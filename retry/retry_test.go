package retry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/retry"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/throttletest"
)

// server is an in-memory server: answer gives the response (or error) to
// the n-th request (n from 1); it records when each request started,
// relative to the server's creation, and the body it carried.
type server struct {
	t0     time.Time
	answer func(n int, req *http.Request) (*http.Response, error)

	mu     sync.Mutex
	starts []time.Duration
	bodies []string
	paths  []string
}

func newServer(answer func(n int, req *http.Request) (*http.Response, error)) *server {
	return &server{t0: time.Now(), answer: answer}
}

func (s *server) RoundTrip(req *http.Request) (*http.Response, error) {
	var body string
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body = string(b)
	}
	s.mu.Lock()
	s.starts = append(s.starts, time.Since(s.t0))
	s.bodies = append(s.bodies, body)
	s.paths = append(s.paths, req.URL.Path)
	n := len(s.starts)
	s.mu.Unlock()
	return s.answer(n, req)
}

func (s *server) Starts() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts)
}

func (s *server) Paths() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.paths)
}

func (s *server) Bodies() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.bodies)
}

// exactConfig is the default configuration with robots.txt off (the
// hosts are made up) and no jitter, so that start times are exact.
func exactConfig() throttle.Config {
	cfg := throttle.DefaultConfig()
	cfg.Robots.Enabled = false
	cfg.Default.Jitter = throttle.Jitter{}
	cfg.Default.Backoff.Jitter = throttle.Jitter{}
	return cfg
}

func newManager(t *testing.T, cfg throttle.Config) *throttle.ThrottlingManager {
	t.Helper()
	m, err := throttle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// tooMany answers 429 with Retry-After, then 200 "ok".
func tooMany(retryAfter string, times int) func(int, *http.Request) (*http.Response, error) {
	return func(n int, req *http.Request) (*http.Response, error) {
		if n <= times {
			return throttletest.Response(req, 429, fmt.Sprintf("slow down %d", n), "Retry-After", retryAfter), nil
		}
		return throttletest.Response(req, 200, "ok"), nil
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkIdle fails unless the manager holds no slot and has no waiter.
func checkIdle(t *testing.T, m *throttle.ThrottlingManager) {
	t.Helper()
	if st := m.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Errorf("Stats: InFlight %d, Waiting %d; want 0 and 0", st.InFlight, st.Waiting)
	}
}

// A 429 with Retry-After: 3, then a 200: the retry starts 3 s after the
// 429 (the throttle's gate), not 6 s (a wait on top of the gate), and
// two requests reach the server. The gate is exact whatever the jitter:
// the default jitter (±50 %, ±10 % while backing off) only moves the
// pace, here 2 s ± 10 % after the 429, which the 3 s gate covers.
func TestRetryAfterWaitedOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter bool
	}{{"no jitter", false}, {"default jitter", true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cfg := exactConfig()
				if tc.jitter {
					def := throttle.DefaultConfig()
					cfg.Default.Jitter, cfg.Default.Backoff.Jitter = def.Default.Jitter, def.Default.Backoff.Jitter
				}
				m := newManager(t, cfg)
				srv := newServer(tooMany("3", 1))
				client := &http.Client{Transport: &retry.Transport{Next: m.Transport(srv)}}

				t0 := time.Now()
				resp, err := client.Get("http://a.example/")
				if err != nil {
					t.Fatal(err)
				}
				took := time.Since(t0)
				if resp.StatusCode != 200 || readAll(t, resp) != "ok" {
					t.Fatalf("got %d, want the retry's 200 ok", resp.StatusCode)
				}
				want := []time.Duration{0, 3 * time.Second}
				if got := srv.Starts(); !slices.Equal(got, want) {
					t.Errorf("request starts %v, want %v (the retry once the 3 s gate passed)", got, want)
				}
				if took != 3*time.Second {
					t.Errorf("Get took %v, want 3s", took)
				}
				checkIdle(t, m)
				t.Logf("starts %v", srv.Starts())
			})
		})
	}
}

// The retry keeps its place in the scope's queue: it waits in the
// throttle from the moment the 429 came back, so three requests for the
// same host that arrive at 1 s, during the 3 s gate, start after it, one
// backoff delay (2 s) apart. A retry that slept for Retry-After itself
// would join the queue at 3 s, behind them, and start at 9 s.
func TestRetryKeepsItsPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, exactConfig())
		srv := newServer(tooMany("3", 1))
		client := &http.Client{Transport: &retry.Transport{Next: m.Transport(srv)}}
		get := func(path string) {
			resp, err := client.Get("http://a.example" + path)
			if err != nil {
				t.Error(err)
				return
			}
			readAll(t, resp)
		}
		var wg sync.WaitGroup
		wg.Go(func() { get("/retried") })
		for range 3 {
			wg.Go(func() {
				time.Sleep(time.Second)
				get("/later")
			})
		}
		wg.Wait()
		want := []time.Duration{0, 3 * time.Second, 5 * time.Second, 7 * time.Second, 9 * time.Second}
		if got := srv.Starts(); !slices.Equal(got, want) {
			t.Errorf("starts %v, want %v", got, want)
		}
		if got := srv.Paths(); !slices.Equal(got[:2], []string{"/retried", "/retried"}) {
			t.Errorf("paths in order %v, want the retry second", got)
		}
		checkIdle(t, m)
	})
}

// Attempts bounds the requests: against a server that always answers
// 429, exactly Attempts requests reach it, and the last 429 comes back
// with its body unread.
func TestAttemptsBound(t *testing.T) {
	for _, tc := range []struct{ attempts, want int }{{1, 1}, {4, 4}, {0, retry.DefaultAttempts}, {-1, retry.DefaultAttempts}} {
		t.Run(fmt.Sprint("Attempts=", tc.attempts), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t, exactConfig())
				srv := newServer(tooMany("1", 1000))
				client := &http.Client{Transport: &retry.Transport{Next: m.Transport(srv), Attempts: tc.attempts}}
				resp, err := client.Get("http://a.example/")
				if err != nil {
					t.Fatal(err)
				}
				if resp.StatusCode != 429 {
					t.Errorf("status %d, want 429", resp.StatusCode)
				}
				if body, want := readAll(t, resp), fmt.Sprintf("slow down %d", tc.want); body != want {
					t.Errorf("body %q, want %q (the last answer's, readable)", body, want)
				}
				starts := srv.Starts()
				if len(starts) != tc.want {
					t.Errorf("%d requests reached the server, want %d", len(starts), tc.want)
				}
				for i := 1; i < len(starts); i++ {
					if gap := starts[i] - starts[i-1]; gap < time.Second {
						t.Errorf("attempt %d started %v after the 429 before it, inside its 1 s Retry-After", i+1, gap)
					}
				}
				checkIdle(t, m)
				t.Logf("starts %v", starts)
			})
		})
	}
}

// A POST whose body can be rewound (GetBody, as http.NewRequest sets for
// a strings.Reader) is sent again with the same body; the caller's
// request is left as it was and is the response's Request.
func TestPostResentWithSameBody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, exactConfig())
		srv := newServer(tooMany("1", 1))
		rt := &retry.Transport{Next: m.Transport(srv)}
		req, err := http.NewRequest(http.MethodPost, "http://a.example/form", strings.NewReader("payload"))
		if err != nil {
			t.Fatal(err)
		}
		body := req.Body
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || readAll(t, resp) != "ok" {
			t.Fatalf("status %d, want the retry's 200", resp.StatusCode)
		}
		if got, want := srv.Bodies(), []string{"payload", "payload"}; !slices.Equal(got, want) {
			t.Errorf("bodies received %q, want %q", got, want)
		}
		if resp.Request != req {
			t.Error("resp.Request is not the caller's request")
		}
		if req.Body != body {
			t.Error("the caller's request was modified")
		}
		checkIdle(t, m)
	})
}

// A request with a body but no GetBody cannot be sent again: one request,
// its 429 returned.
func TestBodyWithoutGetBodyNotRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, exactConfig())
		srv := newServer(tooMany("1", 1))
		rt := &retry.Transport{Next: m.Transport(srv)}
		req, err := http.NewRequest(http.MethodPost, "http://a.example/form", io.NopCloser(strings.NewReader("payload")))
		if err != nil {
			t.Fatal(err)
		}
		if req.GetBody != nil {
			t.Fatal("test setup: GetBody is set")
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 429 || readAll(t, resp) != "slow down 1" {
			t.Errorf("status %d, want the first 429", resp.StatusCode)
		}
		if got, want := srv.Bodies(), []string{"payload"}; !slices.Equal(got, want) {
			t.Errorf("bodies received %q, want %q", got, want)
		}
		checkIdle(t, m)
	})
}

// A context that ends while the retry waits for the throttle's gate
// stops the retries at once, with the throttle's error wrapping the
// context's; one request reached the server and no slot is left held.
// Cancelled at 5 s, the wait ends at 5 s, not at the 30 s gate; with a
// deadline before the gate's end, the throttle does not wait at all.
func TestContextEndStopsRetries(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
		took time.Duration
	}{
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(5*time.Second, cancel)
			return ctx, cancel
		}, context.Canceled, 5 * time.Second},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 5*time.Second)
		}, context.DeadlineExceeded, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t, exactConfig())
				srv := newServer(tooMany("30", 1000))
				client := &http.Client{Transport: &retry.Transport{Next: m.Transport(srv), Attempts: 5}}
				ctx, cancel := tc.ctx()
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://a.example/", nil)
				if err != nil {
					t.Fatal(err)
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
					t.Fatalf("got %d, want the context's error", resp.StatusCode)
				}
				var werr *throttle.WaitError
				if !errors.Is(err, tc.want) || !errors.As(err, &werr) || werr.Reason != throttle.ReasonGate {
					t.Errorf("error %v, want the throttle's WaitError (gate) wrapping %v", err, tc.want)
				}
				if took := time.Since(t0); took != tc.took {
					t.Errorf("returned after %v, want %v", took, tc.took)
				}
				if n := len(srv.Starts()); n != 1 {
					t.Errorf("%d requests reached the server, want 1", n)
				}
				checkIdle(t, m)
			})
		})
	}
}

// A context cancelled while an attempt is under way: no further attempt
// starts; that attempt's answer is returned.
func TestCancelDuringAttemptStopsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t, exactConfig())
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		srv := newServer(func(n int, req *http.Request) (*http.Response, error) {
			cancel() // the caller gives up while the server answers
			return throttletest.Response(req, 429, "slow down", "Retry-After", "1"), nil
		})
		rt := &retry.Transport{Next: m.Transport(srv)}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://a.example/", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			t.Fatalf("error %v, want the attempt's 429", err)
		}
		if resp.StatusCode != 429 {
			t.Errorf("status %d, want 429", resp.StatusCode)
		}
		resp.Body.Close()
		if n := len(srv.Starts()); n != 1 {
			t.Errorf("%d requests reached the server, want 1", n)
		}
		checkIdle(t, m)
	})
}

// Only 429 and 503 are retried by default, each once here (the server
// answers 200 after): not 404, 500, 502 or 504. A 503 without
// Retry-After waits for the throttle's backoff (the delay doubled, 2 s).
func TestWhichStatusesAreRetried(t *testing.T) {
	for _, tc := range []struct {
		status  int
		retried bool
		start   time.Duration // of the retry
	}{
		{200, false, 0}, {404, false, 0}, {500, false, 0}, {502, false, 0}, {504, false, 0},
		{429, true, 2 * time.Second}, {503, true, 2 * time.Second},
	} {
		t.Run(fmt.Sprint(tc.status), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t, exactConfig())
				srv := newServer(func(n int, req *http.Request) (*http.Response, error) {
					if n == 1 {
						return throttletest.Response(req, tc.status, "first"), nil
					}
					return throttletest.Response(req, 200, "ok"), nil
				})
				client := &http.Client{Transport: &retry.Transport{Next: m.Transport(srv)}}
				resp, err := client.Get("http://a.example/")
				if err != nil {
					t.Fatal(err)
				}
				readAll(t, resp)
				want := []time.Duration{0}
				if tc.retried {
					want = append(want, tc.start)
				}
				if got := srv.Starts(); !slices.Equal(got, want) {
					t.Errorf("starts %v, want %v", got, want)
				}
				checkIdle(t, m)
			})
		})
	}
}

// A transport error (a reset connection) is retried, paced by the
// throttle's backoff; a Retry of one's own replaces the default.
func TestTransportErrorAndCustomRetry(t *testing.T) {
	t.Run("reset", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newManager(t, exactConfig())
			srv := newServer(func(n int, req *http.Request) (*http.Response, error) {
				if n == 1 {
					return nil, syscall.ECONNRESET
				}
				return throttletest.Response(req, 200, "ok"), nil
			})
			client := &http.Client{Transport: &retry.Transport{Next: m.Transport(srv)}}
			resp, err := client.Get("http://a.example/")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if got, want := srv.Starts(), []time.Duration{0, 2 * time.Second}; !slices.Equal(got, want) {
				t.Errorf("starts %v, want %v (the retry after the backoff delay)", got, want)
			}
			checkIdle(t, m)
		})
	})
	t.Run("custom", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			m := newManager(t, exactConfig())
			srv := newServer(func(n int, req *http.Request) (*http.Response, error) {
				if n == 1 {
					return throttletest.Response(req, 500, "oops"), nil
				}
				return throttletest.Response(req, 200, "ok"), nil
			})
			var seen []int
			rt := &retry.Transport{Next: m.Transport(srv), Retry: func(resp *http.Response, err error) bool {
				seen = append(seen, resp.StatusCode)
				return resp.StatusCode == 500
			}}
			client := &http.Client{Transport: rt}
			resp, err := client.Get("http://a.example/")
			if err != nil {
				t.Fatal(err)
			}
			readAll(t, resp)
			if n := len(srv.Starts()); n != 2 {
				t.Errorf("%d requests, want 2 (the 500 retried)", n)
			}
			if want := []int{500, 200}; !slices.Equal(seen, want) {
				t.Errorf("Retry saw %v, want %v", seen, want)
			}
		})
	})
}

func TestDefaultRetry(t *testing.T) {
	resp := func(status int) *http.Response { return &http.Response{StatusCode: status} }
	wait := &throttle.WaitError{Scope: "a.example", Reason: throttle.ReasonGate, Err: context.Canceled}
	for _, tc := range []struct {
		name string
		resp *http.Response
		err  error
		want bool
	}{
		{"429", resp(429), nil, true},
		{"503", resp(503), nil, true},
		{"200", resp(200), nil, false},
		{"404", resp(404), nil, false},
		{"500", resp(500), nil, false},
		{"502", resp(502), nil, false},
		{"reset", nil, syscall.ECONNRESET, true},
		{"other error", nil, errors.New("boom"), true},
		{"canceled while waiting", nil, wait, false},
		{"deadline", nil, fmt.Errorf("get: %w", context.DeadlineExceeded), false},
		{"too many waiting", nil, fmt.Errorf("%w (Config.MaxWaiting 1)", throttle.ErrTooManyWaiting), false},
		{"refusing", nil, &throttle.WaitError{Scope: "a.example", Err: throttle.ErrScopeRefusing}, false},
		{"store", nil, &store.Error{Op: "admit", Err: errors.New("down")}, false},
		{"no host", nil, throttle.ErrNoHost, false},
		{"nothing", nil, nil, false},
	} {
		if got := retry.DefaultRetry(tc.resp, tc.err); got != tc.want {
			t.Errorf("%s: DefaultRetry = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A Transport without Next fails and closes the request's body, as a
// RoundTripper must.
func TestNilNext(t *testing.T) {
	body := &closeRecorder{Reader: strings.NewReader("x")}
	req, err := http.NewRequest(http.MethodPost, "http://a.example/", body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&retry.Transport{}).RoundTrip(req)
	if err == nil || resp != nil {
		t.Fatalf("got %v, %v; want an error", resp, err)
	}
	if !body.closed {
		t.Error("request body not closed")
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }
