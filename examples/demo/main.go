// Command demo crawls three local test servers through a throttle.Transport
// and shows what the throttle does with each of them:
//
//   - fast answers in 5 ms: a fixed Delay paces it;
//   - slow answers in 300 ms and more under load: AutoThrottle moves its
//     delay to follow latency / TargetConcurrency;
//   - limited has a hidden rate limit and answers 429 with Retry-After
//     above it: backoff slows the scope down, then each quiet Window
//     (60 s, the default: run with -duration 3m to see it) brings the
//     delay back toward the limit.
//
// Every setting the demo leaves alone is the default the README
// advertises.
//
// Run it from the module root:
//
//	go run ./examples/demo [-duration 20s] [-workers 12]
//
// The servers listen on 127.0.0.1 only; nothing leaves the machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
)

// options configures one run of the demo.
type options struct {
	Duration  time.Duration // how long new requests are sent
	Workers   int           // concurrent crawler workers
	TTY       bool          // rewrite the progress line in place with "\r"
	Tick      time.Duration // progress sampling period (rate over the last Tick)
	LineEvery int           // without TTY, print every LineEvery ticks
	Drain     time.Duration // how long in-flight requests may finish at the end
}

func defaultOptions() options {
	return options{
		Duration:  20 * time.Second,
		Workers:   12,
		Tick:      time.Second,
		LineEvery: 2,
		Drain:     3 * time.Second,
	}
}

