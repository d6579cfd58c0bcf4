package fieldtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fidelityCases are the real limiters whose models (package internal/sim)
// TestFidelity checks: nginx's limit_req without burst, with a burst
// served at once, with one delayed, and per minute (1000r/m, 16666
// thousandths a second) with delay=3; HAProxy's http_req_rate over 1 s
// and 10 s.
var fidelityCases = []sim.Limiter{
	{Kind: sim.KindNginx, Requests: 20, Period: time.Second, NoDelay: true},
	{Kind: sim.KindNginx, Requests: 20, Period: time.Second, Burst: 5, NoDelay: true, Status: http.StatusTooManyRequests, RetryAfter: time.Second},
	{Kind: sim.KindNginx, Requests: 20, Period: time.Second, Burst: 5},
	{Kind: sim.KindNginx, Requests: 1000, Period: time.Minute, Burst: 8, Delay: 3},
	{Kind: sim.KindHAProxy, Requests: 30, Period: time.Second},
	{Kind: sim.KindHAProxy, Requests: 300, Period: 10 * time.Second, RetryAfter: 2 * time.Second},
}

const (
	// fidelitySeed seeds the traces; case i replays the trace of
	// (fidelitySeed, i).
	fidelitySeed = 21
	// minAgreement is the share of requests on which a model must give
	// the status the real server gave.
	minAgreement = 0.99
	// traceLength and traceRequests bound a trace.
	traceLength   = 80 * time.Second
	traceRequests = 3000
	// replayWorkers is the number of requests a replay has in flight at
	// most (nginx's delay mode holds some for up to a second).
	replayWorkers = 64
	// heldSlack is how far the time nginx held an accepted request may be
	// from the model's delay for the two to agree: the timer, the
	// serving and a busy machine.
	heldSlack = 10 * time.Millisecond
)

// TestFidelity checks the limiter models of package internal/sim against
// the real servers: each of fidelityCases runs in a real nginx or HAProxy
// on loopback, one seeded trace of a few thousand requests at a varied
// rate is replayed to it (all servers at once), and the server's own log
// of each request (its arrival to the millisecond by the clock its
// limiter reads, and its status) is fed to the model: the model must give
// the server's status for at least 99 % of the requests. Timing noise of
// the machine does not count against the model, since the model sees the
// times the server saw: nginx's monotonic clock (nginxClock), HAProxy's
// date when the request was tracked, with one thread (see
// HAProxyOptions.Threads). In delay mode, at least 99 % of the requests
// both delay must be held by nginx at least the model's delay (a timer
// fires late, never early) and half within heldSlack of it.
func TestFidelity(t *testing.T) {
	SkipUnlessEnabled(t)
	t.Parallel() // beside TestField and TestFleetColdStart
	type run struct {
		l     sim.Limiter
		url   string
		log   *ArrivalLog
		trace []time.Duration
		res   replayResult
	}
	runs := make([]*run, len(fidelityCases))
	for i, l := range fidelityCases {
		r := &run{l: l, log: ListenArrivals(t)}
		switch l.Kind {
		case sim.KindNginx:
			o, err := NginxFor(l)
			require.NoError(t, err)
			o.ArrivalLog = r.log.Addr()
			r.url = StartNginx(t, o)
		case sim.KindHAProxy:
			o, err := HAProxyFor(l)
			require.NoError(t, err)
			o.ArrivalLog, o.Threads = r.log.Addr(), 1
			r.url = StartHAProxy(t, o)
		}
		r.trace = fidelityTrace(rand.New(rand.NewPCG(fidelitySeed, uint64(i))), l)
		runs[i] = r
	}
	t.Logf("replaying the traces of seed %d (%v at most each) to %d servers at once", fidelitySeed, traceLength, len(runs))
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { r.res = replay(t.Context(), r.url, r.trace) })
	}
	wg.Wait()

	for _, r := range runs {
		t.Run(r.l.String(), func(t *testing.T) {
			require.Zero(t, r.res.errors, "transport errors, first: %v", r.res.firstErr)
			arrivals, err := r.log.Wait(len(r.trace), 5*time.Second)
			require.NoError(t, err)
			require.Len(t, arrivals, len(r.trace), "arrivals logged for the requests sent")
			if r.l.Kind == sim.KindNginx {
				nginxClock(arrivals)
			}
			f := compare(r.l, arrivals)
			t.Logf("%s: %s", r.l, f)
			assert.GreaterOrEqual(t, f.agreement(), minAgreement, "share of requests where the model gives the server's status; first disagreements:\n%s",
				strings.Join(f.first, "\n"))
			if f.delayed > 0 {
				// A timer fires late on a busy machine, never early.
				assert.GreaterOrEqual(t, float64(f.delayed-f.early), minAgreement*float64(f.delayed),
					"delayed requests that nginx held at least the model's delay")
				assert.GreaterOrEqual(t, 2*f.near, f.delayed, "delayed requests that nginx held within %v of the model's delay", heldSlack)
			}
			assert.Equal(t, f.statuses, r.res.statuses, "statuses logged by the server and received by the client")
			// The configuration's Retry-After is on every refusal.
			want := map[string]int{}
			if n := f.refused(); n > 0 && r.l.RetryAfter > 0 {
				want[fmt.Sprint(int(r.l.RetryAfter/time.Second))] = n
			}
			assert.Equal(t, want, r.res.retryAfter, "Retry-After values on the refusals")
		})
	}
}

