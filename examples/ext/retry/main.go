// Command retry retries 429s with hashicorp/go-retryablehttp through
// throttle's Transport, so that each retry waits once, in the throttle:
//
//	c := retryablehttp.NewClient()
//	c.HTTPClient = &http.Client{Transport: m.Transport(base)} // the throttle admits each attempt
//	c.Backoff = func(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return 0 }
//	c.RetryMax = 3                                         // retries after the first attempt
//	c.ErrorHandler = retryablehttp.PassthroughErrorHandler // out of retries: the last 429, not an error
//
// A 429 or 503 with Retry-After gates the request's scope in the throttle:
// no request of that host starts before the Retry-After has passed, and
// backoff slows the host's pace. So the retry needs no sleep of its own:
// Backoff returns 0 and the retry goes straight back into the throttle,
// which holds it until the gate ends. retryablehttp's DefaultBackoff would
// sleep for the Retry-After as well: the retry would gain nothing (the gate
// ends at the same instant) and would lose its place in the host's queue
// to every request that arrived during the sleep.
//
// The program starts a server on 127.0.0.1 that answers the first request
// for /retried with 429 and Retry-After: 2, and everything else with 200.
// Three more requests for the same host arrive at 0.5 s, during the gate.
// Run it from examples/ext (about 8 s):
//
//	go run ./retry                    # the retry starts at 2 s, first in line
//	go run ./retry -default-backoff   # the retry starts at 8 s, last
//
// The throttle's jitter is off so that the times are exact.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/hashicorp/go-retryablehttp"
)

// newClient returns a retryablehttp.Client whose attempts all go through
// the throttle's Transport over base, that does not sleep between them,
// and that makes at most retryMax retries.
func newClient(m *throttle.ThrottlingManager, base http.RoundTripper, retryMax int) *retryablehttp.Client {
	c := retryablehttp.NewClient()
	c.HTTPClient = &http.Client{Transport: m.Transport(base)} // each attempt waits for its turn here ...
	c.Backoff = noBackoff                                     // ... and nowhere else
	c.RetryMax = retryMax
	c.ErrorHandler = retryablehttp.PassthroughErrorHandler // out of retries: the last response
	c.Logger = nil                                         // or a logger of your own
	return c
}

// noBackoff is the Backoff of a retryablehttp.Client on a throttle: the
// throttle's gate (Retry-After) and its backoff pace the retries.
func noBackoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration { return 0 }

// newConfig is the throttle's configuration: the defaults (1 request at a
// time per host, 1 s apart, doubled by backoff after a 429) without
// jitter, and without robots.txt, which the local server does not have.
func newConfig() throttle.Config {
	cfg := throttle.DefaultConfig()
	cfg.Default.Jitter = throttle.Jitter{}
	cfg.Default.Backoff.Jitter = throttle.Jitter{}
	cfg.Robots.Enabled = false
	return cfg
}

func main() {
	defaultBackoff := flag.Bool("default-backoff", false, "use retryablehttp's DefaultBackoff, which sleeps for Retry-After too")
	flag.Parse()

	var mu sync.Mutex
	t0 := time.Now()
	retried := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		first := r.URL.Path == "/retried" && !retried
		if first {
			retried = true
		}
		mu.Unlock()
		at := time.Since(t0).Seconds()
		if first {
			fmt.Printf("%4.1fs  server: %s -> 429, Retry-After: 2\n", at, r.URL.Path)
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		fmt.Printf("%4.1fs  server: %s -> 200\n", at, r.URL.Path)
		io.WriteString(w, "ok")
	}))
	defer srv.Close()

	m, err := throttle.New(newConfig())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	c := newClient(m, http.DefaultTransport, 3)
	if *defaultBackoff {
		c.Backoff = retryablehttp.DefaultBackoff
	}

	get := func(path string) {
		resp, err := c.Get(srv.URL + path)
		if err != nil {
			fmt.Println(path, err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close() // frees the throttle's slot
		fmt.Printf("%4.1fs  client: %s done, %s\n", time.Since(t0).Seconds(), path, resp.Status)
	}
	var wg sync.WaitGroup
	wg.Go(func() { get("/retried") })
	for _, p := range []string{"/b", "/c", "/d"} {
		wg.Go(func() {
			time.Sleep(500 * time.Millisecond) // during the gate
			get(p)
		})
	}
	wg.Wait()
}
