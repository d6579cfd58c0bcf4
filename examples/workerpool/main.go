// Command workerpool crawls many hosts with a fixed pool of workers fed
// from a throttle.ReadyQueue, and compares it with the same pool taking
// URLs in frontier order and blocking in Acquire.
//
// The frontier holds URLs for 41 local hosts in random order: half of them
// for slow.example, which allows one request per 500ms (say, its
// Crawl-delay), the other half spread over 40 hosts that allow one per
// 200ms each. Every response takes 50ms. With 8 workers the best a crawl
// can do is keep every worker busy: 8 / 50ms = 160 pages/s; the 40 fast
// hosts alone allow 200/s.
//
//   - ReadyQueue: every URL is pushed at once; each worker Pops the request
//     that can start now (its Permit already acquired), fetches it and
//     releases the permit. slow.example's backlog waits in the queue while
//     the workers crawl the other hosts.
//   - frontier order: each worker takes the next URL and blocks in Acquire
//     until its host admits it. Half the URLs are for slow.example, so the
//     workers soon all wait for it, one request per 500ms.
//
// Run it from the module root:
//
//	go run ./examples/workerpool [-duration 3s] [-workers 8]
//
// The hosts are one local test server; nothing leaves the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
)

// options configures one run of the example.
type options struct {
	Duration  time.Duration // how long each crawl runs
	Workers   int           // the pool
	Hosts     int           // fast hosts, besides slow.example
	Latency   time.Duration // every response's
	FastDelay time.Duration // between two requests to a fast host
	SlowDelay time.Duration // between two requests to slow.example
}

func defaultOptions() options {
	return options{
		Duration:  3 * time.Second,
		Workers:   8,
		Hosts:     40,
		Latency:   50 * time.Millisecond,
		FastDelay: 200 * time.Millisecond,
		SlowDelay: 500 * time.Millisecond,
	}
}

const slowHost = "slow.example"

// crawl is what one crawl did, as the server saw it.
type crawl struct {
	Name     string
	Pages    int                    // responses the workers read in time
	Arrivals map[string][]time.Time // per host, when requests reached the server
}

// PagesPerSecond is the crawl's throughput.
func (c *crawl) PagesPerSecond(d time.Duration) float64 { return float64(c.Pages) / d.Seconds() }

// MinGap is the shortest time between two requests to host.
func (c *crawl) MinGap(host string) time.Duration {
	a := c.Arrivals[host]
	var g time.Duration
	for i := 1; i < len(a); i++ {
		if d := a[i].Sub(a[i-1]); i == 1 || d < g {
			g = d
		}
	}
	return g
}

type result struct {
	Ideal    float64 // pages/s with every worker busy
	Ready    crawl
	Frontier crawl
}

// server is the local test server behind every host: it answers after
// the latency and records the arrivals.
type server struct {
	latency time.Duration
	mu      sync.Mutex
	rec     map[string][]time.Time
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.rec[r.Host] = append(s.rec[r.Host], time.Now())
	s.mu.Unlock()
	time.Sleep(s.latency)
	fmt.Fprintf(w, "page %s%s\n", r.Host, r.URL.Path)
}

// take returns the arrivals recorded since the last take.
func (s *server) take() map[string][]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := s.rec
	s.rec = map[string][]time.Time{}
	return rec
}

// loopbackTransport dials addr for every host ending in ".example", and
// refuses any other, so nothing leaves the machine.
func loopbackTransport(addr string, conns int) *http.Transport {
	var d net.Dialer
	return &http.Transport{
		DialContext: func(ctx context.Context, network, hostport string) (net.Conn, error) {
			if h, _, err := net.SplitHostPort(hostport); err != nil || !strings.HasSuffix(h, ".example") {
				return nil, fmt.Errorf("refusing to dial %s: not a simulated host", hostport)
			}
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: conns,
	}
}

// frontier returns the URLs to crawl, in random order: half for
// slow.example, half spread over the fast hosts; enough to keep every
// worker busy for the whole run.
func frontier(o options) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	perHost := int(o.Duration/o.FastDelay) + 2 // more than a fast host can take in the run
	fast := make([]string, 0, o.Hosts*perHost)
	for i := range perHost {
		for h := range o.Hosts {
			fast = append(fast, fmt.Sprintf("http://h%02d.example/page/%d", h, i))
		}
	}
	rng.Shuffle(len(fast), func(i, j int) { fast[i], fast[j] = fast[j], fast[i] })
	urls := make([]string, 0, 2*len(fast))
	slow := 0
	for _, u := range fast {
		if rng.IntN(2) == 0 {
			urls = append(urls, fmt.Sprintf("http://%s/page/%d", slowHost, slow))
			slow++
		}
		urls = append(urls, u)
		if rng.IntN(2) == 0 {
			urls = append(urls, fmt.Sprintf("http://%s/page/%d", slowHost, slow))
			slow++
		}
	}
	return urls
}

// newManager is the throttle of one crawl: per host one request at a time,
// FastDelay apart (SlowDelay for slow.example), no jitter, so the delays
// show as configured. robots.txt is off: the test server has none.
func newManager(o options) (*throttle.ThrottlingManager, error) {
	cfg := throttle.DefaultConfig()
	cfg.Default.Delay, cfg.Default.Jitter = o.FastDelay, throttle.Jitter{}
	slow := cfg.Default
	slow.Delay = o.SlowDelay
	cfg.Scopes = map[string]throttle.ScopeConfig{slowHost: slow}
	cfg.GlobalConcurrency = max(cfg.GlobalConcurrency, o.Workers)
	cfg.Robots.Enabled = false
	return throttle.New(cfg)
}