// fidelityTrace returns the send times, from the start, of a trace for
// the limiter l, drawn from rnd: phases of 1-6 s at 0.3 to 4 times the
// limit (evenly spaced or Poisson), bursts of 2-20 requests within 10
// ms, and pauses of 0.2-2.5 times the limiter's memory (HAProxy's period;
// the time nginx takes to drain its burst) up to 12 s, until traceLength
// or traceRequests. The times are sorted.
func fidelityTrace(rnd *rand.Rand, l sim.Limiter) []time.Duration {
	rate := l.Rate()
	memory := l.Period
	if l.Kind == sim.KindNginx {
		memory = time.Duration(float64(1+l.Burst) / rate * float64(time.Second))
	}
	factors := []float64{0.3, 0.6, 0.9, 1, 1.1, 1.5, 2, 4}
	var ts []time.Duration
	var t time.Duration
	for t < traceLength && len(ts) < traceRequests {
		switch p := rnd.Float64(); {
		case p < 0.6:
			gap := float64(time.Second) / (factors[rnd.IntN(len(factors))] * rate)
			poisson := rnd.IntN(2) == 0
			for end := t + time.Duration((1+5*rnd.Float64())*float64(time.Second)); t < end; {
				ts = append(ts, t)
				if poisson {
					t += time.Duration(rnd.ExpFloat64() * gap)
				} else {
					t += time.Duration(gap)
				}
			}
		case p < 0.9:
			for range 2 + rnd.IntN(19) {
				ts = append(ts, t+time.Duration(rnd.IntN(10))*time.Millisecond)
			}
			t += 10 * time.Millisecond
		default:
			t += min(12*time.Second, time.Duration((0.2+2.3*rnd.Float64())*float64(memory)))
		}
	}
	slices.Sort(ts)
	return ts[:min(len(ts), traceRequests)]
}

// replayResult is what the client of a replay saw.
type replayResult struct {
	statuses   map[int]int    // answers by status
	retryAfter map[string]int // refusals (not 2xx) by Retry-After value
	errors     int
	firstErr   error
}

// replay sends a GET of url at each time of trace from now, with at most
// replayWorkers in flight (a request waits for a free one), and returns
// what came back.
func replay(ctx context.Context, url string, trace []time.Duration) replayResult {
	tr := &http.Transport{MaxIdleConnsPerHost: replayWorkers, MaxConnsPerHost: replayWorkers}
	defer tr.CloseIdleConnections()
	res := replayResult{statuses: map[int]int{}, retryAfter: map[string]int{}}
	var mu sync.Mutex
	client := &http.Client{Transport: retryAfterCounter{tr, &mu, res.retryAfter}, Timeout: 10 * time.Second}
	jobs := make(chan struct{})
	var wg sync.WaitGroup
	for range replayWorkers {
		wg.Go(func() {
			for range jobs {
				s := get(ctx, client, url)
				mu.Lock()
				if s.Err != nil {
					if res.errors++; res.firstErr == nil {
						res.firstErr = s.Err
					}
				} else {
					res.statuses[s.Status]++
				}
				mu.Unlock()
			}
		})
	}
	start := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
send:
	for _, at := range trace {
		if d := time.Until(start.Add(at)); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				break send
			case <-timer.C:
			}
		}
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return res
}

