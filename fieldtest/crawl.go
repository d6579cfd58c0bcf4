package fieldtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
)

// APIConfig returns the throttle configuration of every field-test crawl:
// the README's advice for an API whose limit you do not know (rampup on,
// robots.txt off). It is the one place to tune it.
func APIConfig() throttle.Config {
	cfg := throttle.DefaultConfig()
	cfg.Default.Rampup.Enabled = true
	cfg.Robots.Enabled = false
	return cfg
}

// Sample is one request of a crawl.
type Sample struct {
	// At is when the response's body was read and closed (or the request
	// failed), since the crawl's first request.
	At time.Duration
	// Status is the response's status code; 0 when Err is not nil.
	Status int
	// Err is the transport error, or the error reading the body.
	Err error
	// Shutdown reports that Err came from the crawl's end: the request was
	// cancelled by it, or the throttle refused to wait past it (an error
	// wrapping context.DeadlineExceeded). The worker stops after it.
	Shutdown bool
}

// Crawl runs workers goroutines that each GET url with client over and
// over, reading and closing every body, until duration has passed since
// it started (or ctx ends), and returns every request's Sample in the
// order of At. The requests still waiting or in flight at the end are
// cancelled, and the throttle fails at once the requests it could not
// start before the end; they are the Samples with Shutdown set, one per
// worker at most.
func Crawl(ctx context.Context, client *http.Client, url string, workers int, duration time.Duration) []Sample {
	ctx, cancel := context.WithTimeout(ctx, duration)
	defer cancel()
	start := time.Now()
	per := make([][]Sample, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				s := get(ctx, client, url)
				s.At = time.Since(start)
				s.Shutdown = s.Err != nil && (ctx.Err() != nil ||
					errors.Is(s.Err, context.DeadlineExceeded) || errors.Is(s.Err, context.Canceled))
				per[w] = append(per[w], s)
				if s.Shutdown {
					// The end came, or the throttle said that the
					// request could not start before it.
					return
				}
				if s.Err != nil {
					// Not a hot loop on a failing server (real time: the
					// field suite runs against real servers).
					select {
					case <-ctx.Done():
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}
		})
	}
	wg.Wait()
	samples := slices.Concat(per...)
	slices.SortStableFunc(samples, func(a, b Sample) int { return cmp.Compare(a.At, b.At) })
	return samples
}

// get sends one GET and reads and closes the body. It leaves At unset.
func get(ctx context.Context, client *http.Client, url string) Sample {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{Err: err}
	}
	resp, err := client.Do(req)
	if err != nil {
		return Sample{Err: err}
	}
	_, err = io.Copy(io.Discard, resp.Body)
	if cerr := resp.Body.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return Sample{Err: err}
	}
	return Sample{Status: resp.StatusCode}
}

const (
	// BucketWidth is the width of Summary.Buckets.
	BucketWidth = 10 * time.Second
	// SteadyFrom is where the steady part of a crawl, past rampup, starts
	// (Summary.SteadyFrom), in crawls of at least twice as long.
	SteadyFrom = 60 * time.Second
	// ReachFraction is the fraction of the limit that Summary.Reach waits
	// for.
	ReachFraction = 0.8
	// ColdFraction is the fraction of the limit that Summary.Cold waits
	// for.
	ColdFraction = 0.9
)

