package fieldtest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/hooks"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The fleet test: fleetProcs worker processes, fleetGoroutines goroutines
// each (16 in all, as a field case), share one Redis store and crawl one
// nginx; beside it, one process crawls another nginx of the same limit
// alone, so the two cold starts are compared in the same run.
const (
	fleetProcs      = 4
	fleetGoroutines = workers / fleetProcs
	// fleetReach is the share of the limit whose first arrival (the 2xx
	// rate over the trailing BucketWidth) the test compares.
	fleetReach = 0.9
	// fleetLag is how much later than one process the fleet may reach
	// it.
	fleetLag = 30 * time.Second
	// fleetMinSteady and fleetMaxSignals bound the fleet over
	// [SteadyFrom, End].
	fleetMinSteady  = 0.9
	fleetMaxSignals = 2.0
	// gateSlack is the time a gate takes to reach the other processes
	// (the body is read and the permit released after the 429's
	// headers came back, and the release's script runs in Redis), and
	// the tolerance at its end.
	gateSlack = 100 * time.Millisecond
)

// The environment of a worker process (the test binary run again).
const (
	workerEnv      = "FIELDTEST_FLEET_WORKER" // "1" in a worker
	workerRedis    = "FIELDTEST_FLEET_REDIS"
	workerPrefix   = "FIELDTEST_FLEET_PREFIX"
	workerURL      = "FIELDTEST_FLEET_URL"
	workerStart    = "FIELDTEST_FLEET_START" // Unix ns: the crawl's common start
	workerDuration = "FIELDTEST_FLEET_DURATION"
	// workerTimeout, when set, bounds each request (wait included), as
	// a crawler's client timeout does.
	workerTimeout = "FIELDTEST_FLEET_TIMEOUT"
)

// record is one request of a worker, in Unix nanoseconds: when the
// throttle let it go, when its answer's headers came back, and the
// Retry-After it carried (seconds).
type record struct {
	Start  int64 `json:"s"`
	Answer int64 `json:"a"`
	End    int64 `json:"e"`
	Status int   `json:"c"`
	Retry  int   `json:"r,omitempty"`
	Err    string
	Down   bool `json:"d,omitempty"` // the crawl's end cancelled it
	// Lost: the request's own timeout (workerTimeout), not the crawl's
	// end, ended it while it waited in the throttle.
	Lost bool `json:"l,omitempty"`
	// Waited is how long the throttle held the request (the Admitted
	// hook's Waited), in ns; on the admission records only (Wait set).
	Waited int64 `json:"w,omitempty"`
	Wait   bool  `json:"wr,omitempty"`
}

// recorder is the base transport of a worker: it sees each request as the
// throttle lets it go, and each answer as it comes back.
type recorder struct {
	base http.RoundTripper
	mu   sync.Mutex
	recs map[*http.Request]*record
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	rec := &record{Start: time.Now().UnixNano()}
	resp, err := r.base.RoundTrip(req)
	rec.Answer = time.Now().UnixNano()
	if err == nil {
		rec.Status = resp.StatusCode
		rec.Retry, _ = strconv.Atoi(resp.Header.Get("Retry-After"))
	}
	r.mu.Lock()
	r.recs[req] = rec
	r.mu.Unlock()
	return resp, err
}

