// Command hierarchy shows scopers.DomainHierarchy: a request to
// books.toscrape.com is in the scopes "toscrape.com" and
// "books.toscrape.com", so a limit on the registrable domain covers all its
// subdomains while each subdomain keeps a limit of its own.
//
// Here toscrape.com admits 32 requests at once, books.toscrape.com 24 and
// quotes.toscrape.com 16. Crawled alone, books reaches 24 and quotes 16;
// crawled together they could reach 24+16 = 40, but the parent scope holds
// them to 32 in total.
//
// One local httptest server answers for both host names (it dispatches on
// the Host header) and holds every request ~200 ms, so the number of
// requests in its handler at once is the concurrency the throttle allows.
package main

import (
	"context"
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
	"github.com/crawlerkit/throttle/scopers"
)

const (
	parentLimit = 32 // toscrape.com
	booksLimit  = 24 // books.toscrape.com
	quotesLimit = 16 // quotes.toscrape.com

	holdTime = 200 * time.Millisecond // server time per request
)

// phase is one crawl: how many pages of each site are queued at once.
type phase struct {
	Name   string
	Books  int
	Quotes int
}

var phases = []phase{
	{"books alone", 2 * booksLimit, 0},
	{"quotes alone", 0, 2 * quotesLimit},
	{"both at once", 3 * booksLimit, 3 * quotesLimit},
}

// phaseResult is what the server saw during one phase.
type phaseResult struct {
	Phase                 phase
	BooksReqs, QuotesReqs int
	BooksPeak, QuotesPeak int // most requests of the host in the handler at once
	TotalPeak             int // most requests of both hosts in the handler at once
	Elapsed               time.Duration
	booksNow, quotesNow   int
}

type result struct {
	Phases []phaseResult
}

// recorder tracks requests in the server's handler.
type recorder struct {
	mu sync.Mutex
	pr *phaseResult
}

func (r *recorder) begin(host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pr
	switch host {
	case "books.toscrape.com":
		p.BooksReqs++
		p.booksNow++
		p.BooksPeak = max(p.BooksPeak, p.booksNow)
	case "quotes.toscrape.com":
		p.QuotesReqs++
		p.quotesNow++
		p.QuotesPeak = max(p.QuotesPeak, p.quotesNow)
	}
	p.TotalPeak = max(p.TotalPeak, p.booksNow+p.quotesNow)
}

func (r *recorder) end(host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch host {
	case "books.toscrape.com":
		r.pr.booksNow--
	case "quotes.toscrape.com":
		r.pr.quotesNow--
	}
}

// newManager configures the three levels. Each Scopes entry is a whole
// ScopeConfig: start from the default and change what matters here.
func newManager() (*throttle.ThrottlingManager, error) {
	cfg := throttle.DefaultConfig()
	cfg.Scoper = scopers.DomainHierarchy
	cfg.GlobalConcurrency = 64 // above every scope's limit: not the one at work
	limit := func(n int) throttle.ScopeConfig {
		sc := cfg.Default
		sc.Concurrency = n
		sc.Delay = 0
		return sc
	}
	cfg.Scopes = map[string]throttle.ScopeConfig{
		"toscrape.com":        limit(parentLimit),
		"books.toscrape.com":  limit(booksLimit),
		"quotes.toscrape.com": limit(quotesLimit),
	}
	return throttle.New(cfg)
}

func run(ctx context.Context, out io.Writer) (result, error) {
	hosts := []string{"books.toscrape.com", "quotes.toscrape.com"}
	rec := &recorder{}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r) // no robots.txt: no rules (the throttle fetches it once per host)
			return
		}
		host, _, err := net.SplitHostPort(r.Host)
		if err != nil {
			host = r.Host
		}
		rec.begin(host)
		defer rec.end(host)
		time.Sleep(holdTime)
		fmt.Fprintf(w, "<html><body>%s%s</body></html>\n", host, r.URL.Path)
	})
	// A local server for the hosts; the client dials it for them only.
	base, stop := localnet.Serve(handler, hosts...)
	defer stop()

	m, err := newManager()
	if err != nil {
		return result{}, err
	}
	client := &http.Client{Transport: m.Transport(base)}

	var res result
	for _, ph := range phases {
		pr := &phaseResult{Phase: ph}
		rec.mu.Lock()
		rec.pr = pr
		rec.mu.Unlock()

		var urls []string
		for i := 1; i <= max(ph.Books, ph.Quotes); i++ {
			if i <= ph.Books {
				urls = append(urls, fmt.Sprintf("http://books.toscrape.com/catalogue/page-%d.html", i))
			}
			if i <= ph.Quotes {
				urls = append(urls, fmt.Sprintf("http://quotes.toscrape.com/page/%d/", i))
			}
		}
		start := time.Now()
		if err := fetchAll(ctx, client, urls); err != nil {
			return result{}, err
		}
		rec.mu.Lock()
		pr.Elapsed = time.Since(start)
		res.Phases = append(res.Phases, *pr)
		rec.mu.Unlock()
	}
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
	fmt.Fprintf(out, "Scoper scopers.DomainHierarchy; Concurrency toscrape.com %d, books.toscrape.com %d, quotes.toscrape.com %d; server holds each request %v\n\n",
		parentLimit, booksLimit, quotesLimit, holdTime)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "phase\tbooks reqs\tquotes reqs\tpeak books\tpeak quotes\tpeak total\telapsed")
	for _, p := range res.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%v\n", p.Phase.Name, p.BooksReqs, p.QuotesReqs,
			p.BooksPeak, p.QuotesPeak, p.TotalPeak, p.Elapsed.Round(10*time.Millisecond))
	}
	tw.Flush()
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hierarchy:", err)
		os.Exit(1)
	}
}
