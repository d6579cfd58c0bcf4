package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
)

// delayTrace sums up the delay changes the throttle logged for one scope.
type delayTrace struct {
	First, Last   time.Duration // the delay before the first change, after the last
	Min, Max      time.Duration // of the delays logged
	Changes       int
	SignalChanges int // changes made by a backoff signal (429)
}

// lockedWriter serializes writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// delayLog is a slog.Handler that reads the throttle's Debug record
// "throttle: delay adjusted" (logged by a scope whenever a response changes
// its delay) and passes warnings on to a text handler.
type delayLog struct {
	mu     sync.Mutex
	scopes map[string]*delayTrace
	warn   slog.Handler
}

func newDelayLog(out io.Writer) *delayLog {
	return &delayLog{
		scopes: make(map[string]*delayTrace),
		warn:   slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn}),
	}
}

func (l *delayLog) logger() *slog.Logger { return slog.New(l) }

func (l *delayLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *delayLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message != "throttle: delay adjusted" {
		if r.Level >= slog.LevelWarn {
			return l.warn.Handle(ctx, r)
		}
		return nil
	}
	var (
		scope           string
		delayMS, change int64
		signal          bool
	)
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "scope":
			scope = a.Value.String()
		case "delay_ms":
			delayMS = a.Value.Int64()
		case "change_ms":
			change = a.Value.Int64()
		case "signal":
			signal = a.Value.Bool()
		}
		return true
	})
	d := time.Duration(delayMS) * time.Millisecond
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.scopes[scope]
	if t == nil {
		before := time.Duration(delayMS-change) * time.Millisecond
		t = &delayTrace{First: before, Min: min(d, before), Max: max(d, before)}
		l.scopes[scope] = t
	}
	t.Last = d
	t.Min, t.Max = min(t.Min, d), max(t.Max, d)
	t.Changes++
	if signal {
		t.SignalChanges++
	}
	return nil
}

func (l *delayLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *delayLog) WithGroup(string) slog.Handler      { return l }

func (l *delayLog) trace(scope string) (delayTrace, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.scopes[scope]
	if !ok {
		return delayTrace{}, false
	}
	return *t, true
}

func ms(d time.Duration) string {
	return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + "ms"
}

