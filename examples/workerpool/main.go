// Command workerpool crawls many hosts with a fixed pool of workers fed
// from a throttle.ReadyQueue, and compares it with the same pool taking
// URLs in frontier order and calling Acquire, blocking or not.
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
//   - frontier, requeue: the worker loop of the README. Each worker waits
//     in Acquire at most MaxWait; a wait that would outlast it fails at
//     once (as x/time/rate's Wait does) with a *throttle.WaitError that
//     says when the request could start, and the worker puts the URL back
//     into the frontier for then and takes the next one. A loop that tried
//     again at once would fail again at once, for ever: a spin.
//
// Run it from the module root:
//
//	go run ./examples/workerpool [-duration 3s] [-workers 8]
//
// The hosts are one local test server; nothing leaves the machine.
package main

import (
	"container/heap"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
)

// options configures one run of the example.
type options struct {
	Duration  time.Duration // how long each crawl runs
	Workers   int           // the pool
	Hosts     int           // fast hosts, besides slow.example
	Latency   time.Duration // every response's
	FastDelay time.Duration // between two requests to a fast host
	SlowDelay time.Duration // between two requests to slow.example
	MaxWait   time.Duration // the longest wait in Acquire of the requeueing loop

	// OnWaitError, if not nil, hears of every wait the requeueing loop
	// gave up: the URL, when, and when it was put back for.
	OnWaitError func(url string, at, readyAt time.Time)
}

func defaultOptions() options {
	return options{
		Duration:  3 * time.Second,
		Workers:   8,
		Hosts:     40,
		Latency:   50 * time.Millisecond,
		FastDelay: 200 * time.Millisecond,
		SlowDelay: 500 * time.Millisecond,
		MaxWait:   250 * time.Millisecond,
	}
}

const slowHost = "slow.example"

// crawl is what one crawl did, as the server saw it.
type crawl struct {
	Name       string
	Pages      int                    // responses the workers read in time
	WaitErrors int                    // waits in Acquire given up (the requeueing loop)
	Arrivals   map[string][]time.Time // per host, when requests reached the server
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
	Requeue  crawl
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

// frontierURLs returns the URLs to crawl, in random order: half for
// slow.example, half spread over the fast hosts; enough to keep every
// worker busy for the whole run.
func frontierURLs(o options) []string {
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
	base, stop := localnet.Serve(srv, "*.example")
	defer stop()
	// The workers hold their permits themselves: the client must not
	// go through m.Transport, which would acquire a second time.
	client := &http.Client{Transport: base}
	urls := frontierURLs(o)

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
	if res.Requeue, err = crawlRequeue(ctx, client, urls, o); err != nil {
		return res, err
	}
	res.Requeue.Arrivals = srv.take()
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

// crawlRequeue is the worker loop of the README: each worker takes the
// next URL that is due and waits in Acquire at most o.MaxWait. When the
// wait would outlast that, Acquire fails at once with a *WaitError that
// says when the request could start (ReadyAt); the worker puts the URL
// back into the frontier for then and takes the next one. Trying it again
// at once would fail again at once: the loop would spin. At the end of
// the run every URL left is due after it, and the workers stop.
func crawlRequeue(ctx context.Context, client *http.Client, urls []string, o options) (crawl, error) {
	m, err := newManager(o)
	if err != nil {
		return crawl{}, err
	}
	f := newFrontier(urls)
	var waitErrors atomic.Int64
	ctx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	c, err := pool(ctx, "frontier, requeue", o.Workers, func(ctx context.Context) (bool, error) {
		u, ok := f.next(ctx) // the next URL that is due
		if !ok {
			return false, ctx.Err()
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return false, err
		}
		wait, cancelWait := context.WithTimeout(ctx, o.MaxWait)
		p, err := m.Acquire(wait, req)
		cancelWait()
		var we *throttle.WaitError
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return false, ctx.Err() // the end of the run
		case errors.As(err, &we) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, throttle.ErrScopeRefusing)):
			// The wait would outlast MaxWait (or the scope refuses):
			// back into the frontier for when it can start. ReadyAt is
			// zero only after a wait that took the whole MaxWait.
			now := time.Now()
			at := we.ReadyAt
			if at.IsZero() {
				at = now
			}
			f.push(u, at)
			waitErrors.Add(1)
			if o.OnWaitError != nil {
				o.OnWaitError(u, now, at)
			}
			return false, nil
		default:
			return false, err // a bad URL, a robots.txt that disallows it ...
		}
		resp, err := fetch(client, req)
		p.Release(resp, err)
		return err == nil, err
	})
	c.WaitErrors = int(waitErrors.Load())
	return c, err
}

// frontier holds URLs, each due at a time: at first all of them at once,
// in order; a URL put back is due when it can start. Safe for concurrent
// use.
type frontier struct {
	mu   sync.Mutex
	due  dueHeap
	seq  int
	wake chan struct{} // closed, and replaced, by every push
}

func newFrontier(urls []string) *frontier {
	f := &frontier{wake: make(chan struct{})}
	now := time.Now()
	for _, u := range urls {
		f.pushLocked(u, now)
	}
	return f
}

// push puts u back into the frontier, due at at.
func (f *frontier) push(u string, at time.Time) {
	f.mu.Lock()
	f.pushLocked(u, at)
	close(f.wake)
	f.wake = make(chan struct{})
	f.mu.Unlock()
}

func (f *frontier) pushLocked(u string, at time.Time) {
	heap.Push(&f.due, dueURL{url: u, at: at, seq: f.seq})
	f.seq++
}

// next returns the URL due first, once it is due; false when ctx ends
// first.
func (f *frontier) next(ctx context.Context) (string, bool) {
	for {
		f.mu.Lock()
		wake := f.wake
		var timer *time.Timer
		if len(f.due) > 0 {
			d := time.Until(f.due[0].at)
			if d <= 0 {
				u := heap.Pop(&f.due).(dueURL).url
				f.mu.Unlock()
				return u, true
			}
			timer = time.NewTimer(d)
		}
		f.mu.Unlock()
		var fire <-chan time.Time
		if timer != nil {
			fire = timer.C
		}
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return "", false
		case <-wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// dueURL is a URL of the frontier and when it is due; seq keeps the order
// of URLs due at the same time.
type dueURL struct {
	url string
	at  time.Time
	seq int
}

// dueHeap orders dueURLs by time, then by seq (container/heap).
type dueHeap []dueURL

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h dueHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)   { *h = append(*h, x.(dueURL)) }
func (h *dueHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
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
	fmt.Fprintln(tw, "crawl\tpages\tpages/s\tof ideal\trequests to "+slowHost+"\tmin gap there\tto other hosts\twaits given up")
	for _, c := range []crawl{res.Ready, res.Frontier, res.Requeue} {
		slow, other := len(c.Arrivals[slowHost]), 0
		for h, a := range c.Arrivals {
			if h != slowHost {
				other += len(a)
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.0f %%\t%d\t%v\t%d\t%d\n", c.Name, c.Pages, c.PagesPerSecond(o.Duration),
			100*c.PagesPerSecond(o.Duration)/res.Ideal, slow, c.MinGap(slowHost).Round(time.Millisecond), other, c.WaitErrors)
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
