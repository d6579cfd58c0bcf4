// Command cost-quota shows a quota measured in credits, with costs
// declared per request and corrected from the server's answer.
//
// api.paid.example is a paid extraction API: an account may spend 100
// credits per 10 s. A page costs 1 credit, 2 when it needed JavaScript
// rendering, 5 when it needed a premium proxy; the price is known only
// afterwards, from the X-Actual-Cost response header.
//
// Each request is sent in two scopes with throttle.WithScopes: the
// API's host (cost 1) and "credits" with the worst-case estimate, Cost 5.
// Config.Scopes["credits"] has Quota 100 per Window 10s, so a request
// starts only when its estimate still fits in the window.
//
// Two accounts crawl side by side, each with its own ThrottlingManager:
//
//   - "estimate only" keeps the estimates: 100/5 = 20 requests per window,
//     whatever the pages really cost;
//   - "corrected" has a FeedbackFunc that reports the actual cost as
//     Feedback.Quota = []QuotaUse{{Scope: "credits", Cost: n, HasCost: true}},
//     which replaces the estimate in the window's count and lets the next
//     requests in.
//
// The server counts the credits each account was charged per 10 s window.
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
)

const (
	apiHost = "api.paid.example"

	quota        = 100 // credits per window
	estimateCost = 5   // the worst case, declared before sending
)

// options are the example's knobs; the test runs it with a shorter window.
type options struct {
	Window time.Duration // the quota window
	Work   time.Duration // how long the API takes per request
	// Requests per account; each must fit in two windows.
	EstimateOnly, Corrected int
}

func defaultOptions() options {
	return options{Window: 10 * time.Second, Work: 50 * time.Millisecond, EstimateOnly: 40, Corrected: 80}
}

// account is one API key crawling through its own manager.
type account struct {
	Key      string
	Name     string
	Correct  bool // report X-Actual-Cost as a quota correction
	Requests int
}

// actualCost is what the simulated API charges for page i: 5 credits for
// one page in ten (premium proxy), 2 for one in three (JavaScript), else 1.
func actualCost(i int) int {
	switch {
	case i%10 == 9:
		return 5
	case i%3 == 0:
		return 2
	}
	return 1
}

// window is what the server charged one account in one quota window.
type window struct {
	Requests int
	Credits  int
	// First and Last are when the first and the last request arrived,
	// from the window's start.
	First, Last time.Duration
}

type result struct {
	Window   time.Duration
	Accounts []account
	// Windows[key][k] is window k+1 of that account, counted from the
	// start of the crawl.
	Windows map[string][]window
	Elapsed time.Duration
}

// paidAPI simulates the API's billing.
type paidAPI struct {
	mu      sync.Mutex
	start   time.Time
	window  time.Duration
	work    time.Duration
	windows map[string][]window
}

func (a *paidAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/robots.txt" {
		http.NotFound(w, r) // no robots.txt: no rules, and no credits charged
		return
	}
	key := r.Header.Get("X-Api-Key")
	page, err := strconv.Atoi(r.URL.Query().Get("page"))
	if key == "" || r.URL.Path != "/v1/extract" || err != nil {
		http.Error(w, "usage: /v1/extract?url=...&page=N with an X-Api-Key", http.StatusBadRequest)
		return
	}
	cost := actualCost(page)
	a.mu.Lock()
	since := time.Since(a.start)
	k := int(since / a.window)
	ws := a.windows[key]
	for len(ws) <= k {
		ws = append(ws, window{})
	}
	in := since - time.Duration(k)*a.window
	if ws[k].Requests == 0 {
		ws[k].First = in
	}
	ws[k].Last = in
	ws[k].Requests++
	ws[k].Credits += cost
	a.windows[key] = ws
	a.mu.Unlock()

	time.Sleep(a.work)
	w.Header().Set("X-Actual-Cost", strconv.Itoa(cost))
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, "{\"url\":%q,\"credits\":%d}\n", r.URL.Query().Get("url"), cost)
}

// actualCostFeedback replaces the estimate with the cost the API charged.
func actualCostFeedback(now time.Time, resp *http.Response, err error) throttle.Feedback {
	fb := throttle.DefaultFeedback(now, resp, err)
	if resp == nil {
		return fb
	}
	if n, err := strconv.ParseInt(resp.Header.Get("X-Actual-Cost"), 10, 64); err == nil && n >= 0 {
		fb.Quota = []throttle.QuotaUse{{Scope: "credits", Cost: n, HasCost: true}}
	}
	return fb
}