func main() {
	opts := defaultOptions()
	flag.DurationVar(&opts.Duration, "duration", opts.Duration, "how long to crawl")
	flag.IntVar(&opts.Workers, "workers", opts.Workers, "number of crawler workers")
	flag.Parse()
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		opts.TTY = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	_, err := run(ctx, os.Stdout, opts)
	stop()
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(os.Stderr, "demo: interrupted")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// summary is the outcome of a run, one entry per site in the order
// fast, slow, limited.
type summary struct {
	Elapsed      time.Duration // how long requests were sent
	Sites        []siteSummary
	ClientErrors int   // requests that failed at the client (not at shutdown)
	FirstError   error // the first of them
}

type siteSummary struct {
	Name          string
	Requests      int // arrivals at the server
	OK, TooMany   int // 2xx, 429
	Other         int // any other status
	Cut           int // requests cut off by the client before the answer
	Rate, OKRate  float64
	MeanGap       time.Duration // mean time between arrivals
	MaxConcurrent int           // most requests in flight at the server
	MeanLatency   time.Duration // mean time the server took to answer
	MeanInFlight  float64       // mean requests in flight at the server
	HiddenLimit   float64       // req/s; 0 when the server has none
	Late429       int           // 429s after the scope's first Window
	LateOKRate    float64       // 2xx/s in the second half of the run
	LateGap       time.Duration // mean time between arrivals in the second half
	Delay         delayTrace    // the delay changes the throttle logged
	Explanation   string
}

// run starts the servers, crawls them for opts.Duration through a
// throttled http.Client, writes progress and a summary table to out, and
// shuts everything down before it returns.
func run(ctx context.Context, out io.Writer, opts options) (summary, error) {
	if opts.Duration <= 0 || opts.Workers < 1 {
		return summary{}, errors.New("duration and workers must be positive")
	}
	if opts.Tick <= 0 {
		opts.Tick = time.Second
	}
	if opts.LineEvery < 1 {
		opts.LineEvery = 1
	}

	sites := []*site{newFast(), newSlow(), newLimited(4, 2)}
	// One local server answers for fast.example, slow.example and
	// limited.example; the client dials it for them and nothing else.
	base, stop := localnet.Serve(hosts(sites), "*.example")
	defer stop()

	// The throttle's warnings (logged from the goroutine that releases a
	// permit) and the progress lines share out: one writer at a time.
	out = &lockedWriter{w: out}
	logs := newDelayLog(out)
	cfg := demoConfig()
	cfg.Logger = logs.logger()
	// This scoper names each scope after its site (fast for
	// fast.example) for the tables below; HostScope would give the host.
	cfg.Scoper = func(req *http.Request) ([]throttle.Scope, error) {
		if req.URL != nil {
			for _, s := range sites {
				if req.URL.Host == s.host() {
					return []throttle.Scope{{Key: s.name}}, nil
				}
			}
		}
		return throttle.HostScope(req)
	}
	m, err := throttle.New(cfg)
	if err != nil {
		return summary{}, err
	}
	client := &http.Client{Transport: m.Transport(sendGuard{base})}

	printHeader(out, sites, cfg)

	// crawlCtx ends the crawl: workers stop taking URLs and requests still
	// waiting in the throttle give up. Requests already sent may finish
	// (reqCtx) for up to opts.Drain, so the servers' counts are complete.
	crawlCtx, endCrawl := context.WithTimeout(ctx, opts.Duration)
	defer endCrawl()
	reqCtx, cutRequests := context.WithCancel(ctx)
	defer cutRequests()

	start := time.Now()
	front := newFrontier(sites)
	var (
		wg        sync.WaitGroup
		errMu     sync.Mutex
		clientErr int
		firstErr  error
	)
	for range opts.Workers {
		wg.Go(func() {
			for crawlCtx.Err() == nil {
				i, url := front.take()
				err := fetch(crawlCtx, reqCtx, client, url)
				front.done(i)
				if err != nil && !errors.Is(err, errCrawlOver) && crawlCtx.Err() == nil {
					errMu.Lock()
					clientErr++
					if firstErr == nil {
						firstErr = err
					}
					errMu.Unlock()
				}
			}
		})
	}

	ticker := time.NewTicker(opts.Tick)
	for tick := 1; crawlCtx.Err() == nil; tick++ {
		select {
		case <-crawlCtx.Done():
		case now := <-ticker.C:
			if opts.TTY || tick%opts.LineEvery == 0 {
				printProgress(out, opts, now.Sub(start), sites, logs, now)
			}
		}
	}
	ticker.Stop()
	elapsed := min(time.Since(start), opts.Duration)
	if opts.TTY {
		fmt.Fprintln(out)
	}
	drain := time.AfterFunc(opts.Drain, cutRequests)
	wg.Wait()
	drain.Stop()

	sum := summarize(sites, cfg, elapsed, start, logs)
	sum.ClientErrors, sum.FirstError = clientErr, firstErr
	printSummary(out, sum)
	return sum, ctx.Err() // non-nil when interrupted
}

// demoConfig is the throttle configuration of the demo: DefaultConfig
// with a scope entry per site, each changing only what it names.
func demoConfig() throttle.Config {
	cfg := throttle.DefaultConfig()
	cfg.GlobalConcurrency = 16 // the default; above the workers, so it never binds

	fast := cfg.Default
	// One slot is enough: at 25ms between starts and 5ms answers a slot
	// is free again before the next start is due (with 4 the throttle
	// warns that Concurrency has no effect).
	fast.Concurrency = 1
	fast.Delay = 25 * time.Millisecond // ±50 % jitter (the default) around it

	slow := cfg.Default
	slow.Concurrency = 4
	slow.Delay = 0 // the floor of the AutoThrottle delay
	slow.AutoThrottle.Enabled = true
	slow.AutoThrottle.StartDelay = 500 * time.Millisecond
	slow.AutoThrottle.TargetConcurrency = 2
	slow.AutoThrottle.MaxDelay = 5 * time.Second

	limited := cfg.Default
	limited.Concurrency = 2
	limited.Delay = 100 * time.Millisecond // 10 req/s: more than the hidden limit
	// Backoff is on by default: 429 is a signal, Retry-After gates the
	// scope, a 429 that confirms a limit doubles the delay, and each
	// quiet Window bisects it back toward the limit.

	cfg.Scopes = map[string]throttle.ScopeConfig{"fast": fast, "slow": slow, "limited": limited}
	return cfg
}

// errCrawlOver is returned for a request that had not been sent yet when
// the crawl ended.
var errCrawlOver = errors.New("crawl over")

type sendStateKey struct{}

const (
	stateWaiting   int32 = iota // in the throttle's queue
	stateSent                   // handed to the network
	stateCancelled              // the crawl ended first
)

// sendGuard is the base RoundTripper under the throttle's Transport: the
// throttle calls it once the request holds its permit. It marks the request
// sent, unless the end of the crawl cancelled it first.
type sendGuard struct{ base http.RoundTripper }

func (g sendGuard) RoundTrip(req *http.Request) (*http.Response, error) {
	if st, ok := req.Context().Value(sendStateKey{}).(*atomic.Int32); ok && !st.CompareAndSwap(stateWaiting, stateSent) {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errCrawlOver
	}
	return g.base.RoundTrip(req)
}

// fetch GETs url and reads the body to the end. When crawlCtx ends, the
// request is cancelled if it is still waiting for the throttle; once sent,
// it runs until reqCtx ends.
func fetch(crawlCtx, reqCtx context.Context, client *http.Client, url string) error {
	ctx, cancel := context.WithCancel(reqCtx)
	defer cancel()
	st := new(atomic.Int32)
	ctx = context.WithValue(ctx, sendStateKey{}, st)
	stop := context.AfterFunc(crawlCtx, func() {
		if st.CompareAndSwap(stateWaiting, stateCancelled) {
			cancel()
		}
	})
	defer stop()

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		if st.Load() == stateCancelled {
			return errCrawlOver
		}
		return err
	}
	defer resp.Body.Close() // releases the permit, with the response's feedback
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// frontier hands out URLs of the three sites. It gives each worker the
// site that has the fewest workers on it, so a slow or rate-limited site
// never ties up the whole pool waiting in the throttle while the fast site
// has nobody left to fetch it (what a single shared queue would do).
type frontier struct {
	mu    sync.Mutex
	sites []*site
	busy  []int
	seq   []int
	rr    int
}

func newFrontier(sites []*site) *frontier {
	return &frontier{sites: sites, busy: make([]int, len(sites)), seq: make([]int, len(sites))}
}

func (f *frontier) take() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	best := -1
	for k := range f.sites {
		i := (f.rr + k) % len(f.sites)
		if best < 0 || f.busy[i] < f.busy[best] {
			best = i
		}
	}
	f.rr = (best + 1) % len(f.sites)
	f.busy[best]++
	f.seq[best]++
	return best, fmt.Sprintf("http://%s/page/%d", f.sites[best].host(), f.seq[best])
}

func (f *frontier) done(i int) {
	f.mu.Lock()
	f.busy[i]--
	f.mu.Unlock()
}
