// Command registrable-domain shows throttle.RegistrableDomainScope: every
// host of one registrable domain ("eTLD+1") shares one scope, so
// a.example.co.uk, b.example.co.uk and example.co.uk together get the
// Concurrency of a single scope, while unrelated sites each get their own.
//
// The public suffix list decides what "unrelated" means: co.uk is a public
// suffix, so the three example.co.uk hosts are one site; github.io is a
// (private) public suffix too, so alice.github.io and bob.github.io are two
// different sites even though they share a parent domain.
//
// All hosts are served by one local httptest server that dispatches on the
// Host header; the client dials it for every simulated host name, so the
// crawl reads like a real one while all traffic stays on loopback.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/crawlerkit/throttle/scopers"
)

// site is one simulated host and the site (registrable domain) it belongs
// to, as the server's operator knows it.
type site struct {
	host  string
	owner string
}

var sites = []site{
	{"a.example.co.uk", "example.co.uk"},
	{"b.example.co.uk", "example.co.uk"},
	{"example.co.uk", "example.co.uk"},
	{"alice.github.io", "alice.github.io"},
	{"bob.github.io", "bob.github.io"},
}

const (
	pagesPerHost = 8                      // requests per host
	holdTime     = 100 * time.Millisecond // how long the server holds each request
	concurrency  = 2                      // per scope, i.e. per registrable domain
)

// stat is what the server saw for one key (a host, a site, or "all").
type stat struct {
	Requests int
	Peak     int // most requests in the handler at once
	inFlight int
	First    time.Time // first request arrived
	Last     time.Time // last request finished
}

// result is the server-side view of the crawl.
type result struct {
	Hosts map[string]*stat // by host name
	Sites map[string]*stat // by owner (registrable domain)
	All   stat             // every request together
}

// recorder counts requests as the server sees them.
type recorder struct {
	mu  sync.Mutex
	res result
}

func (r *recorder) get(m map[string]*stat, k string) *stat {
	s := m[k]
	if s == nil {
		s = &stat{}
		m[k] = s
	}
	return s
}

func (r *recorder) begin(host, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, s := range []*stat{r.get(r.res.Hosts, host), r.get(r.res.Sites, owner), &r.res.All} {
		s.Requests++
		s.inFlight++
		s.Peak = max(s.Peak, s.inFlight)
		if s.First.IsZero() {
			s.First = now
		}
	}
}

func (r *recorder) end(host, owner string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for _, s := range []*stat{r.get(r.res.Hosts, host), r.get(r.res.Sites, owner), &r.res.All} {
		s.inFlight--
		s.Last = now
	}
}

func run(ctx context.Context, out io.Writer) (result, error) {
	owners := make(map[string]string)
	var hosts []string
	for _, s := range sites {
		owners[s.host] = s.owner
		hosts = append(hosts, s.host)
	}

	rec := &recorder{res: result{Hosts: map[string]*stat{}, Sites: map[string]*stat{}}}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r) // no robots.txt: no rules (the throttle fetches it once per host)
			return
		}
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		owner, ok := owners[host]
		if !ok {
			http.Error(w, "unknown host", http.StatusMisdirectedRequest)
			return
		}
		rec.begin(host, owner)
		defer rec.end(host, owner)
		time.Sleep(holdTime)
		fmt.Fprintf(w, "<html><body>%s%s</body></html>\n", host, r.URL.Path)
	})
	// A local server for the hosts; the client dials it for them only.
	base, stop := localnet.Serve(handler, hosts...)
	defer stop()

	cfg := throttle.DefaultConfig()
	cfg.Scoper = throttle.RegistrableDomainScope
	// Every scope (here: every registrable domain) admits two requests at
	// once and no delay, so concurrency is the only limit at work.
	cfg.Default.Concurrency = concurrency
	cfg.Default.Delay = 0
	m, err := throttle.New(cfg)
	if err != nil {
		return result{}, err
	}
	client := &http.Client{Transport: m.Transport(base)}

	// Queue every page of every host at once: the throttle alone decides
	// when each request goes out.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, h := range hosts {
		for page := 1; page <= pagesPerHost; page++ {
			u := fmt.Sprintf("http://%s/catalogue/page-%d.html", h, page)
			wg.Go(func() {
				if err := fetch(ctx, client, u); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if len(errs) > 0 {
		return result{}, errs[0]
	}

	res := rec.res
	printTables(out, res)
	return res, nil
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

func printTables(out io.Writer, res result) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(out, "Scoper RegistrableDomainScope, Concurrency %d per scope, server holds each request %v\n\n", concurrency, holdTime)
	fmt.Fprintln(tw, "host\tscope (registrable domain)\trequests\tpeak in flight")
	for _, s := range sites {
		st := res.Hosts[s.host]
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", s.host, scopers.RegistrableDomain(s.host), st.Requests, st.Peak)
	}
	tw.Flush()
	fmt.Fprintln(out)

	fmt.Fprintln(tw, "scope\thosts\trequests\tpeak in flight\tbusy for")
	var owners []string
	for _, s := range sites {
		if !slices.Contains(owners, s.owner) {
			owners = append(owners, s.owner)
		}
	}
	for _, o := range owners {
		n := 0
		for _, s := range sites {
			if s.owner == o {
				n++
			}
		}
		st := res.Sites[o]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%v\n", o, n, st.Requests, st.Peak, st.Last.Sub(st.First).Round(10*time.Millisecond))
	}
	fmt.Fprintf(tw, "all hosts\t%d\t%d\t%d\t%v\n", len(sites), res.All.Requests, res.All.Peak, res.All.Last.Sub(res.All.First).Round(10*time.Millisecond))
	tw.Flush()
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "registrable-domain:", err)
		os.Exit(1)
	}
}
