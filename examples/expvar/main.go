// Command expvar feeds the standard library's expvar from throttle's
// hooks (package hooks) while a crawl runs, and serves both /debug/vars
// and the manager's status page.
//
// Four local sites are crawled through a throttle.Transport:
//
//	shop.example   always 200
//	news.example   404 for every fourth page
//	busy.example   429 with Retry-After: 1 on its 5th and 8th request
//	flaky.example  503 on its 6th and 7th request
//
// The hooks publish, under the expvar name "throttle": requests by status
// class (Released), permits and the time callers waited for them
// (Admitted), the manager's own robots.txt fetches by status class apart
// from those (Released, Robots set), backoff signals by scope (Backoff), each scope's current
// delay and concurrency (DelayChanged), server gates by scope and until
// when (GateSet), warnings (Warning), and the callers waiting now.
//
// Run it from the module root (about 5 s):
//
//	go run ./examples/expvar
//	go run ./examples/expvar -addr 127.0.0.1:8080 -wait   # then open /status and /debug/vars
//
// Everything listens on 127.0.0.1; nothing leaves the machine.
package main

import (
	"context"
	"encoding/json"
	"expvar"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/hooks"
	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/crawlerkit/throttle/status"
)

// hosts are the simulated sites; scope labels in the metrics are these,
// or "other" (see label).
var hosts = []string{"shop.example", "news.example", "busy.example", "flaky.example"}

// pagesPerHost is how many pages of each site the crawl fetches.
const pagesPerHost = 10

// delay is every scope's configured Delay (jitter off).
const delay = 200 * time.Millisecond

// The expvar variables the hooks feed, all published under "throttle"
// (expvar variables are process-wide, so these are package variables).
var (
	requests  = new(expvar.Map) // released permits by status class: 2xx, 4xx, 5xx, errors
	robotsTxt = new(expvar.Map) // the manager's robots.txt fetches by status class
	signals   = new(expvar.Map) // backoff signals by scope
	delayMS   = new(expvar.Map) // current delay by scope, ms (set on DelayChanged)
	conc      = new(expvar.Map) // current concurrency by scope (set on DelayChanged)
	gates     = new(expvar.Map) // server-given waits by scope
	gateUntil = new(expvar.Map) // the last gate's end by scope, RFC 3339
	admitted  = new(expvar.Int) // permits granted (robots.txt fetches excluded)
	waitedMS  = new(expvar.Float)
	warnings  = new(expvar.Int)
	root      = expvar.NewMap("throttle")
)

func init() {
	root.Set("requests", requests)
	root.Set("robots_txt", robotsTxt)
	root.Set("backoff_signals", signals)
	root.Set("delay_ms", delayMS)
	root.Set("concurrency", conc)
	root.Set("gates", gates)
	root.Set("gate_until", gateUntil)
	root.Set("admitted", admitted)
	root.Set("waited_ms_total", waitedMS)
	root.Set("warnings", warnings)
}

// label bounds the scopes that become map keys: a crawl that follows
// links meets any number of hosts, and a key per host would grow the
// published maps without end. Known hosts keep their name; the rest
// share "other". (Or keep the top N by requests, as the status page does.)
func label(scope string) string {
	if slices.Contains(hosts, scope) {
		return scope
	}
	return "other"
}

// class is a status's class for the requests map.
func class(status int, err error) string {
	if err != nil || status < 100 || status > 599 {
		return "errors"
	}
	return strconv.Itoa(status/100) + "xx"
}

// metricHooks feed the expvar variables. They are called without the
// manager's locks, on the goroutine of the Acquire or Release, so they only
// add to atomic counters.
func metricHooks() hooks.Hooks {
	return hooks.Hooks{
		Admitted: func(e hooks.Admitted) {
			if e.Robots {
				return // the manager's robots.txt fetch, not a page
			}
			admitted.Add(1)
			waitedMS.Add(float64(e.Waited) / float64(time.Millisecond))
		},
		Released: func(e hooks.Released) {
			if e.Robots { // counted apart, as Stats does (Counts.Robots)
				robotsTxt.Add(class(e.Status, e.Err), 1)
				return
			}
			requests.Add(class(e.Status, e.Err), 1)
		},
		Backoff: func(e hooks.Backoff) {
			signals.Add(label(e.Scope), 1)
		},
		DelayChanged: func(e hooks.DelayChanged) {
			l := label(e.Scope)
			delayMS.AddFloat(l, 0) // make sure the key exists, then set it
			delayMS.Get(l).(*expvar.Float).Set(float64(e.NewDelay) / float64(time.Millisecond))
			conc.Add(l, 0)
			conc.Get(l).(*expvar.Int).Set(int64(e.NewConcurrency))
		},
		GateSet: func(e hooks.GateSet) {
			l := label(e.Scope)
			gates.Add(l, 1)
			s := new(expvar.String)
			s.Set(e.Until.UTC().Format(time.RFC3339Nano))
			gateUntil.Set(l, s)
		},
		Warning: func(hooks.Warning) { warnings.Add(1) },
	}
}

