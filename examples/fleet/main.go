// Command fleet shows a crawler fleet sharing its throttle through Redis:
// several worker processes crawl the same two sites, and with the
// redisstore store the whole fleet holds each site's limits, as one
// crawler would; with per-process throttles each worker holds them alone,
// so the sites get N times the rate.
//
//	go run .                    # both runs, about 25 s
//	go run . -redis localhost:6379 -phases shared
//
// With no -redis it starts a throwaway redis-server (redistest; the
// Debian package redis-server provides it). It starts a local web server
// for two sites:
//
//   - shop.test accepts anything; the crawl limits itself to Concurrency 2
//     and Delay 100ms (10 req/s);
//   - api.test allows 5 req/s (a token bucket) and answers 429 with
//     Retry-After beyond; the crawl spaces its requests 200..220ms.
//
// It then re-executes itself as -workers worker processes (flag -worker),
// each crawling both sites as fast as its throttle allows for -duration,
// prints every second the combined rate per site as the sites see it,
// next to the limit, and at the end a summary of every run: first with
// shared throttles (one Redis store), then with per-process throttles.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle/redisstore/redistest"
)

// options are the command's flags.
type options struct {
	redis      string
	workers    int
	goroutines int
	duration   time.Duration
	phases     string

	// Set by the parent for a worker process.
	worker bool
	shared bool
	id     int
	prefix string
	target string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.redis, "redis", "", "Redis address `host:port`; empty starts a throwaway redis-server")
	fs.IntVar(&o.workers, "workers", 4, "worker processes")
	fs.IntVar(&o.goroutines, "goroutines", 4, "crawling goroutines per site in each worker")
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each run crawls")
	fs.StringVar(&o.phases, "phases", "shared,local", "the runs, in order: shared (one Redis store) and/or local (per-process throttles)")
	fs.BoolVar(&o.worker, "worker", false, "run as a worker process (set by the parent)")
	fs.BoolVar(&o.shared, "shared", true, "worker: share the throttle through Redis")
	fs.IntVar(&o.id, "id", 0, "worker: its number")
	fs.StringVar(&o.prefix, "prefix", "fleet:", "worker: the Redis key prefix")
	fs.StringVar(&o.target, "target", "", "worker: the address of the sites' server")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.workers < 1 || o.goroutines < 1 || o.duration <= 0 {
		return o, errors.New("fleet: -workers, -goroutines and -duration must be positive")
	}
	for _, p := range strings.Split(o.phases, ",") {
		if p != "shared" && p != "local" {
			return o, fmt.Errorf("fleet: -phases: unknown run %q (want shared, local)", p)
		}
	}
	return o, nil
}

func main() { os.Exit(cli(os.Args[1:], os.Stdout, os.Stderr)) }

