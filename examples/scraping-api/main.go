// Command scraping-api shows how to throttle a crawl that goes through a
// web-scraping API, and how to route the target site's rate limiting to
// the target's scope only.
//
// Every request goes to the same API host, with the page to fetch in a
// query parameter:
//
//	http://api.scraper.example/v1/?url=http%3A%2F%2Fbooks.toscrape.com%2Fcatalogue%2Fpage-3.html
//
// The Scoper AddScopes(HostScope, scopers.QueryParamHost("url")) puts each
// request in two scopes: the API's host ("api.scraper.example",
// Concurrency 5, the plan's limit) and the target site's host
// ("books.toscrape.com", 1 request per 200 ms).
//
// The API answers 200 even when the target site refused the fetch; it
// passes the target's status in an X-Upstream-Status header. A custom
// FeedbackFunc turns an upstream 429 into a backoff signal restricted with
// Feedback.BackoffScopes to the target's scope: the target slows down, the
// API scope, and so every other site crawled through it, keeps its pace.
//
// The simulated books.toscrape.com answers 429 to requests less than
// 500 ms apart; quotes.toscrape.com accepts anything.
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/internal/localnet"
	"github.com/crawlerkit/throttle/scopers"
)

const (
	apiHost = "api.scraper.example"

	apiConcurrency = 5                      // the API plan's limit
	siteDelay      = 200 * time.Millisecond // per target site
	apiWork        = 50 * time.Millisecond  // how long the API takes per fetch

	// booksMinGap: the simulated books.toscrape.com refuses (429) a
	// request less than this after the previous one.
	booksMinGap = 500 * time.Millisecond
)

// target is a site crawled through the API and how many pages are fetched.
type target struct {
	Host  string
	Pages []string
}

var targets = []target{
	{"books.toscrape.com", pages("http://books.toscrape.com/catalogue/page-%d.html", 6)},
	{"quotes.toscrape.com", pages("http://quotes.toscrape.com/page/%d/", 24)},
}

func pages(format string, n int) []string {
	var ps []string
	for i := 1; i <= n; i++ {
		ps = append(ps, fmt.Sprintf(format, i))
	}
	return ps
}

// fetch is one request the API received.
type fetch struct {
	At       time.Time
	Upstream int // the target's status
}

// siteStat is what the API saw for one target site.
type siteStat struct {
	Fetches []fetch
}

// Limited counts the upstream 429s.
func (s *siteStat) Limited() int {
	n := 0
	for _, f := range s.Fetches {
		if f.Upstream == http.StatusTooManyRequests {
			n++
		}
	}
	return n
}

// firstLimited is the time of the first upstream 429, zero if none.
func (s *siteStat) firstLimited() time.Time {
	for _, f := range s.Fetches {
		if f.Upstream == http.StatusTooManyRequests {
			return f.At
		}
	}
	return time.Time{}
}

// meanGap is the mean gap between consecutive fetches for which keep is
// true (both ends), 0 if fewer than two.
func meanGap(fs []fetch, keep func(fetch) bool) time.Duration {
	var first, last time.Time
	n := 0
	for _, f := range fs {
		if !keep(f) {
			continue
		}
		if n == 0 {
			first = f.At
		}
		last = f.At
		n++
	}
	if n < 2 {
		return 0
	}
	return last.Sub(first) / time.Duration(n-1)
}

type result struct {
	Sites   map[string]*siteStat
	APIPeak int       // most requests in the API's handler at once
	Split   time.Time // books.toscrape.com's first 429
	// AccountWait is how long a request to the API alone (scope
	// api.scraper.example only) waited for the throttle right after the crawl.
	AccountWait time.Duration
	Elapsed     time.Duration
}

// FirstGap is the gap between a site's first two fetches.
func (r *result) FirstGap(host string) time.Duration {
	fs := r.Sites[host].Fetches
	if len(fs) < 2 {
		return 0
	}
	return fs[1].At.Sub(fs[0].At)
}

// GapAfter is a site's mean gap between fetches from books.toscrape.com's
// first 429 on.
func (r *result) GapAfter(host string) time.Duration {
	if r.Split.IsZero() {
		return 0
	}
	return meanGap(r.Sites[host].Fetches, func(f fetch) bool { return !f.At.Before(r.Split) })
}

// scraperAPI simulates the scraping API and the target sites behind it.
type scraperAPI struct {
	mu       sync.Mutex
	res      result
	inFlight int
	lastHit  map[string]time.Time // per target host
}

func (a *scraperAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/account" {
		fmt.Fprintln(w, `{"plan":"startup","concurrency":5}`)
		return
	}
	u, err := url.Parse(r.URL.Query().Get("url"))
	if r.URL.Path != "/v1/" || err != nil || u.Host == "" {
		http.Error(w, "usage: /v1/?url=<absolute URL>", http.StatusBadRequest)
		return
	}
	a.mu.Lock()
	now := time.Now()
	a.inFlight++
	a.res.APIPeak = max(a.res.APIPeak, a.inFlight)
	status := http.StatusOK
	if u.Host == "books.toscrape.com" {
		if last, ok := a.lastHit[u.Host]; ok && now.Sub(last) < booksMinGap {
			status = http.StatusTooManyRequests
		}
	}
	a.lastHit[u.Host] = now
	s := a.res.Sites[u.Host]
	if s == nil {
		s = &siteStat{}
		a.res.Sites[u.Host] = s
	}
	s.Fetches = append(s.Fetches, fetch{At: now, Upstream: status})
	a.mu.Unlock()

	time.Sleep(apiWork)
	a.mu.Lock()
	a.inFlight--
	a.mu.Unlock()

	// The API call itself succeeded: 200, with the target's status.
	w.Header().Set("X-Upstream-Status", strconv.Itoa(status))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"url\":%q,\"status\":%d}\n", u.String(), status)
}