func run(ctx context.Context, out io.Writer, o options) (result, error) {
	srv := &server{latency: o.Latency, rec: map[string][]time.Time{}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	base := loopbackTransport(ts.Listener.Addr().String(), o.Workers)
	defer base.CloseIdleConnections()
	// The workers hold their permits themselves: the client must not
	// go through m.Transport, which would acquire a second time.
	client := &http.Client{Transport: base}
	urls := frontier(o)

	res := result{Ideal: float64(o.Workers) / o.Latency.Seconds()}
	var err error
	if res.Ready, err = crawlReadyQueue(ctx, client, urls, o); err != nil {
		return res, err
	}
	res.Ready.Arrivals = srv.take()
	if res.Frontier, err = crawlFrontierOrder(ctx, client, urls, o); err != nil {
		return res, err
	}
	res.Frontier.Arrivals = srv.take()
	printTable(out, res, o, len(urls))
	return res, nil
}

// crawlReadyQueue pushes every URL into a ReadyQueue and lets the
// workers pop for o.Duration.
func crawlReadyQueue(ctx context.Context, client *http.Client, urls []string, o options) (crawl, error) {
	m, err := newManager(o)
	if err != nil {
		return crawl{}, err
	}
	q := throttle.NewReadyQueue(m)
	for _, u := range urls {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			return crawl{}, err
		}
		if err := q.Push(req, 0); err != nil {
			return crawl{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	return pool(ctx, "ReadyQueue", o.Workers, func(ctx context.Context) (bool, error) {
		req, p, err := q.Pop(ctx) // the request that can start now, admitted
		if err != nil {
			return false, err
		}
		resp, err := fetch(client, req.WithContext(ctx))
		p.Release(resp, err) // feedback: latency, status, headers
		return err == nil, err
	})
}

// crawlFrontierOrder gives each worker the next URL in frontier order;
// the worker blocks in Acquire until the URL's host admits it.
func crawlFrontierOrder(ctx context.Context, client *http.Client, urls []string, o options) (crawl, error) {
	m, err := newManager(o)
	if err != nil {
		return crawl{}, err
	}
	var next atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	return pool(ctx, "frontier order", o.Workers, func(ctx context.Context) (bool, error) {
		i := int(next.Add(1)) - 1
		if i >= len(urls) {
			<-ctx.Done()
			return false, ctx.Err()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, urls[i], nil)
		if err != nil {
			return false, err
		}
		p, err := m.Acquire(ctx, req) // blocks until the host admits it
		if err != nil {
			return false, err
		}
		resp, err := fetch(client, req)
		p.Release(resp, err)
		return err == nil, err
	})
}

// pool runs workers that call one until ctx ends, and counts the pages
// they fetched. An error stops the worker; one other than the end of the
// run is returned.
func pool(ctx context.Context, name string, workers int, one func(context.Context) (bool, error)) (crawl, error) {
	var (
		pages atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				ok, err := one(ctx)
				if ok {
					pages.Add(1)
				}
				if err == nil {
					continue
				}
				// The end of the run, or a wait that would outlast it
				// (Acquire gives up at once), is no error.
				if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
				return
			}
		})
	}
	wg.Wait()
	return crawl{Name: name, Pages: int(pages.Load())}, first
}

// fetch sends req and reads the body to the end. A request cut off at the
// end of the run returns its error.
func fetch(client *http.Client, req *http.Request) (*http.Response, error) {
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp, err
	}
	if resp.StatusCode != http.StatusOK {
		return resp, errors.New(req.URL.String() + ": " + resp.Status)
	}
	return resp, nil
}

func printTable(out io.Writer, res result, o options, urls int) {
	fmt.Fprintf(out, "%d workers, %v per response; frontier of %d URLs: half for %s (1 request per %v), half over %d hosts (1 per %v each); %v per crawl\n\n",
		o.Workers, o.Latency, urls, slowHost, o.SlowDelay, o.Hosts, o.FastDelay, o.Duration)
	fmt.Fprintf(out, "ideal, every worker busy: %.0f pages, %.1f pages/s\n\n", res.Ideal*o.Duration.Seconds(), res.Ideal)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "crawl\tpages\tpages/s\tof ideal\trequests to "+slowHost+"\tmin gap there\tto other hosts")
	for _, c := range []crawl{res.Ready, res.Frontier} {
		slow, other := len(c.Arrivals[slowHost]), 0
		for h, a := range c.Arrivals {
			if h != slowHost {
				other += len(a)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.0f %%\t%d\t%v\t%d\n", c.Name, c.Pages, c.PagesPerSecond(o.Duration),
			100*c.PagesPerSecond(o.Duration)/res.Ideal, slow, c.MinGap(slowHost).Round(time.Millisecond), other)
	}
	tw.Flush()
	r, f := res.Ready.PagesPerSecond(o.Duration), res.Frontier.PagesPerSecond(o.Duration)
	if f > 0 {
		fmt.Fprintf(out, "\nReadyQueue: %.0fx the pages of workers blocking in frontier order\n", r/f)
	}
}

func main() {
	o := defaultOptions()
	flag.DurationVar(&o.Duration, "duration", o.Duration, "how long each crawl runs")
	flag.IntVar(&o.Workers, "workers", o.Workers, "workers in the pool")
	flag.Parse()
	if o.Workers < 1 || o.Duration <= 0 {
		fmt.Fprintln(os.Stderr, "workerpool: -workers and -duration must be positive")
		os.Exit(2)
	}
	if _, err := run(context.Background(), os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "workerpool:", err)
		os.Exit(1)
	}
}
