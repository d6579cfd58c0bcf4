// Command endpoints shows per-endpoint limits on one API host with
// throttle.AddScopes(throttle.HostScope, scopers.PathPrefix(...)).
//
// api.bookshop.example has a fast endpoint, /search, and a slow, expensive
// one, /download. Every request is in the host's scope; requests under
// /search are also in "api.bookshop.example/search" and requests under
// /download in "api.bookshop.example/download", each with its own settings:
//
//	search:   Concurrency 4, Delay 100ms  (about 10 requests/s)
//	download: Concurrency 1, Delay 1s     (about 1 request/s)
//
// Both kinds are queued at once; the server measures each endpoint's pace.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/crawlerkit/throttle/scopers"
)

const apiHost = "api.bookshop.example"

// endpoint is one endpoint of the API, its throttle settings, and the
// simulated work behind it.
type endpoint struct {
	Prefix      string
	Concurrency int
	Delay       time.Duration
	Requests    int           // how many the example sends
	Work        time.Duration // how long the server takes
}

var endpoints = []endpoint{
	{Prefix: "/search", Concurrency: 4, Delay: 100 * time.Millisecond, Requests: 40, Work: 150 * time.Millisecond},
	{Prefix: "/download", Concurrency: 1, Delay: time.Second, Requests: 5, Work: 400 * time.Millisecond},
}

// hostConcurrency caps the whole host: both endpoints together.
const hostConcurrency = 5

// stat is what the server saw for one endpoint.
type stat struct {
	Requests int
	Peak     int         // most requests in the handler at once
	Arrivals []time.Time // when each request reached the handler
	inFlight int
}

// MeanGap is the mean time between two consecutive arrivals.
func (s *stat) MeanGap() time.Duration {
	if len(s.Arrivals) < 2 {
		return 0
	}
	return s.Arrivals[len(s.Arrivals)-1].Sub(s.Arrivals[0]) / time.Duration(len(s.Arrivals)-1)
}

// MinGap is the shortest time between two consecutive arrivals.
func (s *stat) MinGap() time.Duration {
	var g time.Duration
	for i := 1; i < len(s.Arrivals); i++ {
		if d := s.Arrivals[i].Sub(s.Arrivals[i-1]); i == 1 || d < g {
			g = d
		}
	}
	return g
}

// Rate is the observed requests per second.
func (s *stat) Rate() float64 {
	if g := s.MeanGap(); g > 0 {
		return float64(time.Second) / float64(g)
	}
	return 0
}

type result struct {
	Endpoints map[string]*stat // by prefix
	HostPeak  int              // most requests to the host in the handler at once
	Elapsed   time.Duration
}

type recorder struct {
	mu      sync.Mutex
	res     result
	hostNow int
}

func (r *recorder) begin(prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.res.Endpoints[prefix]
	s.Requests++
	s.inFlight++
	s.Peak = max(s.Peak, s.inFlight)
	s.Arrivals = append(s.Arrivals, time.Now())
	r.hostNow++
	r.res.HostPeak = max(r.res.HostPeak, r.hostNow)
}

func (r *recorder) end(prefix string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Endpoints[prefix].inFlight--
	r.hostNow--
}

func newManager() (*throttle.ThrottlingManager, error) {
	cfg := throttle.DefaultConfig()
	var prefixes []string
	for _, e := range endpoints {
		prefixes = append(prefixes, e.Prefix)
	}
	cfg.Scoper = throttle.AddScopes(throttle.HostScope, scopers.PathPrefix(prefixes...))

	// Each Scopes entry is a whole ScopeConfig: copy the default and change
	// what matters. No jitter, so the configured delays show as they are.
	scope := func(conc int, delay time.Duration) throttle.ScopeConfig {
		sc := cfg.Default
		sc.Concurrency = conc
		sc.Delay = delay
		sc.Jitter = throttle.Jitter{}
		return sc
	}
	cfg.Scopes = map[string]throttle.ScopeConfig{
		// The host as a whole: no delay of its own, only a cap.
		apiHost: scope(hostConcurrency, 0),
	}
	for _, e := range endpoints {
		cfg.Scopes[apiHost+e.Prefix] = scope(e.Concurrency, e.Delay)
	}
	return throttle.New(cfg)
}

func run(ctx context.Context, out io.Writer) (result, error) {
	rec := &recorder{res: result{Endpoints: map[string]*stat{}}}
	mux := http.NewServeMux()
	for _, e := range endpoints {
		rec.res.Endpoints[e.Prefix] = &stat{}
		h := func(w http.ResponseWriter, r *http.Request) {
			rec.begin(e.Prefix)
			defer rec.end(e.Prefix)
			time.Sleep(e.Work)
			fmt.Fprintf(w, "%s %s\n", e.Prefix, r.URL.RequestURI())
		}
		mux.HandleFunc(e.Prefix, h)
		mux.HandleFunc(e.Prefix+"/", h)
	}
	// A local server for apiHost; the client dials it for that host only.
	base, stop := localnet.Serve(mux, apiHost)
	defer stop()

	m, err := newManager()
	if err != nil {
		return result{}, err
	}
	client := &http.Client{Transport: m.Transport(base)}

	// Queue every request at once, searches and downloads mixed.
	var urls []string
	for i := range max(endpoints[0].Requests, endpoints[1].Requests) {
		if i < endpoints[0].Requests {
			q := url.Values{"q": {fmt.Sprintf("mystery %d", i)}, "page": {"1"}}
			urls = append(urls, "http://"+apiHost+"/search?"+q.Encode())
		}
		if i < endpoints[1].Requests {
			urls = append(urls, fmt.Sprintf("http://%s/download/book-%d.epub", apiHost, i+1))
		}
	}
	start := time.Now()
	if err := fetchAll(ctx, client, urls); err != nil {
		return result{}, err
	}
	rec.mu.Lock()
	res := rec.res
	res.Elapsed = time.Since(start)
	rec.mu.Unlock()
	printTable(out, res)
	return res, nil
}

// fetchAll requests every URL at once, one goroutine each: the throttle
// alone decides when each request is sent.
func fetchAll(ctx context.Context, client *http.Client, urls []string) error {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, u := range urls {
		wg.Go(func() {
			if err := fetch(ctx, client, u); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

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
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return nil
}

func printTable(out io.Writer, res result) {
	fmt.Fprintf(out, "Scoper AddScopes(HostScope, scopers.PathPrefix(\"/search\", \"/download\")); %s: Concurrency %d, Delay 0\n\n", apiHost, hostConcurrency)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scope\tconcurrency\tdelay\trequests\tpeak in flight\tmean gap\tmin gap\tobserved rate\tdelay allows")
	for _, e := range endpoints {
		s := res.Endpoints[e.Prefix]
		fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%d\t%v\t%v\t%.1f/s\t%.1f/s\n", apiHost+e.Prefix, e.Concurrency, e.Delay, s.Requests, s.Peak,
			s.MeanGap().Round(time.Millisecond), s.MinGap().Round(time.Millisecond), s.Rate(), float64(time.Second)/float64(e.Delay))
	}
	total := 0
	for _, s := range res.Endpoints {
		total += s.Requests
	}
	fmt.Fprintf(tw, "%s\t%d\t%v\t%d\t%d\n", apiHost, hostConcurrency, time.Duration(0), total, res.HostPeak)
	tw.Flush()
	fmt.Fprintf(out, "\nall %d requests done in %v\n", total, res.Elapsed.Round(10*time.Millisecond))
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "endpoints:", err)
		os.Exit(1)
	}
}
