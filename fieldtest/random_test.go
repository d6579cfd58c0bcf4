package fieldtest

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle/internal/sim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The random cases: besides the fixed cases, each run of the suite draws
// randomCases limiter shapes of nginx and HAProxy from a seed it prints,
// and crawls each as a fixed case, with robots.txt on for some.
const (
	// seedEnv names the environment variable that replays a draw: the
	// seed TestFieldRandom printed, a decimal uint64.
	seedEnv = "THROTTLE_FIELD_SEED"
	// randomCases is the number of shapes drawn, half of them nginx's.
	randomCases = 4

	// The space drawn from: sim.FieldShapes's.
	randomMinLimit  = sim.FieldMinLimit
	randomMaxLimit  = sim.FieldMaxLimit
	randomMaxBurst  = sim.FieldMaxBurst
	randomMaxRetry  = sim.FieldMaxRetry
	randomMaxPeriod = sim.FieldMaxPeriod

	// The targets of each random case, the grid's (sim.Shape's Targets)
	// over a crawl of the suite's duration: the 2xx rate over the last
	// third of the crawl is at least randomMinShare of the limit; over
	// the trailing window of Summary.Cold (60 s, or half a shorter
	// crawl), it reaches ColdFraction of the limit within that window's
	// length; and there are at most randomMaxSignals refusals (429 and
	// 503) a minute after it. The table at the end says which each case
	// missed. The pace misses them on some shapes yet (the cold start of
	// limiters that count refusals, or that send a Retry-After of
	// seconds, takes 1-4 minutes; see the grid's table in the README), so
	// what fails the test is a case worse than the pace has been on any
	// seed: under sim.FieldFloorShare of the limit over the last third, or
	// more than sim.FieldFloorSignals refusals a minute.
	randomMinShare   = 0.9
	randomMaxSignals = 2.0

	// randomDuration is how long a random case crawls: a minute longer
	// than the fixed cases (as long as the fleet's starvation crawl, so
	// the suite takes no longer), so that the last third is past the
	// cold start of the shapes whose cold start is slow.
	randomDuration = 3 * time.Minute
)

// drawShapes draws n shapes of real limiters from seed: sim.FieldShapes,
// which the simulator also crawls by the hundred in virtual time
// (internal/sim's TestFieldDraws).
func drawShapes(seed uint64, n int) []sim.Shape { return sim.FieldShapes(seed, n) }

// randomSeed returns the seed of seedEnv, or a new one.
func randomSeed(t *testing.T) uint64 {
	v := os.Getenv(seedEnv)
	if v == "" {
		return rand.Uint64()
	}
	seed, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: want a decimal seed, as TestFieldRandom prints it", seedEnv, v)
	}
	return seed
}

// randomResult is the figures of one random case, for the run's table.
type randomResult struct {
	shape  sim.Shape
	s      Summary
	failed bool
}

// missed names the targets r missed (see randomMinShare).
func (r *randomResult) missed() string {
	var m []string
	if r.s.LastThirdFraction < randomMinShare {
		m = append(m, "share")
	}
	if !r.s.ColdReached || r.s.Cold > r.s.SteadyFrom {
		m = append(m, "cold")
	}
	if r.s.SteadySignalsPerMin > randomMaxSignals {
		m = append(m, "signals")
	}
	if len(m) == 0 {
		return "-"
	}
	return strings.Join(m, ",")
}

// TestFieldRandom crawls randomCases shapes drawn by drawShapes from a
// seed it prints (THROTTLE_FIELD_SEED replays a draw), each as a case of
// TestField, in parallel with them, with robots.txt handling on where
// the shape says so (the server answers /robots.txt 404, counted by its
// limiter). It fails a case below the floors (sim.FieldFloorShare) and
// prints a table of every case's figures at the end, with the targets
// each missed (randomMinShare).
func TestFieldRandom(t *testing.T) {
	SkipUnlessEnabled(t)
	t.Parallel() // beside TestField, TestFleetColdStart and TestFidelity
	seed := randomSeed(t)
	shapes := drawShapes(seed, randomCases)
	replay := fmt.Sprintf("%s=%d", seedEnv, seed)
	names := make([]string, len(shapes))
	for i, sh := range shapes {
		names[i] = sh.Name()
	}
	t.Logf("seed %d (replay with %s): %s", seed, replay, strings.Join(names, ", "))
	results := make([]*randomResult, len(shapes))
	t.Cleanup(func() { // after the subtests
		t.Logf("seed %d (replay with %s):\n%s", seed, replay, randomTable(results))
	})
	for i, sh := range shapes {
		t.Run(sh.Name(), func(t *testing.T) {
			t.Parallel()
			url := startShape(t, sh.Limiter)
			cfg := APIConfig()
			cfg.Robots.Enabled = sh.Robots
			d := randomDuration
			if os.Getenv(durationEnv) != "" {
				d = crawlDuration(t)
			}
			s := crawlServerFor(t, sh.Name(), url, sh.Limit(), cfg, d)
			what := fmt.Sprintf("shape %s, seed %d (replay with %s)", sh.Name(), seed, replay)
			assert.GreaterOrEqual(t, s.LastThirdFraction, sim.FieldFloorShare,
				"%s: 2xx rate over the last third as a fraction of the limit", what)
			assert.LessOrEqual(t, s.SteadySignalsPerMin, sim.FieldFloorSignals,
				"%s: refusals per minute over [%.0f s, end]", what, s.SteadyFrom.Seconds())
			assert.Zero(t, s.Errors, "%s: transport errors before the end: %v", what, s.FirstErrors)
			if t.Failed() {
				t.Logf("%s failed:\n%s", what, s)
			}
			results[i] = &randomResult{shape: sh, s: s, failed: t.Failed()}
		})
	}
}