// cli runs the command with args and returns its exit code.
func cli(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.worker {
		err = runWorker(ctx, o)
	} else {
		_, err = run(ctx, o, stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// phaseResult is what the sites saw during one run.
type phaseResult struct {
	Shared bool
	Sites  map[string]siteResult
}

// siteResult sums up what one site saw.
type siteResult struct {
	Requests, OK, Limited int
	Rate                  float64 // requests per second, from the first arrival to the last
	OKRate                float64 // 2xx responses per second, over the same span
	Peak                  int     // most requests in flight at once
}

// run starts Redis (unless o.redis names one) and runs each phase of
// o.phases, printing the rates every second and a summary at the end.
func run(ctx context.Context, o options, out io.Writer) ([]phaseResult, error) {
	addr := o.redis
	if addr == "" && strings.Contains(o.phases, "shared") {
		srv, err := redistest.StartServer(redistest.Options{})
		if err != nil {
			return nil, fmt.Errorf("fleet: %w (or pass -redis host:port)", err)
		}
		defer srv.Stop()
		addr = srv.Addr()
		fmt.Fprintf(out, "redis-server started on %s\n", addr)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var results []phaseResult
	for i, p := range strings.Split(o.phases, ",") {
		res, err := runPhase(ctx, o, exe, addr, p == "shared", i+1, out)
		if err != nil {
			return results, err
		}
		results = append(results, res)
	}
	printSummary(out, o, results)
	return results, nil
}

// runPhase runs the workers once, shared or not, and reports what the
// sites saw.
func runPhase(ctx context.Context, o options, exe, redisAddr string, shared bool, n int, out io.Writer) (phaseResult, error) {
	sites := newSiteServer()
	srv := httptest.NewServer(sites)
	defer srv.Close()

	how := fmt.Sprintf("shared throttles, one Redis store at %s", redisAddr)
	if !shared {
		how = "per-process throttles, no store"
	}
	fmt.Fprintf(out, "\nRun %d: %d worker processes, %s, for %v\n", n, o.workers, how, o.duration)
	fmt.Fprintf(out, "%5s  %-33s  %s\n", "", "shop.test (limit 10/s, 2 at once)", "api.test (limit 5/s)")

	prefix := fmt.Sprintf("fleet:%d:%d:", os.Getpid(), n)
	type exited struct {
		id  int
		err error
	}
	done := make(chan exited, o.workers)
	stderrs := make([]strings.Builder, o.workers)
	for id := range o.workers {
		cmd := exec.CommandContext(ctx, exe, "-worker", "-id", strconv.Itoa(id), "-shared="+strconv.FormatBool(shared),
			"-redis", redisAddr, "-prefix", prefix, "-target", srv.Listener.Addr().String(),
			"-goroutines", strconv.Itoa(o.goroutines), "-duration", o.duration.String())
		cmd.Stderr = &stderrs[id]
		if err := cmd.Start(); err != nil {
			return phaseResult{}, err
		}
		go func() { done <- exited{id, cmd.Wait()} }()
	}

	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	seen := map[string]int{}
	var errs []error
	for running := o.workers; running > 0; {
		select {
		case e := <-done:
			running--
			if e.err != nil {
				errs = append(errs, fmt.Errorf("worker %d: %w\n%s", e.id, e.err, stderrs[e.id].String()))
			}
		case now := <-tick.C:
			var cols []string
			quiet := true
			for _, h := range hosts {
				evs, peak := sites.logs[h].tick(seen[h])
				seen[h] += len(evs)
				quiet = quiet && len(evs) == 0
				ok := 0
				for _, e := range evs {
					if e.status == 200 {
						ok++
					}
				}
				if h == shopHost {
					cols = append(cols, fmt.Sprintf("%3d req/s, %d in flight", len(evs), peak))
				} else {
					cols = append(cols, fmt.Sprintf("%3d req/s: %3d ok, %3d 429s", len(evs), ok, len(evs)-ok))
				}
			}
			if !quiet { // a second with no request: the workers are starting or ending
				fmt.Fprintf(out, "%4.0fs  %-33s  %s\n", now.Sub(start).Seconds(), cols[0], cols[1])
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return phaseResult{}, err
	}
	res := phaseResult{Shared: shared, Sites: map[string]siteResult{}}
	for _, h := range hosts {
		res.Sites[h] = summarize(sites.logs[h])
	}
	return res, nil
}

func summarize(l *siteLog) siteResult {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := siteResult{Requests: len(l.events), Peak: l.peak}
	for _, e := range l.events {
		switch e.status {
		case 200:
			r.OK++
		case 429:
			r.Limited++
		}
	}
	if n := len(l.events); n > 1 {
		r.Rate = float64(n-1) / l.events[n-1].at.Sub(l.events[0].at).Seconds()
		r.OKRate = r.Rate * float64(r.OK) / float64(n)
	}
	return r
}

func printSummary(out io.Writer, o options, results []phaseResult) {
	fmt.Fprintf(out, "\nSummary (%d workers, as the sites saw it; rates from the first request to the last)\n", o.workers)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "throttles\tsite\trequests\t2xx\t429\treq/s\t2xx/s\tlimit\tpeak in flight")
	for _, r := range results {
		kind := "shared"
		if !r.Shared {
			kind = "per-process"
		}
		for _, h := range hosts {
			s := r.Sites[h]
			limit, peak := fmt.Sprintf("%.0f/s", limitRate(h)), strconv.Itoa(s.Peak)
			if h == shopHost {
				limit += fmt.Sprintf(", %d at once", shopConcurrency)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t%s\n", kind, h, s.Requests, s.OK, s.Limited, s.Rate, s.OKRate, limit, peak)
		}
	}
	tw.Flush()
	for _, r := range results {
		shop, api := r.Sites[shopHost], r.Sites[apiHost]
		if r.Shared {
			fmt.Fprintf(out, "\nShared: the fleet sent shop.test %.2fx its rate limit with at most %d requests in flight, and api.test %.2fx its limit with %d 429s.\n",
				shop.Rate/limitRate(shopHost), shop.Peak, api.Rate/limitRate(apiHost), api.Limited)
		} else {
			fmt.Fprintf(out, "\nPer-process: each worker held the limits alone: shop.test got %.2fx its rate limit with up to %d requests in flight; api.test answered %d 429s, each worker backing off on its own.\n",
				shop.Rate/limitRate(shopHost), shop.Peak, api.Limited)
		}
	}
}