// site is what the local server saw of one host.
type site struct {
	requests int
	statuses map[int]int // pages answered, by status
	robots   map[int]int // robots.txt fetches answered, by status
}

// server answers for every simulated host and counts what it answered.
type server struct {
	mu    sync.Mutex
	sites map[string]*site
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	s.mu.Lock()
	st := s.sites[host]
	if st == nil {
		st = &site{statuses: map[int]int{}, robots: map[int]int{}}
		s.sites[host] = st
	}
	status := http.StatusOK
	if r.URL.Path == "/robots.txt" {
		status = http.StatusNotFound // no robots.txt: no Crawl-delay
		st.robots[status]++
	} else {
		st.requests++
		n := st.requests
		switch {
		case host == "news.example" && n%4 == 0:
			status = http.StatusNotFound
		case host == "busy.example" && (n == 5 || n == 8):
			w.Header().Set("Retry-After", "1")
			status = http.StatusTooManyRequests
		case host == "flaky.example" && (n == 6 || n == 7):
			status = http.StatusServiceUnavailable
		}
		st.statuses[status]++
	}
	s.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s %s\n", host, r.URL.Path)
}

// result is what the server answered, by host and status: to pages, and
// to robots.txt fetches (which go through the throttle too).
type result struct {
	Statuses map[string]map[int]int
	Robots   map[string]map[int]int
	Elapsed  time.Duration
}

// run crawls the sites and mounts /debug/vars and /status on mon, which
// the caller serves (during the crawl and after it).
func run(ctx context.Context, out io.Writer, mon *http.ServeMux) (result, error) {
	srv := &server{sites: map[string]*site{}}
	// A local server for the hosts; the client dials it for them only.
	base, stop := localnet.Serve(srv, hosts...)
	defer stop()

	cfg := throttle.DefaultConfig()
	cfg.Default.Delay, cfg.Default.Jitter = delay, throttle.Jitter{}
	cfg.Default.Backoff.Jitter = throttle.Jitter{} // exact backoff steps: the same figures each run
	cfg.Hooks = metricHooks()
	m, err := throttle.New(cfg)
	if err != nil {
		return result{}, err
	}
	root.Set("waiting", expvar.Func(func() any { return m.Waiting() }))
	mon.Handle("GET /debug/vars", expvar.Handler())
	mon.Handle("/status", status.Handler(m))

	client := &http.Client{Transport: m.Transport(base)}

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, len(hosts)*pagesPerHost)
	for i := range pagesPerHost {
		for _, h := range hosts {
			u := fmt.Sprintf("http://%s/page/%d", h, i)
			wg.Go(func() {
				if err := fetch(ctx, client, u); err != nil {
					errs <- err
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return result{}, err
	}

	res := result{Statuses: map[string]map[int]int{}, Robots: map[string]map[int]int{}, Elapsed: time.Since(start)}
	srv.mu.Lock()
	for h, s := range srv.sites {
		res.Statuses[h], res.Robots[h] = s.statuses, s.robots
	}
	srv.mu.Unlock()
	fmt.Fprintf(out, "crawled %d pages of %d sites in %v; expvar \"throttle\":\n", len(hosts)*pagesPerHost, len(hosts),
		res.Elapsed.Round(10*time.Millisecond))
	var pretty map[string]any
	if err := json.Unmarshal([]byte(root.String()), &pretty); err != nil {
		return result{}, err
	}
	delete(pretty, "gate_until") // times differ from run to run
	b, err := json.MarshalIndent(pretty, "", "  ")
	if err != nil {
		return result{}, err
	}
	fmt.Fprintf(out, "%s\n", b)
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

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "where to serve /debug/vars and /status")
	wait := flag.Bool("wait", false, "keep serving after the crawl until interrupted")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "expvar:", err)
		os.Exit(1)
	}
	mon := http.NewServeMux()
	go http.Serve(ln, mon)
	fmt.Printf("serving http://%s/debug/vars and http://%s/status\n", ln.Addr(), ln.Addr())

	crawlCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := run(crawlCtx, os.Stdout, mon); err != nil {
		fmt.Fprintln(os.Stderr, "expvar:", err)
		os.Exit(1)
	}
	if *wait {
		fmt.Println("crawl done; still serving, Ctrl-C to stop")
		<-ctx.Done()
	}
}