// startShape starts the real server of the limiter l, nginx or HAProxy,
// and returns the URL to crawl.
func startShape(t *testing.T, l sim.Limiter) string {
	t.Helper()
	if l.Kind == sim.KindNginx {
		o, err := NginxFor(l)
		require.NoError(t, err)
		return StartNginx(t, o)
	}
	o, err := HAProxyFor(l)
	require.NoError(t, err)
	return StartHAProxy(t, o)
}

// randomTable returns the figures of the random cases, a line each; a
// case that did not finish has none.
func randomTable(results []*randomResult) string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "shape\tlimit (req/s)\tlast third\tto 90 % (s)\trefusals/min\trequests\ttargets missed\t\t")
	for _, r := range results {
		if r == nil {
			continue
		}
		s := r.s
		cold := "never"
		if s.ColdReached {
			cold = fmt.Sprintf("%.1f", s.Cold.Seconds())
		}
		verdict := "ok"
		if r.failed {
			verdict = "FAILED"
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.0f %%\t%s\t%.2f\t%d\t%s\t%s\t\n", r.shape.Name(), s.Limit,
			100*s.LastThirdFraction, cold, s.SteadySignalsPerMin, s.Requests, r.missed(), verdict)
	}
	_ = tw.Flush()
	return b.String()
}

// TestDrawShapes checks the draw: the same seed gives the same shapes,
// valid for the real servers, half of each kind, within the ranges, and
// the strata of a draw cover both halves of each range.
func TestDrawShapes(t *testing.T) {
	for seed := range uint64(50) {
		shapes := drawShapes(seed, randomCases)
		require.Equal(t, shapes, drawShapes(seed, randomCases), "seed %d", seed)
		kinds := map[sim.LimiterKind]int{}
		var robots, retry, too int
		for _, sh := range shapes {
			l := sh.Limiter
			kinds[l.Kind]++
			if sh.Robots {
				robots++
			}
			if l.RetryAfter > 0 {
				retry++
				assert.LessOrEqual(t, l.RetryAfter, randomMaxRetry*time.Second, "%s", sh.Name())
			}
			if l.Status == http.StatusTooManyRequests {
				too++
			}
			switch l.Kind {
			case sim.KindNginx:
				_, err := NginxFor(l)
				require.NoError(t, err, "%s", sh.Name())
				assert.LessOrEqual(t, l.Burst, randomMaxBurst, "%s", sh.Name())
			case sim.KindHAProxy:
				_, err := HAProxyFor(l)
				require.NoError(t, err, "%s", sh.Name())
				assert.LessOrEqual(t, l.Period, randomMaxPeriod*time.Second, "%s", sh.Name())
			}
			assert.GreaterOrEqual(t, sh.Limit(), randomMinLimit, "%s", sh.Name())
			assert.LessOrEqual(t, sh.Limit(), float64(randomMaxLimit), "%s", sh.Name())
		}
		assert.Equal(t, map[sim.LimiterKind]int{sim.KindNginx: 2, sim.KindHAProxy: 2}, kinds, "seed %d", seed)
		assert.Equal(t, 2, robots, "seed %d: robots.txt on", seed)
		assert.Equal(t, 2, retry, "seed %d: with Retry-After", seed)
		assert.Equal(t, 2, too, "seed %d: 429s", seed)
	}
	// An odd count: one more of one kind.
	kinds := map[sim.LimiterKind]int{}
	for _, sh := range drawShapes(7, 5) {
		kinds[sh.Limiter.Kind]++
	}
	assert.ElementsMatch(t, []int{2, 3}, []int{kinds[sim.KindNginx], kinds[sim.KindHAProxy]})
}

// TestRobotsTxt404: nginx and HAProxy answer /robots.txt 404 behind their
// limiter, so the fetch counts: a page right after it is refused by a
// limiter that allows one request at a time.
func TestRobotsTxt404(t *testing.T) {
	SkipUnlessEnabled(t)
	cases := []struct {
		name   string
		status int
		start  func(t *testing.T) string
	}{
		{"nginx", http.StatusServiceUnavailable, func(t *testing.T) string {
			return StartNginx(t, NginxOptions{Rate: 1})
		}},
		{"haproxy", http.StatusTooManyRequests, func(t *testing.T) string {
			return StartHAProxy(t, HAProxyOptions{Requests: 1, Period: 10 * time.Second})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			page := c.start(t)
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 5 * time.Second}
			for _, want := range []struct {
				path   string
				status int
			}{{robotsPath, http.StatusNotFound}, {pagePath, c.status}} {
				resp, err := client.Get(strings.TrimSuffix(page, pagePath) + want.path)
				require.NoError(t, err)
				resp.Body.Close()
				assert.Equal(t, want.status, resp.StatusCode, "GET %s", want.path)
			}
		})
	}
}