func (a *scraperAPI) snapshot() result {
	a.mu.Lock()
	defer a.mu.Unlock()
	res := a.res
	res.Sites = make(map[string]*siteStat)
	for k, v := range a.res.Sites {
		res.Sites[k] = &siteStat{Fetches: slices.Clone(v.Fetches)}
	}
	return res
}

// backoffStatuses are the statuses that are backoff signals by default.
var backoffStatuses = throttle.DefaultConfig().Default.Backoff.Statuses

// upstreamFeedback reports the target site's rate limiting, read from
// X-Upstream-Status, as a backoff signal for the target's scope only.
func upstreamFeedback(now time.Time, resp *http.Response, err error) throttle.Feedback {
	fb := throttle.DefaultFeedback(now, resp, err)
	if resp == nil {
		return fb
	}
	up, convErr := strconv.Atoi(resp.Header.Get("X-Upstream-Status"))
	if convErr != nil || !slices.Contains(backoffStatuses, up) {
		return fb
	}
	site, err := scopers.QueryParamHost("url")(resp.Request)
	if err != nil || len(site) == 0 {
		return fb // not a proxied request: nothing to single out
	}
	fb.Backoff = true
	fb.BackoffScopes = []string{site[0].Key}
	return fb
}

func newManager() (*throttle.ThrottlingManager, error) {
	cfg := throttle.DefaultConfig()
	cfg.Scoper = throttle.AddScopes(throttle.HostScope, scopers.QueryParamHost("url"))
	cfg.Feedback = upstreamFeedback

	// The API: up to 5 requests at once, no delay of its own; default
	// backoff (it would start at 1 s, were the API itself to rate limit).
	api := cfg.Default
	api.Concurrency = apiConcurrency
	api.Delay = 0
	cfg.Scopes = map[string]throttle.ScopeConfig{apiHost: api}

	// Target sites (every scope without an entry of its own): one request
	// at a time, 200 ms apart, no jitter; backoff doubles from there.
	cfg.Default.Concurrency = 1
	cfg.Default.Delay = siteDelay
	cfg.Default.Jitter = throttle.Jitter{}
	return throttle.New(cfg)
}

func run(ctx context.Context, out io.Writer) (result, error) {
	api := &scraperAPI{res: result{Sites: map[string]*siteStat{}}, lastHit: map[string]time.Time{}}
	// A local server for apiHost; the client dials it for that host only.
	base, stop := localnet.Serve(api, apiHost)
	defer stop()

	m, err := newManager()
	if err != nil {
		return result{}, err
	}
	client := &http.Client{Transport: m.Transport(base)}

	// Each site is crawled by its own worker, page after page; a page the
	// site refused is fetched again.
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, t := range targets {
		wg.Go(func() {
			for _, p := range t.Pages {
				if err := scrape(ctx, client, p); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return result{}, errs[0]
	}

	res := api.snapshot()
	res.Elapsed = time.Since(start)

	// A call to the API itself, in the API's scope only: had the upstream
	// 429s slowed the API scope, this would wait for its backoff delay.
	acct := "http://" + apiHost + "/v1/account"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, acct, nil)
	if err != nil {
		return result{}, err
	}
	t0 := time.Now()
	p, err := m.Acquire(ctx, req)
	if err != nil {
		return result{}, err
	}
	res.AccountWait = time.Since(t0)
	resp, err := base.RoundTrip(req)
	p.Release(resp, err)
	if err != nil {
		return result{}, err
	}
	resp.Body.Close()
	if s := res.Sites["books.toscrape.com"]; s != nil {
		res.Split = s.firstLimited()
	}
	printTable(out, &res, start)
	return res, nil
}

// scrape fetches page through the API, again while the site refuses it.
func scrape(ctx context.Context, client *http.Client, page string) error {
	u := "http://" + apiHost + "/v1/?" + url.Values{"url": {page}}.Encode()
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		if resp.Header.Get("X-Upstream-Status") != "429" {
			return nil
		}
		if attempt == 5 {
			return fmt.Errorf("%s: still rate limited after %d attempts", page, attempt)
		}
	}
}

func printTable(out io.Writer, res *result, start time.Time) {
	fmt.Fprintf(out, "Scoper AddScopes(HostScope, scopers.QueryParamHost(\"url\")); %s: Concurrency %d, Delay 0; each site: Delay %v\n", apiHost, apiConcurrency, siteDelay)
	fmt.Fprintf(out, "books.toscrape.com refuses requests less than %v apart (API answers 200, X-Upstream-Status: 429)\n", booksMinGap)
	if !res.Split.IsZero() {
		fmt.Fprintf(out, "books.toscrape.com's first 429 came %v into the crawl\n", res.Split.Sub(start).Round(10*time.Millisecond))
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scope\tfetches\tupstream 429s\tfirst gap\tmean gap after books' first 429")
	all := 0
	for _, t := range targets {
		s := res.Sites[t.Host]
		all += len(s.Fetches)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%v\n", t.Host, len(s.Fetches), s.Limited(),
			res.FirstGap(t.Host).Round(time.Millisecond), res.GapAfter(t.Host).Round(time.Millisecond))
	}
	fmt.Fprintf(tw, "%s\t%d\t-\t-\t-\n", apiHost, all)
	tw.Flush()
	fmt.Fprintf(out, "\nAPI: peak %d requests in flight (limit %d); crawl took %v\n", res.APIPeak, apiConcurrency, res.Elapsed.Round(10*time.Millisecond))
	fmt.Fprintf(out, "GET /v1/account (API scope only) right after the crawl waited %v for the throttle\n", res.AccountWait.Round(time.Millisecond))
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "scraping-api:", err)
		os.Exit(1)
	}
}
