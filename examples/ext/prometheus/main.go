// Command prometheus feeds Prometheus metrics from throttle's hooks
// (package hooks) while a crawl runs, and serves them on /metrics (with
// the manager's status page on /status).
//
// Three known sites and a link farm are crawled through a
// throttle.Transport:
//
//	shop.example            always 200
//	busy.example            429 with Retry-After: 1 on its 5th and 8th request
//	flaky.example           503 on its 6th and 7th request
//	f000..f029.farm.example one page each: 30 hosts met once
//
// The metrics (in their own registry):
//
//	throttle_requests_total{scope,class}    released permits by status class (Released)
//	throttle_robots_txt_total{scope,class}  the manager's robots.txt fetches, apart (Released, Robots set)
//	throttle_backoff_signals_total{scope}   backoff signals (Backoff)
//	throttle_gates_total{scope}             server-given waits (GateSet)
//	throttle_delay_seconds{scope}           current delay (DelayChanged), known scopes only
//	throttle_concurrency{scope}             current concurrency (DelayChanged), known scopes only
//	throttle_wait_seconds                   histogram of the time Acquire waited (Admitted), pages only
//	throttle_waiting                        callers waiting now
//
// The scope label is bounded: a known host keeps its name, every other
// scope is "other", so the farm's 30 hosts (or a million) make no new
// series.
//
// Run it from examples/ext (about 5 s):
//
//	go run ./prometheus
//	go run ./prometheus -addr 127.0.0.1:9100 -wait   # then scrape /metrics
//
// Everything listens on 127.0.0.1; nothing leaves the machine.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/hooks"
	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/crawlerkit/throttle/status"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// known are the hosts that get their own scope label.
var known = []string{"shop.example", "busy.example", "flaky.example"}

// farmHosts is how many link-farm hosts the crawl meets.
const farmHosts = 30

// pagesPerHost is how many pages of each known site the crawl fetches.
const pagesPerHost = 10

// delay is every scope's configured Delay (jitter off).
const delay = 200 * time.Millisecond

// otherScope is the label of every scope not in the known set.
const otherScope = "other"

// scopeLabels maps scope keys to bounded label values. Label values are
// series: one per host of a link farm would grow the registry, and the
// TSDB behind it, without end. Keep names for a known set (the sites
// you configure, or the top N by traffic recomputed now and then from
// ThrottlingManager.Stats) and fold the rest into "other".
type scopeLabels map[string]bool

func newScopeLabels(keys ...string) scopeLabels {
	l := scopeLabels{}
	for _, k := range keys {
		l[k] = true
	}
	return l
}

// label returns scope, or "other" for a scope outside the set.
func (l scopeLabels) label(scope string) string {
	if l[scope] {
		return scope
	}
	return otherScope
}

