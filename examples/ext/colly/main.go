// Command colly crawls a small local site of three hosts with a colly
// collector whose HTTP transport is throttle's:
//
//	c := colly.NewCollector(colly.Async(true), ...)
//	c.WithTransport(m.Transport(base))
//
// colly gets no LimitRule: the throttle paces every request per host, and
// learns from the answers, whatever colly's goroutines do.
//
//	a.example  the default scope: 1 at a time, Delay 300ms
//	b.example  its robots.txt says Crawl-delay: 1, which the throttle
//	           fetches and obeys (1 at a time, 1 s apart)
//	c.example  configured: 2 at a time, Delay 100ms; pages take 300ms
//
// colly's request timeout (SetRequestTimeout, default 10 s) counts the
// time a request waits in the throttle: the example gives it a minute.
//
// The server records when each request arrives and how many are in
// flight per host. Run it from examples/ext (about 7 s):
//
//	go run ./colly
//	go run ./colly -throttle=false   # the same crawl with colly alone
//	go run ./colly -timeout 2s       # the waits for b.example's Crawl-delay outlast it
//	go run ./colly -parallelism 2    # colly's LimitRule on top: head-of-line blocking
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
	"sync"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/gocolly/colly/v2"
)

// hostSpec is one host of the site: its throttle settings as the example
// expects them to hold, and how long its pages take.
type hostSpec struct {
	Host        string
	Concurrency int
	Delay       time.Duration
	Work        time.Duration
	Robots      string // robots.txt body; "" answers 404
}

var site = []hostSpec{
	{Host: "a.example", Concurrency: 1, Delay: 300 * time.Millisecond, Work: 20 * time.Millisecond},
	{Host: "b.example", Concurrency: 1, Delay: time.Second, Work: 20 * time.Millisecond,
		Robots: "User-agent: *\nCrawl-delay: 1\n"},
	{Host: "c.example", Concurrency: 2, Delay: 100 * time.Millisecond, Work: 300 * time.Millisecond},
}

// pagesPerHost is how many pages each host has, its front page included.
const pagesPerHost = 6

func spec(host string) *hostSpec {
	for i := range site {
		if site[i].Host == host {
			return &site[i]
		}
	}
	return nil
}

// hostLog is what the server saw of one host.
type hostLog struct {
	Arrivals []time.Time // every page request
	Robots   []time.Time // every robots.txt request
	Pages    int
	Peak     int // most requests in flight at once, robots.txt included
	inFlight int
}

// MinGap is the shortest time between two consecutive page arrivals. The
// robots.txt fetch is not among them: the throttle counts it apart, and
// it is no start for the Delay (only for a Crawl-delay, see FirstAfter).
func (h *hostLog) MinGap() time.Duration {
	var g time.Duration
	for i := 1; i < len(h.Arrivals); i++ {
		if d := h.Arrivals[i].Sub(h.Arrivals[i-1]); i == 1 || d < g {
			g = d
		}
	}
	return g
}

// FirstAfter is the time from the robots.txt request to the first page
// request; 0 without both.
func (h *hostLog) FirstAfter() time.Duration {
	if len(h.Robots) == 0 || len(h.Arrivals) == 0 {
		return 0
	}
	return h.Arrivals[0].Sub(h.Robots[0])
}