// Summary holds the figures of a crawl against a server with a known
// limit. "Signals" are backoff signals: 429 and 503 answers.
type Summary struct {
	// Limit is the server's sustained limit in requests per second.
	Limit float64
	// End is the crawl's end: its duration, or its last sample if that
	// came later (a response that arrived just after the deadline).
	End time.Duration
	// Buckets are the 2xx answers per second in each BucketWidth of the
	// crawl; the last one may be shorter.
	Buckets []float64
	// Reach is the first time at which the 2xx rate over the trailing
	// BucketWidth was at least ReachFraction of Limit; Reached is false
	// if it never was.
	Reach   time.Duration
	Reached bool
	// Cold is the first time at which the 2xx answers in the trailing
	// window (t-SteadyFrom, t], over SteadyFrom, were at least
	// ColdFraction of Limit, the time before the crawl counting as no
	// answers: with SteadyFrom at 60 s, the cold start of package
	// internal/sim (ColdStart90: 90 % of the limit over a trailing
	// minute). ColdReached is false if they never were.
	Cold        time.Duration
	ColdReached bool
	// SteadyFrom is the start of the steady part [SteadyFrom, End]:
	// the constant SteadyFrom, or End/2 for a crawl shorter than twice
	// that.
	SteadyFrom time.Duration
	// SteadyRate is the 2xx rate (per second) over [SteadyFrom, End], and
	// SteadyFraction that rate over Limit.
	SteadyRate, SteadyFraction float64
	// SteadySignalsPerMin is the number of signals per minute over
	// [SteadyFrom, End].
	SteadySignalsPerMin float64
	// LastThirdRate is the 2xx rate (per second) over the last third of
	// the crawl, (End - End/3, End], and LastThirdFraction that rate
	// over Limit.
	LastThirdRate, LastThirdFraction float64
	// Requests counts the responses; OK the 2xx ones, Signals the 429 and
	// 503 ones, Other the rest.
	Requests, OK, Signals, Other int
	// Statuses counts the responses per status code.
	Statuses map[int]int
	// Errors counts the transport errors before the crawl's end, and
	// ShutdownErrors the requests cancelled at its end.
	Errors, ShutdownErrors int
	// FirstErrors holds up to 5 of the errors counted in Errors.
	FirstErrors []error
}

// isSignal reports whether status is a backoff signal.
func isSignal(status int) bool {
	return status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable
}

// Summarize computes the figures of samples, sorted by At as Crawl returns
// them, against a server whose limit is limit requests per second. The
// crawl's end is taken to be its last sample; SummarizeUntil takes it
// from the caller.
func Summarize(samples []Sample, limit float64) Summary {
	var end time.Duration
	for _, x := range samples {
		end = max(end, x.At)
	}
	return SummarizeUntil(samples, limit, end)
}

// SummarizeUntil is Summarize for a crawl that ended at end, its duration:
// the last sample may come earlier, when the throttle refused at once to
// wait past the end.
func SummarizeUntil(samples []Sample, limit float64, end time.Duration) Summary {
	s := Summary{Limit: limit, End: end, Statuses: map[int]int{}}
	for _, x := range samples {
		s.End = max(s.End, x.At)
	}
	s.SteadyFrom = SteadyFrom
	if s.End < 2*SteadyFrom {
		s.SteadyFrom = s.End / 2
	}
	n := max(1, int((s.End+BucketWidth-1)/BucketWidth))
	okPer := make([]int, n)
	var okTimes []time.Duration
	lastThird := s.End - s.End/3
	var steadyOK, steadySignals, lastOK int
	for _, x := range samples {
		if x.Err != nil {
			if x.Shutdown {
				s.ShutdownErrors++
			} else {
				s.Errors++
				if len(s.FirstErrors) < 5 {
					s.FirstErrors = append(s.FirstErrors, x.Err)
				}
			}
			continue
		}
		s.Requests++
		s.Statuses[x.Status]++
		steady := x.At >= s.SteadyFrom
		switch {
		case x.Status >= 200 && x.Status < 300:
			s.OK++
			okPer[min(int(x.At/BucketWidth), n-1)]++
			okTimes = append(okTimes, x.At)
			if steady {
				steadyOK++
			}
			if x.At > lastThird {
				lastOK++
			}
		case isSignal(x.Status):
			s.Signals++
			if steady {
				steadySignals++
			}
		default:
			s.Other++
		}
	}
	for i, c := range okPer {
		width := min(BucketWidth, s.End-time.Duration(i)*BucketWidth)
		if width > 0 {
			s.Buckets = append(s.Buckets, float64(c)/width.Seconds())
		}
	}
	s.Reach, s.Reached = firstReach(okTimes, BucketWidth, ReachFraction*limit)
	s.Cold, s.ColdReached = firstReach(okTimes, s.SteadyFrom, ColdFraction*limit)
	if third := s.End - lastThird; third > 0 {
		s.LastThirdRate = float64(lastOK) / third.Seconds()
	}
	if steadyDur := s.End - s.SteadyFrom; steadyDur > 0 {
		s.SteadyRate = float64(steadyOK) / steadyDur.Seconds()
		s.SteadySignalsPerMin = float64(steadySignals) / steadyDur.Minutes()
	}
	if limit > 0 {
		s.SteadyFraction = s.SteadyRate / limit
		s.LastThirdFraction = s.LastThirdRate / limit
	}
	return s
}