func newManager(opt options, correct bool) (*throttle.ThrottlingManager, error) {
	cfg := throttle.DefaultConfig()
	cfg.GlobalConcurrency = 64
	if correct {
		cfg.Feedback = actualCostFeedback
	}
	// Each Scopes entry is a whole ScopeConfig: copy the default and change
	// what matters. Neither scope has a delay: the quota is what limits.
	host := cfg.Default
	host.Concurrency = 64
	host.Delay = 0
	credits := host
	credits.Quota = quota
	credits.Window = opt.Window
	cfg.Scopes = map[string]throttle.ScopeConfig{apiHost: host, "credits": credits}
	return throttle.New(cfg)
}

func run(ctx context.Context, out io.Writer) (result, error) {
	return runWith(ctx, out, defaultOptions())
}

func runWith(ctx context.Context, out io.Writer, opt options) (result, error) {
	accounts := []account{
		{Key: "key-estimate", Name: "estimate only", Requests: opt.EstimateOnly},
		{Key: "key-corrected", Name: "corrected", Correct: true, Requests: opt.Corrected},
	}
	api := &paidAPI{window: opt.Window, work: opt.Work, windows: map[string][]window{}}
	// A local server for apiHost; the client dials it for that host only.
	base, stop := localnet.Serve(api, apiHost)
	defer stop()

	clients := make([]*http.Client, len(accounts))
	for i, a := range accounts {
		m, err := newManager(opt, a.Correct)
		if err != nil {
			return result{}, err
		}
		clients[i] = &http.Client{Transport: m.Transport(base)}
	}

	// Every request of both accounts is queued at once; each manager's
	// quota window opens at its first request, right after start.
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	start := time.Now()
	api.mu.Lock()
	api.start = start
	api.mu.Unlock()
	for i, a := range accounts {
		for page := range a.Requests {
			wg.Go(func() {
				if err := extract(ctx, clients[i], a.Key, page); err != nil {
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

	res := result{Window: opt.Window, Accounts: accounts, Windows: map[string][]window{}, Elapsed: time.Since(start)}
	api.mu.Lock()
	for k, ws := range api.windows {
		res.Windows[k] = slices.Clone(ws)
	}
	api.mu.Unlock()
	printTable(out, res)
	return res, nil
}

// extract asks the API for one page, declaring its estimated cost.
func extract(ctx context.Context, client *http.Client, key string, page int) error {
	target := fmt.Sprintf("http://books.toscrape.com/catalogue/page-%d.html", page)
	u := "http://" + apiHost + "/v1/extract?" + url.Values{"url": {target}, "page": {strconv.Itoa(page)}}.Encode()
	// Exactly these scopes, instead of the Scoper's: the host (cost 1) and
	// the credits, at the worst-case estimate.
	ctx = throttle.WithScopes(ctx,
		throttle.Scope{Key: apiHost},
		throttle.Scope{Key: "credits", Cost: estimateCost})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Api-Key", key)
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
	fmt.Fprintf(out, "Scopes[\"credits\"]: Quota %d per Window %v; each request declares Cost %d (WithScopes);\n", quota, res.Window, estimateCost)
	fmt.Fprintf(out, "the API charges 1, 2 or 5 credits and says so in X-Actual-Cost\n\n")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "account\twindow\trequests\testimated credits\tcharged credits\tarrivals (into window)")
	for _, a := range res.Accounts {
		for k, w := range res.Windows[a.Key] {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d / %d\t%v .. %v\n", a.Name, k+1, w.Requests, w.Requests*estimateCost, w.Credits, quota,
				w.First.Round(time.Millisecond), w.Last.Round(time.Millisecond))
		}
	}
	tw.Flush()
	fmt.Fprintf(out, "\nwithout corrections a window admits %d/%d = %d requests; crawl took %v\n",
		quota, estimateCost, quota/estimateCost, res.Elapsed.Round(10*time.Millisecond))
}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "cost-quota:", err)
		os.Exit(1)
	}
}