// printHeader shows the servers and the throttle's settings for them.
func printHeader(out io.Writer, sites []*site, cfg throttle.Config) {
	fmt.Fprintln(out, "throttle demo: three local servers, one throttled http.Client")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, s := range sites {
		sc := cfg.Scopes[s.name]
		var th string
		switch {
		case sc.AutoThrottle.Enabled:
			th = fmt.Sprintf("AutoThrottle: start %s, delay -> latency/%g, Concurrency %d",
				ms(sc.AutoThrottle.StartDelay), sc.AutoThrottle.TargetConcurrency, sc.Concurrency)
		case s.limit > 0:
			th = fmt.Sprintf("Delay %s, Concurrency %d, backoff x%g on 429 (Window %s)",
				ms(sc.Delay), sc.Concurrency, sc.Backoff.Factor, sc.Window)
		default:
			th = fmt.Sprintf("Delay %s ±%.0f%%, Concurrency %d, SlotDelay %s",
				ms(sc.Delay), sc.Jitter.Max*100, sc.Concurrency, ms(sc.SlotDelay))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\tthrottle: %s\n", s.name, s.host(), s.about, th)
	}
	tw.Flush()
	fmt.Fprintln(out)
}

// printProgress writes one progress line: per site the requests so far,
// the 429s and the rate over the last tick.
func printProgress(out io.Writer, opts options, elapsed time.Duration, sites []*site, logs *delayLog, now time.Time) {
	var b strings.Builder
	fmt.Fprintf(&b, "[%3.0fs]", elapsed.Seconds())
	for i, s := range sites {
		total, recent, tooMany := s.counts(now, opts.Tick)
		if i > 0 {
			b.WriteString(" |")
		}
		fmt.Fprintf(&b, " %s %4d req %3d×429 %5.1f/s", s.name, total, tooMany, float64(recent)/opts.Tick.Seconds())
		if t, ok := logs.trace(s.name); ok && s.name == "slow" {
			fmt.Fprintf(&b, " delay %s", ms(t.Last))
		}
	}
	if opts.TTY {
		fmt.Fprintf(out, "\r%s\x1b[K", b.String())
	} else {
		fmt.Fprintln(out, b.String())
	}
}

// summarize turns what the servers saw into the run's summary.
func summarize(sites []*site, cfg throttle.Config, elapsed time.Duration, start time.Time, logs *delayLog) summary {
	sum := summary{Elapsed: elapsed}
	secs := elapsed.Seconds()
	half := start.Add(elapsed / 2)
	for _, s := range sites {
		sc := cfg.Scopes[s.name]
		firstWindow := start.Add(sc.Window)
		s.mu.Lock()
		ss := siteSummary{
			Name:          s.name,
			Requests:      len(s.arrivals),
			OK:            s.ok,
			TooMany:       s.tooMany,
			Other:         s.other,
			Cut:           s.cut,
			MaxConcurrent: s.maxInflight,
			HiddenLimit:   s.limit,
			MeanInFlight:  s.busy.Seconds() / secs,
		}
		if n := len(s.arrivals); n > 1 {
			ss.MeanGap = s.arrivals[n-1].Sub(s.arrivals[0]) / time.Duration(n-1)
		}
		if i, ok := slices.BinarySearchFunc(s.arrivals, half, time.Time.Compare); ok || i < len(s.arrivals)-1 {
			late := s.arrivals[i:]
			ss.LateGap = late[len(late)-1].Sub(late[0]) / time.Duration(len(late)-1)
		}
		if n := len(s.answers); n > 0 {
			ss.MeanLatency = s.busy / time.Duration(n)
		}
		lateOK := 0
		for _, a := range s.answers {
			ok := a.status >= 200 && a.status < 300
			if ok && !a.at.Before(half) {
				lateOK++
			}
			if a.status == http.StatusTooManyRequests && !a.at.Before(firstWindow) {
				ss.Late429++
			}
		}
		s.mu.Unlock()
		ss.Rate = float64(ss.Requests) / secs
		ss.OKRate = float64(ss.OK) / secs
		ss.LateOKRate = float64(lateOK) / (secs / 2)
		ss.Delay, _ = logs.trace(s.name)
		ss.Explanation = explain(ss, sc)
		sum.Sites = append(sum.Sites, ss)
	}
	return sum
}

// explain says in one line what the throttle did with a site.
func explain(s siteSummary, sc throttle.ScopeConfig) string {
	d := s.Delay
	switch {
	case sc.AutoThrottle.Enabled:
		if d.Changes == 0 {
			return "AutoThrottle saw no response."
		}
		return fmt.Sprintf("AutoThrottle moved the delay from %s (StartDelay) to %s (range %s-%s, %d adjustments) to follow latency/%g: "+
			"mean latency %s, mean gap %s, %.1f requests in flight on average (target %g), %d at most.",
			ms(max(sc.Delay, sc.AutoThrottle.StartDelay)), ms(d.Last), ms(d.Min), ms(d.Max), d.Changes, sc.AutoThrottle.TargetConcurrency,
			ms(s.MeanLatency), ms(s.MeanGap), s.MeanInFlight, sc.AutoThrottle.TargetConcurrency, s.MaxConcurrent)
	case s.HiddenLimit > 0:
		var b strings.Builder
		fmt.Fprintf(&b, "Delay %s is over the limit: %d×429, %d of them after the first %s. ", ms(sc.Delay), s.TooMany, s.Late429, sc.Window)
		if d.SignalChanges > 0 {
			fmt.Fprintf(&b, "Backoff stepped the delay up x%g at %d of them (up to %s) and each Retry-After paused the scope 1s; ",
				sc.Backoff.Factor, d.SignalChanges, ms(d.Max))
		}
		if s.LateGap > 0 && d.Max > 0 && s.LateGap < d.Max*9/10 {
			fmt.Fprintf(&b, "quiet %s windows brought it back down toward the limit (mean gap %s in the second half). ", sc.Window, ms(s.LateGap))
		}
		fmt.Fprintf(&b, "2xx rate %.2f req/s over the run, %.2f in its second half, vs hidden limit %g req/s.", s.OKRate, s.LateOKRate, s.HiddenLimit)
		return b.String()
	default:
		return fmt.Sprintf("the fixed Delay %s (±%.0f%% jitter) paced it at %.1f req/s (mean gap %s); answers take %s, so at most %d in flight (Concurrency %d); no 429, nothing to learn.",
			ms(sc.Delay), sc.Jitter.Max*100, s.Rate, ms(s.MeanGap), ms(s.MeanLatency), s.MaxConcurrent, sc.Concurrency)
	}
}

// printSummary writes the summary table and the explanations.
func printSummary(out io.Writer, sum summary) {
	fmt.Fprintf(out, "\nsummary after %s (as the servers saw it):\n", sum.Elapsed.Round(100*time.Millisecond))
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scope\trequests\t2xx\t429\tother\treq/s\t2xx/s\tmean gap\tmax conc\thidden limit\t")
	for _, s := range sum.Sites {
		limit := "-"
		if s.HiddenLimit > 0 {
			limit = fmt.Sprintf("%g req/s", s.HiddenLimit)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%.2f\t%.2f\t%s\t%d\t%s\t\n",
			s.Name, s.Requests, s.OK, s.TooMany, s.Other+s.Cut, s.Rate, s.OKRate, ms(s.MeanGap), s.MaxConcurrent, limit)
	}
	tw.Flush()
	fmt.Fprintln(out)
	for _, s := range sum.Sites {
		fmt.Fprintf(out, "%-8s %s\n", s.Name+":", wrap(s.Explanation, 90, "         "))
	}
	if sum.ClientErrors > 0 {
		fmt.Fprintf(out, "client errors: %d (first: %v)\n", sum.ClientErrors, sum.FirstError)
	}
}

// wrap breaks text into lines of at most width bytes, indenting the
// lines after the first.
func wrap(text string, width int, indent string) string {
	var b strings.Builder
	n := 0
	for i, w := range strings.Fields(text) {
		if i > 0 && n+1+len(w) > width {
			b.WriteString("\n" + indent)
			n = 0
		} else if i > 0 {
			b.WriteByte(' ')
			n++
		}
		b.WriteString(w)
		n += len(w)
	}
	return b.String()
}