// firstReach returns the first of okTimes (sorted) at which the answers
// in the trailing window (t-window, t] were at least rate per second over
// the window, and whether there was one.
func firstReach(okTimes []time.Duration, window time.Duration, rate float64) (time.Duration, bool) {
	// The epsilon keeps a product like 0.9 x 60 from rounding up past a
	// whole number.
	need := rate*window.Seconds() - 1e-9
	for i, j := 0, 0; i < len(okTimes); i++ {
		for okTimes[j] <= okTimes[i]-window {
			j++
		}
		if float64(i-j+1) >= need {
			return okTimes[i], true
		}
	}
	return 0, false
}

// String returns the figures on a few lines.
func (s Summary) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "limit %.1f req/s, crawl %.1f s\n", s.Limit, s.End.Seconds())
	fmt.Fprintf(&b, "2xx/s per %v:", BucketWidth)
	for _, r := range s.Buckets {
		fmt.Fprintf(&b, " %.1f", r)
	}
	b.WriteString("\n")
	if s.Reached {
		fmt.Fprintf(&b, "trailing-%v 2xx rate reached %.0f%% of the limit at %.1f s\n", BucketWidth, 100*ReachFraction, s.Reach.Seconds())
	} else {
		fmt.Fprintf(&b, "trailing-%v 2xx rate never reached %.0f%% of the limit\n", BucketWidth, 100*ReachFraction)
	}
	if s.ColdReached {
		fmt.Fprintf(&b, "trailing-%.0fs 2xx rate reached %.0f%% of the limit at %.1f s\n", s.SteadyFrom.Seconds(), 100*ColdFraction, s.Cold.Seconds())
	} else {
		fmt.Fprintf(&b, "trailing-%.0fs 2xx rate never reached %.0f%% of the limit\n", s.SteadyFrom.Seconds(), 100*ColdFraction)
	}
	fmt.Fprintf(&b, "last third (%.0f s, %.0f s]: 2xx %.2f/s = %.0f%% of the limit\n",
		(s.End - s.End/3).Seconds(), s.End.Seconds(), s.LastThirdRate, 100*s.LastThirdFraction)
	fmt.Fprintf(&b, "[%.0f s, %.0f s]: 2xx %.2f/s = %.0f%% of the limit, %.2f signals/min\n",
		s.SteadyFrom.Seconds(), s.End.Seconds(), s.SteadyRate, 100*s.SteadyFraction, s.SteadySignalsPerMin)
	statuses := make([]int, 0, len(s.Statuses))
	for c := range s.Statuses {
		statuses = append(statuses, c)
	}
	slices.Sort(statuses)
	fmt.Fprintf(&b, "requests %d (2xx %d, signals %d, other %d; by status:", s.Requests, s.OK, s.Signals, s.Other)
	for _, c := range statuses {
		fmt.Fprintf(&b, " %d×%d", c, s.Statuses[c])
	}
	fmt.Fprintf(&b, "), transport errors %d, cancelled at the end %d", s.Errors, s.ShutdownErrors)
	for _, err := range s.FirstErrors {
		fmt.Fprintf(&b, "\n  error: %v", err)
	}
	return b.String()
}