// server serves the site and logs the arrivals per host.
type server struct {
	mu   sync.Mutex
	logs map[string]*hostLog
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	sp := spec(host)
	if sp == nil {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	l := s.logs[host]
	if r.URL.Path == "/robots.txt" {
		l.Robots = append(l.Robots, time.Now())
	} else {
		l.Arrivals = append(l.Arrivals, time.Now())
		l.Pages++
	}
	l.inFlight++
	l.Peak = max(l.Peak, l.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		l.inFlight--
		s.mu.Unlock()
	}()

	time.Sleep(sp.Work)
	if r.URL.Path == "/robots.txt" {
		if sp.Robots == "" {
			http.NotFound(w, r)
			return
		}
		io.WriteString(w, sp.Robots)
		return
	}
	// Every page links to every page of its host and to the other hosts'
	// front pages.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprintf(w, "<!DOCTYPE html><title>%s%s</title><ul>\n", host, r.URL.Path)
	for i := 1; i < pagesPerHost; i++ {
		fmt.Fprintf(w, "<li><a href=\"/p/%d\">page %d</a>\n", i, i)
	}
	for _, o := range site {
		fmt.Fprintf(w, "<li><a href=\"http://%s/\">%s</a>\n", o.Host, o.Host)
	}
	fmt.Fprintln(w, "</ul>")
}

// newManager configures the throttle: defaults but no jitter, a 300 ms
// delay, and c.example's own settings. b.example's delay comes from its
// robots.txt.
func newManager() (*throttle.ThrottlingManager, error) {
	cfg := throttle.DefaultConfig()
	cfg.Default.Delay, cfg.Default.Jitter = 300*time.Millisecond, throttle.Jitter{}
	c := cfg.Default
	c.Concurrency, c.Delay = 2, 100*time.Millisecond
	cfg.Scopes = map[string]throttle.ScopeConfig{"c.example": c}
	return throttle.New(cfg)
}

// result is what the server saw, by host, and the pages colly could not
// fetch.
type result struct {
	Logs    map[string]*hostLog
	Elapsed time.Duration
	Errors  []error // from colly's OnError: the page's URL, and why
}

// options configures one crawl.
type options struct {
	Throttled bool // send colly's requests through the throttle
	// RequestTimeout is colly's request timeout (SetRequestTimeout):
	// its http.Client's Timeout, which counts the wait in the throttle
	// too. Zero leaves colly's default, 10 s.
	RequestTimeout time.Duration
	// Parallelism, when not zero, adds colly's LimitRule{DomainGlob: "*",
	// Parallelism: Parallelism} on top of the throttle: the example's
	// point is to leave it out.
	Parallelism int
}

// run crawls the site from a.example's front page with colly.
func run(ctx context.Context, out io.Writer, o options) (result, error) {
	srv := &server{logs: map[string]*hostLog{}}
	for _, h := range site {
		srv.logs[h.Host] = &hostLog{}
	}
	var hosts []string
	for _, h := range site {
		hosts = append(hosts, h.Host)
	}
	// A local server for the site's hosts; the client dials it for them
	// only.
	base, stop := localnet.Serve(srv, hosts...)
	defer stop()

	c := colly.NewCollector(colly.Async(true), colly.AllowedDomains(hosts...), colly.StdlibContext(ctx))
	// colly's request timeout counts the time a request waits in the
	// throttle too: give it room (main: a minute).
	if o.RequestTimeout > 0 {
		c.SetRequestTimeout(o.RequestTimeout)
	}
	if o.Parallelism > 0 {
		if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: o.Parallelism}); err != nil {
			return result{}, err
		}
	}
	if o.Throttled {
		m, err := newManager()
		if err != nil {
			return result{}, err
		}
		c.WithTransport(m.Transport(base))
	} else {
		c.WithTransport(base)
	}

	var (
		mu   sync.Mutex
		errs []error
	)
	c.OnHTML("a[href]", func(e *colly.HTMLElement) {
		e.Request.Visit(e.Attr("href"))
	})
	c.OnError(func(r *colly.Response, err error) {
		mu.Lock()
		errs = append(errs, fmt.Errorf("%s: %w", r.Request.URL, err))
		mu.Unlock()
	})

	start := time.Now()
	if err := c.Visit("http://a.example/"); err != nil {
		return result{}, err
	}
	c.Wait()
	srv.mu.Lock()
	defer srv.mu.Unlock()
	res := result{Logs: srv.logs, Elapsed: time.Since(start), Errors: errs}
	printTable(out, res, o)
	return res, nil
}

func printTable(out io.Writer, res result, o options) {
	rule := "no LimitRule"
	if o.Parallelism > 0 {
		rule = fmt.Sprintf("LimitRule{DomainGlob: \"*\", Parallelism: %d}", o.Parallelism)
	}
	if o.Throttled {
		fmt.Fprintf(out, "colly with throttle's Transport, %s:\n", rule)
	} else {
		fmt.Fprintf(out, "colly alone, %s:\n", rule)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "host\tpages\trobots.txt\tpeak in flight\tthrottle concurrency\tmin gap\tthrottle delay\trobots.txt to page 1")
	for _, h := range site {
		l := res.Logs[h.Host]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\t%v\t%v\n", h.Host, l.Pages, len(l.Robots), l.Peak, h.Concurrency,
			l.MinGap().Round(time.Millisecond), h.Delay, l.FirstAfter().Round(time.Millisecond))
	}
	tw.Flush()
	fmt.Fprintf(out, "done in %v\n", res.Elapsed.Round(10*time.Millisecond))
	for _, err := range res.Errors {
		fmt.Fprintln(out, "error:", err)
	}
}

func main() {
	o := options{RequestTimeout: time.Minute}
	flag.BoolVar(&o.Throttled, "throttle", true, "send colly's requests through the throttle")
	flag.DurationVar(&o.RequestTimeout, "timeout", o.RequestTimeout, "colly's request timeout, the wait in the throttle included (0: colly's default, 10s)")
	flag.IntVar(&o.Parallelism, "parallelism", 0, "add colly's LimitRule{DomainGlob: \"*\", Parallelism: N} on top of the throttle")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := run(ctx, os.Stdout, o)
	if err == nil && len(res.Errors) > 0 {
		err = fmt.Errorf("%d pages failed", len(res.Errors))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "colly:", err)
		os.Exit(1)
	}
}