// metrics are the collectors the hooks feed.
type metrics struct {
	labels      scopeLabels
	requests    *prometheus.CounterVec
	robots      *prometheus.CounterVec
	signals     *prometheus.CounterVec
	gates       *prometheus.CounterVec
	delay       *prometheus.GaugeVec
	concurrency *prometheus.GaugeVec
	wait        prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer, labels scopeLabels) *metrics {
	x := &metrics{
		labels: labels,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_requests_total",
			Help: "Released permits by scope and status class (2xx, 4xx, ..., errors).",
		}, []string{"scope", "class"}),
		robots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_robots_txt_total",
			Help: "The manager's own robots.txt fetches by scope and status class, not in throttle_requests_total.",
		}, []string{"scope", "class"}),
		signals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_backoff_signals_total",
			Help: "Responses that were backoff signals (429, 503, timeouts ...), by scope.",
		}, []string{"scope"}),
		gates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "throttle_gates_total",
			Help: "Server-given waits (Retry-After, RateLimit headers) that gated a scope.",
		}, []string{"scope"}),
		delay: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "throttle_delay_seconds",
			Help: "A known scope's current delay between request starts, set when it changes.",
		}, []string{"scope"}),
		concurrency: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "throttle_concurrency",
			Help: "A known scope's current concurrency, set when it changes.",
		}, []string{"scope"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "throttle_wait_seconds",
			Help:    "How long Acquire waited for a permit.",
			Buckets: []float64{0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	reg.MustRegister(x.requests, x.robots, x.signals, x.gates, x.delay, x.concurrency, x.wait)
	return x
}

// class is a status's class label.
func class(status int, err error) string {
	if err != nil || status < 100 || status > 599 {
		return "errors"
	}
	return strconv.Itoa(status/100) + "xx"
}

// hooks feed the metrics. They run on the goroutine of the Acquire or
// Release, without the manager's locks; the client's collectors are
// atomic.
func (x *metrics) hooks() hooks.Hooks {
	return hooks.Hooks{
		Admitted: func(e hooks.Admitted) {
			if !e.Robots { // the crawl's requests only, not the manager's robots.txt fetches
				x.wait.Observe(e.Waited.Seconds())
			}
		},
		Released: func(e hooks.Released) {
			// A robots.txt fetch is the manager's, not a page: counted
			// apart, as Stats does (Counts.Robots), so a 404 robots.txt
			// is no 4xx of the crawl.
			counter := x.requests
			if e.Robots {
				counter = x.robots
			}
			c := class(e.Status, e.Err)
			for _, s := range e.Scopes {
				counter.WithLabelValues(x.labels.label(s), c).Inc()
			}
		},
		Backoff: func(e hooks.Backoff) {
			x.signals.WithLabelValues(x.labels.label(e.Scope)).Inc()
		},
		GateSet: func(e hooks.GateSet) {
			x.gates.WithLabelValues(x.labels.label(e.Scope)).Inc()
		},
		DelayChanged: func(e hooks.DelayChanged) {
			// A gauge of "other" would show whichever host changed last:
			// meaningless, so unknown scopes have none.
			if l := x.labels.label(e.Scope); l != otherScope {
				x.delay.WithLabelValues(l).Set(e.NewDelay.Seconds())
				x.concurrency.WithLabelValues(l).Set(float64(e.NewConcurrency))
			}
		},
	}
}

// server answers for every simulated host and counts what it answered.
type server struct {
	mu       sync.Mutex
	pages    map[string]int         // page requests by host
	statuses map[string]map[int]int // answers to pages by host and status
	robots   map[string]map[int]int // answers to robots.txt by host and status
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	s.mu.Lock()
	status := http.StatusOK
	answered := s.statuses
	if r.URL.Path == "/robots.txt" {
		status = http.StatusNotFound
		answered = s.robots
	} else {
		s.pages[host]++
		n := s.pages[host]
		switch {
		case host == "busy.example" && (n == 5 || n == 8):
			w.Header().Set("Retry-After", "1")
			status = http.StatusTooManyRequests
		case host == "flaky.example" && (n == 6 || n == 7):
			status = http.StatusServiceUnavailable
		}
	}
	if answered[host] == nil {
		answered[host] = map[int]int{}
	}
	answered[host][status]++
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s %s\n", host, r.URL.Path)
}

// result is what the server answered, by host and status, to pages and to
// robots.txt, and the metrics the hooks fed.
type result struct {
	Statuses map[string]map[int]int
	Robots   map[string]map[int]int
	Elapsed  time.Duration
	Metrics  *metrics
}

// run crawls the sites with metrics registered on reg, and mounts
// /metrics (from gather) and /status on mon, which the caller serves.
func run(ctx context.Context, out io.Writer, reg *prometheus.Registry, mon *http.ServeMux) (result, error) {
	srv := &server{pages: map[string]int{}, statuses: map[string]map[int]int{}, robots: map[string]map[int]int{}}
	// A local server for the hosts (the known ones and the link farm's);
	// the client dials it for them only.
	base, stop := localnet.Serve(srv, append(slices.Clone(known), "*.farm.example")...)
	defer stop()

	x := newMetrics(reg, newScopeLabels(known...))
	cfg := throttle.DefaultConfig()
	cfg.Default.Delay, cfg.Default.Jitter = delay, throttle.Jitter{}
	cfg.Default.Backoff.Jitter = throttle.Jitter{} // exact backoff steps: the same figures each run
	cfg.Hooks = x.hooks()
	m, err := throttle.New(cfg)
	if err != nil {
		return result{}, err
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "throttle_waiting",
		Help: "Callers waiting in Acquire now.",
	}, func() float64 { return float64(m.Waiting()) }))
	mon.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mon.Handle("/status", status.Handler(m))

	client := &http.Client{Transport: m.Transport(base)}

	var urls []string
	for i := range pagesPerHost {
		for _, h := range known {
			urls = append(urls, fmt.Sprintf("http://%s/page/%d", h, i))
		}
	}
	for i := range farmHosts {
		urls = append(urls, fmt.Sprintf("http://f%03d.farm.example/", i))
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(urls))
	for _, u := range urls {
		wg.Go(func() {
			if err := fetch(ctx, client, u); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}

	res := result{Statuses: map[string]map[int]int{}, Robots: map[string]map[int]int{}, Elapsed: time.Since(start), Metrics: x}
	srv.mu.Lock()
	for h, st := range srv.statuses {
		res.Statuses[h] = st
	}
	for h, st := range srv.robots {
		res.Robots[h] = st
	}
	srv.mu.Unlock()
	fmt.Fprintf(out, "crawled %d pages on %d hosts in %v\n", len(urls), len(known)+farmHosts, res.Elapsed.Round(10*time.Millisecond))
	return res, nil
}

// fetch gets u and reads the body, which releases the permit.
func fetch(ctx context.Context, client *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}

// printMetrics writes the throttle_ series of a scrape of url.
func printMetrics(out io.Writer, url string) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "throttle_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "where to serve /metrics and /status")
	wait := flag.Bool("wait", false, "keep serving after the crawl until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
	mon := http.NewServeMux()
	go http.Serve(ln, mon)
	fmt.Printf("serving http://%s/metrics and http://%s/status\n", ln.Addr(), ln.Addr())

	crawlCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := run(crawlCtx, os.Stdout, prometheus.NewRegistry(), mon); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
	if err := printMetrics(os.Stdout, "http://"+ln.Addr().String()+"/metrics"); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus:", err)
		os.Exit(1)
	}
	if *wait {
		fmt.Println("crawl done; still serving, Ctrl-C to stop")
		<-ctx.Done()
	}
}