// runFleetWorker is a worker process: it crawls the URL from
// fleetGoroutines goroutines through a throttle on the shared store until
// the common start plus the duration, then writes its records to stdout,
// one JSON object a line.
func runFleetWorker() error {
	start, err := strconv.ParseInt(os.Getenv(workerStart), 10, 64)
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(os.Getenv(workerDuration))
	if err != nil {
		return err
	}
	var timeout time.Duration
	if v := os.Getenv(workerTimeout); v != "" {
		if timeout, err = time.ParseDuration(v); err != nil {
			return err
		}
	}
	rdb := redisstore.NewClient(&redis.Options{Addr: os.Getenv(workerRedis)})
	defer rdb.Close()
	store, err := redisstore.New(rdb, redisstore.Options{Prefix: os.Getenv(workerPrefix)})
	if err != nil {
		return err
	}
	defer store.Close()
	cfg := APIConfig()
	cfg.Store = store
	var (
		wmu    sync.Mutex
		waited []int64
	)
	cfg.Hooks.Admitted = func(e hooks.Admitted) {
		wmu.Lock()
		waited = append(waited, int64(e.Waited))
		wmu.Unlock()
	}
	m, err := throttle.New(cfg)
	if err != nil {
		return err
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = fleetGoroutines
	defer base.CloseIdleConnections()
	rec := &recorder{base: base, recs: map[*http.Request]*record{}}
	client := &http.Client{Transport: m.Transport(rec)}

	end := time.Unix(0, start).Add(d)
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	time.Sleep(time.Until(time.Unix(0, start))) // the workers start together
	var (
		wg  sync.WaitGroup
		mu  sync.Mutex
		out []record
	)
	url := os.Getenv(workerURL)
	for range fleetGoroutines {
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, rcancel := ctx, context.CancelFunc(func() {})
				if timeout > 0 {
					rctx, rcancel = context.WithTimeout(ctx, timeout)
				}
				dl, _ := rctx.Deadline()
				s := get(rctx, client, url)
				rcancel()
				r := record{End: time.Now().UnixNano(), Status: s.Status}
				if s.Err != nil {
					r.Err = s.Err.Error()
					// The request's own timeout (not the crawl's end)
					// ended it: in the throttle, it is lost to a wait;
					// in flight, a transport error.
					own := dl.Before(end) && errors.Is(s.Err, context.DeadlineExceeded)
					var we *throttle.WaitError
					r.Lost = own && errors.As(s.Err, &we)
					r.Down = !own && (ctx.Err() != nil || strings.Contains(r.Err, "deadline exceeded") || strings.Contains(r.Err, "context canceled"))
				}
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				if r.Down {
					return
				}
				if s.Err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	// The records of the base transport: when each request went out and
	// what came back. Their order is the answers' (End), matched to the
	// crawl's by nothing: the gate check needs the starts and the
	// answers, the figures need the ends and statuses.
	enc := json.NewEncoder(os.Stdout)
	for _, r := range out {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	wmu.Lock()
	for _, w := range waited {
		if err := enc.Encode(record{Wait: true, Waited: w}); err != nil {
			wmu.Unlock()
			return err
		}
	}
	wmu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, r := range rec.recs {
		r.End = 0 // a request as the server saw it
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// fleetRun is what the workers of a run reported: the crawl's answers
// (End set) and the requests as they went out (Start set).
type fleetRun struct {
	ends   []record
	sent   []record
	waited []time.Duration // every admission's wait in the throttle
}

// runFleet starts procs workers on redisAddr crawling url for d and
// collects their records.
func runFleet(t *testing.T, redisAddr, url string, procs int, d, timeout time.Duration) fleetRun {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	start := time.Now().Add(2 * time.Second) // time for every worker to start
	prefix := fmt.Sprintf("fleet%d:", time.Now().UnixNano())
	outs := make([]bytes.Buffer, procs)
	errs := make([]bytes.Buffer, procs)
	cmds := make([]*exec.Cmd, procs)
	for i := range procs {
		cmd := exec.CommandContext(t.Context(), exe, "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"=1", workerRedis+"="+redisAddr, workerPrefix+"="+prefix,
			workerURL+"="+url, workerStart+"="+strconv.FormatInt(start.UnixNano(), 10), workerDuration+"="+d.String())
		if timeout > 0 {
			cmd.Env = append(cmd.Env, workerTimeout+"="+timeout.String())
		}
		cmd.Stdout, cmd.Stderr = &outs[i], &errs[i]
		require.NoError(t, cmd.Start())
		cmds[i] = cmd
	}
	var run fleetRun
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("worker %d: %v\n%s", i, err, errs[i].String())
		}
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			var r record
			require.NoError(t, json.Unmarshal(sc.Bytes(), &r), "worker %d: %q", i, sc.Text())
			if r.Wait {
				run.waited = append(run.waited, time.Duration(r.Waited))
				continue
			}
			if r.End != 0 {
				r.End -= start.UnixNano()
				run.ends = append(run.ends, r)
			} else {
				r.Start -= start.UnixNano()
				r.Answer -= start.UnixNano()
				run.sent = append(run.sent, r)
			}
		}
	}
	return run
}

// samples turns the answers of a fleet into a crawl's samples.
func (f fleetRun) samples() []Sample {
	var ss []Sample
	for _, r := range f.ends {
		s := Sample{At: time.Duration(r.End), Status: r.Status, Shutdown: r.Down}
		if r.Err != "" {
			s.Err = fmt.Errorf("%s", r.Err)
		}
		ss = append(ss, s)
	}
	slices.SortStableFunc(ss, func(a, b Sample) int { return cmp.Compare(a.At, b.At) })
	return ss
}

// inGates counts the requests that went out inside a Retry-After gate
// another request of the fleet had received (from gateSlack after its
// answer to gateSlack before the gate's end), and returns up to 5 of
// them.
func (f fleetRun) inGates() (int, []string) {
	sent := slices.Clone(f.sent)
	slices.SortFunc(sent, func(a, b record) int { return cmp.Compare(a.Start, b.Start) })
	n := 0
	var first []string
	for _, g := range f.sent {
		if g.Retry <= 0 {
			continue
		}
		from := g.Answer + int64(gateSlack)
		to := g.Answer + int64(time.Duration(g.Retry)*time.Second-gateSlack)
		i, _ := slices.BinarySearchFunc(sent, from, func(r record, t int64) int { return cmp.Compare(r.Start, t) })
		for ; i < len(sent) && sent[i].Start < to; i++ {
			n++
			if len(first) < 5 {
				first = append(first, fmt.Sprintf("a request sent at %.3f s, inside the gate of the %d answered at %.3f s (Retry-After: %d)",
					time.Duration(sent[i].Start).Seconds(), g.Status, time.Duration(g.Answer).Seconds(), g.Retry))
			}
		}
	}
	return n, first
}

// reachAt returns the first time the 2xx rate over the trailing
// BucketWidth was at least frac of limit, or -1.
func reachAt(samples []Sample, limit, frac float64) time.Duration {
	need := frac * limit * BucketWidth.Seconds()
	var oks []time.Duration
	for _, s := range samples {
		if s.Err == nil && s.Status >= 200 && s.Status < 300 {
			oks = append(oks, s.At)
		}
	}
	for i, j := 0, 0; i < len(oks); i++ {
		for oks[j] <= oks[i]-BucketWidth {
			j++
		}
		if float64(i-j+1) >= need {
			return oks[i]
		}
	}
	return -1
}

// TestFleetColdStart: four worker processes sharing one Redis store crawl
// one nginx limit_req (5 r/s, burst 5, 429 with Retry-After: 1) from a
// cold start with rampup on, 16 goroutines in all, for the field
// duration; one process alone crawls another such nginx at the same time.
// The fleet reaches 90 % of the limit no more than 30 s after the lone
// process, then holds at least 90 % of it with at most 2 signals a minute
// (or one more than the lone process had);
// no request of any worker goes out inside a Retry-After gate that
// another received.
func TestFleetColdStart(t *testing.T) {
	SkipUnlessEnabled(t)
	t.Parallel() // beside TestField
	d := crawlDuration(t)
	srv := redistest.Start(t) // skips without redis-server, unless THROTTLE_REQUIRE_REDIS=1
	opts := NginxOptions{Rate: 5, Burst: 5, Status: http.StatusTooManyRequests, RetryAfter: 1}
	fleetURL, aloneURL := StartNginx(t, opts), StartNginx(t, opts)
	limit := opts.Limit()

	var alone []Sample
	done := make(chan struct{})
	go func() {
		defer close(done)
		m, err := throttle.New(APIConfig())
		if err != nil {
			t.Error(err)
			return
		}
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = workers
		defer base.CloseIdleConnections()
		time.Sleep(2 * time.Second) // the fleet's workers start 2 s from now
		alone = Crawl(t.Context(), &http.Client{Transport: m.Transport(base)}, aloneURL, workers, d)
	}()
	fleet := runFleet(t, srv.Addr(), fleetURL, fleetProcs, d, 0)
	<-done

	one := SummarizeUntil(alone, limit, d)
	all := SummarizeUntil(fleet.samples(), limit, d)
	t.Logf("one process, %d goroutines:\n%s", workers, one)
	t.Logf("%d processes, %d goroutines each, one Redis:\n%s", fleetProcs, fleetGoroutines, all)
	oneAt, allAt := reachAt(alone, limit, fleetReach), reachAt(fleet.samples(), limit, fleetReach)
	t.Logf("%.0f %% of the limit (trailing %v): one process at %.1f s, the fleet at %.1f s",
		100*fleetReach, BucketWidth, oneAt.Seconds(), allAt.Seconds())
	gated, first := fleet.inGates()
	t.Logf("requests sent inside another's Retry-After gate: %d", gated)

	require.GreaterOrEqual(t, oneAt, time.Duration(0), "one process never reached %.0f %% of the limit", 100*fleetReach)
	require.GreaterOrEqual(t, allAt, time.Duration(0), "the fleet never reached %.0f %% of the limit", 100*fleetReach)
	assert.LessOrEqual(t, allAt, oneAt+fleetLag, "the fleet reached %.0f %% of the limit more than %v after one process", 100*fleetReach, fleetLag)
	assert.GreaterOrEqual(t, all.SteadyFraction, fleetMinSteady, "the fleet's 2xx rate over [%v, end]", all.SteadyFrom)
	// The second minute holds the pace's last probes of its climb (2 a
	// minute in the simulator, for one process as for the fleet): the
	// fleet may have one more than the lone process had meanwhile.
	assert.LessOrEqual(t, all.SteadySignalsPerMin, max(fleetMaxSignals, one.SteadySignalsPerMin+1),
		"the fleet's signals per minute over [%v, end] (one process: %.1f)", all.SteadyFrom, one.SteadySignalsPerMin)
	assert.Zero(t, gated, "requests sent inside a Retry-After gate: %s", strings.Join(first, "; "))
	assert.Zero(t, all.Errors, "the fleet's transport errors: %v", all.FirstErrors)
	assert.Zero(t, one.Errors, "one process's transport errors: %v", one.FirstErrors)
}

// TestInGates checks the gate check on records made up for it: a
// request sent inside another's Retry-After gate counts, one sent within
// gateSlack of its ends does not.
func TestInGates(t *testing.T) {
	s := int64(time.Second)
	run := fleetRun{sent: []record{
		{Start: 0, Answer: s, Status: 429, Retry: 1},       // the gate: (1.1 s, 1.9 s)
		{Start: s + s/20, Answer: s + s/10, Status: 200},   // 1.05 s: in the slack
		{Start: s + s/2, Answer: s + s/2 + 1, Status: 200}, // 1.5 s: inside
		{Start: s + 19*s/20, Answer: 2 * s, Status: 200},   // 1.95 s: in the slack
		{Start: 3 * s, Answer: 3*s + 1, Status: 200},       // after it
	}}
	n, first := run.inGates()
	assert.Equal(t, 1, n, "%v", first)
	require.Len(t, first, 1)
	assert.Contains(t, first[0], "sent at 1.500 s")
}

// TestReachAt: the first time the 2xx answers over the trailing
// BucketWidth reach the share of the limit.
func TestReachAt(t *testing.T) {
	var ss []Sample
	for i := range 100 { // 1 a second, then 5 a second from 20 s on
		at := time.Duration(i) * time.Second
		if i >= 20 {
			at = 20*time.Second + time.Duration(i-20)*200*time.Millisecond
		}
		ss = append(ss, Sample{At: at, Status: 200})
	}
	assert.Equal(t, 28*time.Second+600*time.Millisecond, reachAt(ss, 5, 0.9), "45 answers in (18.6 s, 28.6 s]: one at 19 s, 44 from 20 s")
	assert.Equal(t, time.Duration(-1), reachAt(ss[:20], 5, 0.9))
}

// The starvation test's crawl: as the fleet's, for longer, each request
// bounded by a client timeout.
const (
	starveDuration = 3 * time.Minute
	clientTimeout  = 30 * time.Second
	// starveMaxWait bounds every wait in the throttle (half the client
	// timeout).
	starveMaxWait = clientTimeout / 2
)

// TestFleetNoRequestStarves: four worker processes, 4 goroutines each,
// share one Redis store and crawl one nginx limit_req (5 r/s, burst 5,
// 429 with Retry-After: 1) with rampup on for 3 minutes (or
// THROTTLE_FIELD_DURATION), every request bounded by a 30 s client
// timeout that includes its wait in the throttle. No request may be lost
// to a wait (a WaitError from its own timeout, not the crawl's end), and
// none may wait longer than 15 s: the store serves the fleet's waiters
// first come, first served, so a request waits about as long as the 15
// ahead of it take to start.
func TestFleetNoRequestStarves(t *testing.T) {
	SkipUnlessEnabled(t)
	t.Parallel()
	d := starveDuration
	if v := os.Getenv(durationEnv); v != "" {
		d = crawlDuration(t)
	}
	srv := redistest.Start(t)
	opts := NginxOptions{Rate: 5, Burst: 5, Status: http.StatusTooManyRequests, RetryAfter: 1}
	url := StartNginx(t, opts)
	fleet := runFleet(t, srv.Addr(), url, fleetProcs, d, clientTimeout)

	s := SummarizeUntil(fleet.samples(), opts.Limit(), d)
	t.Logf("%d processes, %d goroutines each, one Redis, client timeout %v:\n%s", fleetProcs, fleetGoroutines, clientTimeout, s)
	var lost []string
	for _, r := range fleet.ends {
		if r.Lost {
			lost = append(lost, fmt.Sprintf("at %.1f s: %s", time.Duration(r.End).Seconds(), r.Err))
		}
	}
	waits := slices.Sorted(slices.Values(fleet.waited))
	require.NotEmpty(t, waits, "no admission recorded")
	q := func(f float64) time.Duration { return waits[min(len(waits)-1, int(f*float64(len(waits))))] }
	t.Logf("waits in the throttle over %d admissions: median %v, p99 %v, p99.9 %v, longest %v",
		len(waits), q(0.5).Round(time.Millisecond), q(0.99).Round(time.Millisecond), q(0.999).Round(time.Millisecond), waits[len(waits)-1].Round(time.Millisecond))
	t.Logf("requests lost to waits: %d", len(lost))
	assert.Empty(t, lost, "requests lost to waits (their own %v timeout ended them in the throttle)", clientTimeout)
	// First come, first served: a request waits for the 15 ahead of it
	// (3 s at the limit), longer only while backoff slows the scope;
	// racing for each start, the unluckiest waited 17-24 s.
	assert.LessOrEqual(t, waits[len(waits)-1], starveMaxWait, "the longest wait in the throttle")
	assert.Zero(t, s.Errors, "transport errors: %v", s.FirstErrors)
}