// retryAfterCounter is an http.RoundTripper that counts the answers that
// are not 2xx by their Retry-After value, under mu.
type retryAfterCounter struct {
	base   http.RoundTripper
	mu     *sync.Mutex
	counts map[string]int
}

func (c retryAfterCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(req)
	if err == nil && resp.StatusCode/100 != 2 {
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			c.mu.Lock()
			c.counts[ra]++
			c.mu.Unlock()
		}
	}
	return resp, err
}

// nginxClock sets the At of nginx's arrivals to the time of nginx's
// monotonic clock (ngx_current_msec), the one limit_req reads, minus a
// constant. nginx's $msec and $request_time are on the wall clock; nginx
// reads both clocks at once, but their milliseconds are cut at different
// instants, so at each reading the wall clock's millisecond is the
// monotonic one's minus a constant d and minus b, 0 or 1 (1 at a share
// of the readings: the fraction of a millisecond in the clocks' offset).
// Differences of $msec are thus 1 ms off for many pairs of requests,
// which flips 2-8 % of the decisions of a 20 r/s limit_req.
//
// $connection_time is on the monotonic clock: the time since the
// connection's accept, at S. For each answer of a connection, w - ct =
// S - d - b (w its $msec, ct its $connection_time, in ms): the larger of
// the two values is S - d where both b occur; where one does, b is taken
// to be the one most answers of the other connections have. A request's
// arrival is then S - d plus its ConnArrival, and the time nginx held it
// ConnAnswer - ConnArrival.
func nginxClock(arrivals []Arrival) {
	type span struct{ lo, hi int64 } // of w - ct
	conns := map[uint64]*span{}
	y := func(a Arrival) int64 { return a.At.Add(a.Held).UnixMilli() - a.ConnAnswer.Milliseconds() }
	for _, a := range arrivals {
		v := y(a)
		if c := conns[a.Conn]; c != nil {
			c.lo, c.hi = min(c.lo, v), max(c.hi, v)
		} else {
			conns[a.Conn] = &span{v, v}
		}
	}
	var ones, known int
	for _, a := range arrivals {
		if c := conns[a.Conn]; c.hi > c.lo {
			known++
			if y(a) < c.hi {
				ones++
			}
		}
	}
	for i, a := range arrivals {
		c := conns[a.Conn]
		s := c.hi
		if c.hi == c.lo && 2*ones > known {
			s++
		}
		arrivals[i].At = time.UnixMilli(s + a.ConnArrival.Milliseconds())
		arrivals[i].Held = a.ConnAnswer - a.ConnArrival
	}
}

// fidelity is how a model's answers compare with a server's.
type fidelity struct {
	requests, agree int
	statuses        map[int]int // the server's
	// delayed counts the requests both accepted that nginx held 1 ms or
	// more, or the model delayed; near those whose two times are within
	// heldSlack, early those nginx answered before the model's delay.
	delayed, near, early int
	first                []string // the first disagreements
}

func (f fidelity) agreement() float64 { return float64(f.agree) / float64(max(1, f.requests)) }

// refused is the number of the server's answers that were not 2xx.
func (f fidelity) refused() int {
	n := 0
	for st, c := range f.statuses {
		if st/100 != 2 {
			n += c
		}
	}
	return n
}

func (f fidelity) String() string {
	s := fmt.Sprintf("%d requests, %d refused by the server; the model gives the server's status for %d (%.2f %%)",
		f.requests, f.refused(), f.agree, 100*f.agreement())
	if f.delayed > 0 {
		s += fmt.Sprintf("; of %d delayed, nginx held %d (%.1f %%) within %v of the model's delay, %d for less",
			f.delayed, f.near, 100*float64(f.near)/float64(f.delayed), heldSlack, f.early)
	}
	return s
}

