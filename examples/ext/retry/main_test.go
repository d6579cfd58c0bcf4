package main

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/throttletest"
	"github.com/hashicorp/go-retryablehttp"
)

// server is an in-memory server: it answers 429 with Retry-After: 3 to
// the first tooMany requests for /retried, 200 to the others, and records
// when each request arrived (since the server was made) and its path.
// In a synctest bubble the times are fake and exact.
type server struct {
	t0      time.Time
	tooMany int

	mu     sync.Mutex
	starts []time.Duration
	paths  []string
}

func newServer(tooMany int) *server { return &server{t0: time.Now(), tooMany: tooMany} }

func (s *server) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.starts = append(s.starts, time.Since(s.t0))
	s.paths = append(s.paths, req.URL.Path)
	if req.URL.Path == "/retried" && s.tooMany > 0 {
		s.tooMany--
		return throttletest.Response(req, 429, fmt.Sprintf("slow down, %d left", s.tooMany), "Retry-After", "3"), nil
	}
	return throttletest.Response(req, 200, "ok"), nil
}

func (s *server) log() ([]time.Duration, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.starts), slices.Clone(s.paths)
}

func get(t *testing.T, c *retryablehttp.Client, path string) (int, string) {
	t.Helper()
	resp, err := c.Get("http://a.example" + path)
	if err != nil {
		t.Error(err)
		return 0, ""
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Error(err)
	}
	return resp.StatusCode, string(b)
}

func newManager(t *testing.T) *throttle.ThrottlingManager {
	t.Helper()
	m, err := throttle.New(newConfig())
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func checkIdle(t *testing.T, m *throttle.ThrottlingManager) {
	t.Helper()
	if st := m.Stats(); st.InFlight != 0 || st.Waiting != 0 {
		t.Errorf("Stats: InFlight %d, Waiting %d; want 0 and 0", st.InFlight, st.Waiting)
	}
}

// A 429 with Retry-After: 3, then a 200: the retry starts 3 s after the
// 429, when the throttle's gate ends, not 6 s (a wait of its own on top of
// the gate), and two requests reach the server.
func TestRetryAfterWaitedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t)
		srv := newServer(1)
		c := newClient(m, srv, 3)
		status, body := get(t, c, "/retried")
		if status != 200 || body != "ok" {
			t.Errorf("got %d %q, want the retry's 200 ok", status, body)
		}
		starts, _ := srv.log()
		if want := []time.Duration{0, 3 * time.Second}; !slices.Equal(starts, want) {
			t.Errorf("starts %v, want %v", starts, want)
		}
		checkIdle(t, m)
		t.Logf("starts %v", starts)
	})
}

// Why Backoff returns 0: the retry waits in the throttle from the moment
// the 429 came back, so it keeps its place in the host's queue. Three
// requests for the host that arrive at 1 s, during the gate, start after
// the retry (at 3 s), one backoff delay (2 s) apart. With retryablehttp's
// DefaultBackoff the retry sleeps for Retry-After outside the throttle,
// ends its sleep at the very instant the gate ends (so it starts no
// earlier), and then queues behind those three: it starts at 9 s.
func TestRetryKeepsItsPlace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backoff retryablehttp.Backoff // nil: newClient's
		retry   time.Duration         // when the retry starts
	}{
		{"newClient's Backoff 0", nil, 3 * time.Second},
		{"DefaultBackoff", retryablehttp.DefaultBackoff, 9 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				m := newManager(t)
				srv := newServer(1)
				c := newClient(m, srv, 3)
				if tc.backoff != nil {
					c.Backoff = tc.backoff
				}
				var wg sync.WaitGroup
				wg.Go(func() { get(t, c, "/retried") })
				for _, p := range []string{"/b", "/c", "/d"} {
					wg.Go(func() {
						time.Sleep(time.Second)
						get(t, c, p)
					})
				}
				wg.Wait()
				starts, paths := srv.log()
				if want := []time.Duration{0, 3 * time.Second, 5 * time.Second, 7 * time.Second, 9 * time.Second}; !slices.Equal(starts, want) {
					t.Errorf("starts %v, want %v", starts, want)
				}
				var retryAt time.Duration
				for i, p := range paths {
					if i > 0 && p == "/retried" {
						retryAt = starts[i]
					}
				}
				if retryAt != tc.retry {
					t.Errorf("the retry started at %v, want %v (requests %v at %v)", retryAt, tc.retry, paths, starts)
				}
				checkIdle(t, m)
				t.Logf("%v at %v", paths, starts)
			})
		})
	}
}

// RetryMax bounds the requests: against a server that always answers
// 429, RetryMax+1 requests reach it, and the last 429 comes back to the
// caller with its body readable (PassthroughErrorHandler), each attempt
// admitted by the throttle after the 3 s gate or the backoff delay,
// whichever ends later.
func TestRetryMaxBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newManager(t)
		srv := newServer(1000)
		c := newClient(m, srv, 2)
		status, body := get(t, c, "/retried")
		if status != 429 || body != "slow down, 997 left" {
			t.Errorf("got %d %q, want the third 429", status, body)
		}
		starts, _ := srv.log()
		// Backoff doubles the delay per 429: 2 s, then 4 s; the gate is 3 s.
		if want := []time.Duration{0, 3 * time.Second, 7 * time.Second}; !slices.Equal(starts, want) {
			t.Errorf("starts %v, want %v", starts, want)
		}
		checkIdle(t, m)
		t.Logf("starts %v", starts)
	})
}