// compare feeds the arrivals to a new model of l, in time order, and
// counts where it answers as the server did. Within one millisecond the
// accepted requests go first, the least delayed first: the server's order
// there is not in its log (nginx logs a delayed request when it answers,
// HAProxy at the end of the stream), and a limiter at one instant accepts
// a run of requests, each delayed more than the one before, and refuses
// the rest (a refusal never makes room), so that is its order.
func compare(l sim.Limiter, arrivals []Arrival) fidelity {
	ok := func(a Arrival) bool { return a.Status/100 == 2 }
	sort.SliceStable(arrivals, func(i, j int) bool {
		if !arrivals[i].At.Equal(arrivals[j].At) {
			return arrivals[i].At.Before(arrivals[j].At)
		}
		if ok(arrivals[i]) != ok(arrivals[j]) {
			return ok(arrivals[i])
		}
		return arrivals[i].Held < arrivals[j].Held
	})
	f := fidelity{requests: len(arrivals), statuses: map[int]int{}}
	srv := l.NewServer()
	t0 := arrivals[0].At
	for _, a := range arrivals {
		f.statuses[a.Status]++
		r := srv.Handle(a.At, "client")
		if r.Status == a.Status {
			f.agree++
		} else if len(f.first) < 10 {
			f.first = append(f.first, fmt.Sprintf("  at %v: server %d, model %d", a.At.Sub(t0), a.Status, r.Status))
		}
		if ok(a) && r.Status == a.Status && (a.Held >= time.Millisecond || r.Latency > 0) {
			f.delayed++
			switch d := a.Held - r.Latency; {
			case d < 0:
				f.early++
			case d < heldSlack:
				f.near++
			}
		}
	}
	return f
}

// TestNginxClock: nginxClock rebuilds the monotonic milliseconds of
// arrivals logged with a wall clock whose milliseconds are cut 0.7 ms
// off the monotonic clock's, up to one constant, delayed requests and a
// connection of a single answer included.
func TestNginxClock(t *testing.T) {
	const offset = 5_000_000_700 // µs from the wall clock to the monotonic one
	ms := func(us int64) int64 { return us / 1000 }
	type req struct {
		conn                  uint64
		arrival, held, accept int64 // µs: real time of the arrival, time held, the connection's accept
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	var reqs []req
	for c := range uint64(6) {
		accept := int64(c) * 777_777
		n := 40
		if c == 5 {
			n = 1 // one answer: b is guessed from the others
		}
		for range n {
			held := int64(0)
			if rnd.IntN(3) == 0 {
				held = rnd.Int64N(300_000)
			}
			reqs = append(reqs, req{c, accept + 1 + rnd.Int64N(60_000_000), held, accept})
		}
	}
	var arrivals []Arrival
	var mono []int64
	for _, r := range reqs {
		answer := r.arrival + r.held
		start := ms(r.accept + offset)
		arrivals = append(arrivals, Arrival{
			At: time.UnixMilli(ms(r.arrival)), Held: time.Duration(ms(answer)-ms(r.arrival)) * time.Millisecond, Status: 200,
			Conn: r.conn, ConnArrival: time.Duration(ms(r.arrival+offset)-start) * time.Millisecond,
			ConnAnswer: time.Duration(ms(answer+offset)-start) * time.Millisecond,
		})
		mono = append(mono, ms(r.arrival+offset))
	}
	wallOff := 0
	for i, a := range arrivals {
		if a.At.UnixMilli()-arrivals[0].At.UnixMilli() != mono[i]-mono[0] {
			wallOff++
		}
	}
	require.Positive(t, wallOff, "the wall clock's differences are off for some pairs")
	nginxClock(arrivals)
	d := mono[0] - arrivals[0].At.UnixMilli()
	for i, a := range arrivals {
		if got := a.At.UnixMilli() + d; got != mono[i] {
			t.Fatalf("request %d (connection %d): %d, want %d", i, reqs[i].conn, got, mono[i])
		}
		if want := time.Duration(ms(reqs[i].arrival+reqs[i].held+offset)-mono[i]) * time.Millisecond; a.Held != want {
			t.Fatalf("request %d: held %v, want %v", i, a.Held, want)
		}
	}
}
