package sim

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/ratelimit"
)

// TestGridTargets runs the grid (GridShapes(1, 200)) on 4 seeds, prints
// every shape's worst seed against its targets, worst first, and fails
// when a shape misses a target it met in testdata/grid-misses.json: the
// grid can only get better. The file lists the shapes that miss targets
// today (the targets stay the targets: see the README's table of
// the worst shapes); when a change makes shapes meet more targets,
// THROTTLE_GRID_UPDATE=1 rewrites it, and the diff shows what improved.
// It is a long sweep: it runs with THROTTLE_SWEEP=1 (CI sets it).
func TestGridTargets(t *testing.T) {
	sweep(t)
	rows := RunGrid(GridShapes(1, 200), testSeed, 4, 0)
	if err := WriteGrid(os.Stdout, rows); err != nil {
		t.Fatal(err)
	}
	fmt.Println(GridSummary(rows))
	got := map[string][]string{}
	for _, r := range rows {
		if len(r.Misses) > 0 {
			got[r.Shape.Name()] = r.Misses
		}
	}
	base, check := ratchet(t, "testdata/grid-misses.json", got)
	if !check {
		return
	}
	better := 0
	for _, r := range rows {
		name := r.Shape.Name()
		var worse []string
		for _, m := range r.Misses {
			if !slices.Contains(base[name], m) {
				worse = append(worse, m)
			}
		}
		if len(worse) > 0 {
			var tb strings.Builder
			_ = WriteGrid(&tb, []GridRow{r})
			t.Errorf("%s now misses %v, which it met:\n%s", name, worse, tb.String())
		}
		if len(r.Misses) < len(base[name]) {
			better++
		}
	}
	if better > 0 {
		t.Logf("%d shapes meet targets they missed: THROTTLE_GRID_UPDATE=1 records it", better)
	}
}

// ratchet reads file, the record of what a sweep's shapes still miss,
// and reports true: the caller fails a shape worse than its record. With
// THROTTLE_GRID_UPDATE=1 it writes got to file instead, the diff shows
// what improved, and it reports false.
func ratchet[T any](t *testing.T, file string, got map[string]T) (known map[string]T, check bool) {
	t.Helper()
	if os.Getenv("THROTTLE_GRID_UPDATE") == "1" {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d shapes", file, len(got))
		return nil, false
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &known); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return known, true
}

// sweep skips a long sweep unless THROTTLE_SWEEP=1 (CI sets it): the
// default test command stays within minutes.
func sweep(t *testing.T) {
	t.Helper()
	if os.Getenv("THROTTLE_SWEEP") != "1" {
		t.Skip("a long sweep: THROTTLE_SWEEP=1 runs it")
	}
}

// TestGridShape runs the shape THROTTLE_GRID_SHAPE names (of the grid
// THROTTLE_GRID_SEED and THROTTLE_GRID_SHAPES draw) on one seed,
// THROTTLE_SEED (default testSeed), and prints its figures and series:
// with THROTTLE_SIM_DEBUG=1, every adjustment of the pace too.
func TestGridShape(t *testing.T) {
	name := os.Getenv("THROTTLE_GRID_SHAPE")
	if name == "" {
		t.Skip("THROTTLE_GRID_SHAPE names the shape to run")
	}
	n := 200
	if v, err := strconv.Atoi(os.Getenv("THROTTLE_GRID_SHAPES")); err == nil && v > 0 {
		n = v
	}
	gseed := uint64(1)
	if v, err := strconv.ParseUint(os.Getenv("THROTTLE_GRID_SEED"), 10, 64); err == nil {
		gseed = v
	}
	seed := uint64(testSeed)
	if v, err := strconv.ParseUint(os.Getenv("THROTTLE_SEED"), 10, 64); err == nil {
		seed = v
	}
	for _, s := range GridShapes(gseed, n) {
		if s.Name() != name {
			continue
		}
		sc := s.Scenario()
		res := Run(sc, sc.Policies[0], seed)
		if err := WriteGrid(os.Stdout, []GridRow{gridRow(s, res.Metrics)}); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("limit %g req/s; per 10 s: sent/s, 2xx/s, refused/s\n", s.Limit())
		for i, r := range res.Series.Rate {
			fmt.Printf("%4ds %7.2f %7.2f %7.2f\n", i*10, r, res.Series.OK[i], res.Series.Refused[i])
		}
		return
	}
	t.Fatalf("no shape %s", name)
}

// TestGridShapesValid: every shape the grid draws is a valid limiter, the
// draw is the same for a seed, and it covers every model, both robots.txt
// settings, 2 s latency and the ends of the limits' range.
func TestGridShapesValid(t *testing.T) {
	shapes := GridShapes(1, 200)
	kinds := map[LimiterKind]int{}
	var robots, slow, low, high int
	for _, s := range shapes {
		if err := s.Limiter.Validate(); err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		kinds[s.Limiter.Kind]++
		if s.Robots {
			robots++
		}
		if s.Limiter.Latency == 2*time.Second {
			slow++
		}
		if s.Limit() < 0.2 {
			low++
		}
		if s.Limit() > 30 {
			high++
		}
	}
	if len(kinds) != len(gridKinds) || robots < 80 || robots > 120 || slow < 20 || low == 0 || high == 0 {
		t.Fatalf("kinds %v, robots %d, 2 s latency %d, below 0.2 req/s %d, above 30 %d", kinds, robots, slow, low, high)
	}
	again := GridShapes(1, 200)
	for i := range shapes {
		if shapes[i] != again[i] {
			t.Fatalf("shape %d differs for the same seed", i)
		}
	}
}

// TestGridShapesThatBroke runs, on 4 seeds, shapes of the grid that once
// missed targets by far: each must meet every target.
//
//   - nginx in delay mode answering 503 with 2 s of latency: dozens of
//     requests in flight, and four 503s in a row between its 2xx came by
//     chance every few seconds; each such run was taken for an outage
//     whose end restored the rate the 503s had refused, so the pace
//     stayed 50 % above the limit with 320 refusals a minute.
//   - nginx with a burst, a Retry-After of 3 s and X-RateLimit headers
//     whose reset is its bucket's time until full: the reset stood still
//     through a Retry-After's silence, was taken for a window's end, and
//     its limit over the time left (a fifth of the real one) for a
//     ceiling, held for 4 minutes.
//   - nginx in delay mode answering 503 at 5 ms (a field draw, at 0 ms
//     on a busy machine): it answers its queued requests late and its
//     refusals at once, so four refusals came in a row and rampup paused
//     for an outage; a queued success, sent before, ended backoff's
//     outage while rampup stayed paused, and the refusals after stepped
//     backoff to its MinDelay, 1 s, recovered a Window at a time: 16 %
//     of the limit for minutes.
func TestGridShapesThatBroke(t *testing.T) {
	shapes := []Shape{
		{Limiter: Limiter{Kind: KindNginx, Requests: 9, Period: time.Second, Burst: 7, Status: 503, Latency: 5 * time.Millisecond}},
		{Limiter: Limiter{Kind: KindNginx, Requests: 10, Period: time.Second, Burst: 6, Status: 503, Latency: 2 * time.Second}, Robots: true},
		{Limiter: Limiter{Kind: KindNginx, Requests: 3, Period: time.Second, Burst: 10, NoDelay: true, Status: 503, RetryAfter: 3 * time.Second,
			Stated: StateX, Latency: 587 * time.Millisecond}, Robots: true},
	}
	for _, r := range RunGrid(shapes, testSeed, 4, 0) {
		if len(r.Misses) > 0 {
			var b strings.Builder
			_ = WriteGrid(&b, []GridRow{r})
			t.Errorf("%s misses %v:\n%s", r.Shape.Name(), r.Misses, b.String())
		}
	}
}

// TestRobotsChangesNoFigure: turning robots.txt on (the server answers
// 404 and asks no delay) leaves rampup's figures as they are off, over the
// whole grid. The first request of a crawl with robots.txt on is the
// fetch, and that shift alone moves a cold start that hangs on one
// overshoot by a minute either way (14 shapes faster by more than 10 s
// and 14 slower, on grid seed 1), more than drawing other seeds does. So
// the test asks what the issue that found robots.txt freezing rampup (0.25
// of a limit it reached at 0.94 without) asks:
//   - no shape holds less than half its share with robots.txt on;
//   - robots.txt on misses no more targets (but the cold start's, judged
//     by its figure) than off does, give or take what two draws on other
//     seeds change (a quarter more, at least 5);
//   - per figure, the shapes robots.txt makes worse are no more than those
//     it makes better, give or take two standard deviations of a fair
//     coin (a sign test): a cost would show as a lopsided count.
func TestRobotsChangesNoFigure(t *testing.T) {
	sweep(t)
	base := GridShapes(1, 200)
	var shapes []Shape
	for _, s := range base {
		s.Robots = false
		shapes = append(shapes, s)
		s.Robots = true
		shapes = append(shapes, s)
	}
	rows := map[string]GridRow{}
	for _, r := range RunGrid(shapes, testSeed, 4, 0) {
		rows[r.Shape.Name()] = r
	}
	for i := range base {
		base[i].Robots = false
	}
	// Two redraws on other seeds: how far the count moves by chance (one
	// redraw alone came within 6 of the first by chance, and a slack of 7
	// failed a difference that had been within slack for weeks).
	var redraws [2]map[string]GridRow
	for i := range redraws {
		redraws[i] = map[string]GridRow{}
		for _, r := range RunGrid(base, testSeed+4*uint64(i+1), 4, 0) {
			redraws[i][r.Shape.Name()] = r
		}
	}
	// figures are a row's cold start (600 s: never within 10 minutes),
	// share and signals, each signed so that more is worse.
	figures := func(r GridRow) [3]float64 {
		f := [3]float64{600, 0, r.Metrics.SignalsPerMin}
		if c := r.Metrics.ColdStart90; c != nil && *c >= 0 {
			f[0] = min(*c, 600)
		}
		if s := r.Metrics.OKPerCapacity; s != nil {
			f[1] = -*s
		}
		return f
	}
	names := [3]string{"cold start", "share", "signals"}
	tolerance := [3]float64{10, 0.01, 0.25} // a difference below this is none
	var worse, better [3]int
	// steady counts a row's missed targets but the cold start's, which
	// the sign test below judges: a robots.txt fetch spends one of the
	// limiter's requests before the first page, and at limits of a
	// request every few seconds that alone moves the 90 % mark past 60 s
	// (13 shapes of 200 on grid seed 1, as many faster as slower by the
	// figure).
	steady := func(r GridRow) int {
		n := len(r.Misses)
		if slices.Contains(r.Misses, "cold") {
			n--
		}
		return n
	}
	missOff, missOn := 0, 0
	var missRedraw [2]int
	for _, s := range base {
		off, on := rows[s.Name()], rows[s.Name()+"-robots"]
		missOff += steady(off)
		missOn += steady(on)
		for i, rd := range redraws {
			missRedraw[i] += steady(rd[s.Name()])
		}
		f0, f1 := figures(off), figures(on)
		if -f1[1] < -f0[1]/2 {
			t.Errorf("%s: %.1f %% of the limit with robots.txt on, %.1f %% off", s.Name(), -100*f1[1], -100*f0[1])
		}
		for k := range 3 {
			switch d := f1[k] - f0[k]; {
			case d > tolerance[k]:
				worse[k]++
			case d < -tolerance[k]:
				better[k]++
			}
		}
	}
	t.Logf("targets but the cold start's missed: %d with robots.txt off, %d on, %d and %d off on other seeds", missOff, missOn, missRedraw[0], missRedraw[1])
	if slack := max(abs(missRedraw[0]-missOff), abs(missRedraw[1]-missOff), 4) * 5 / 4; missOn > missOff+slack {
		t.Errorf("robots.txt on misses %d targets, off %d: more than other seeds move them (%d)", missOn, missOff, slack)
	}
	for k := range 3 {
		t.Logf("%s: robots.txt on worse on %d shapes, better on %d", names[k], worse[k], better[k])
		if n := float64(worse[k] + better[k]); float64(worse[k]) > float64(better[k])+2*math.Sqrt(n)+2 {
			t.Errorf("%s: robots.txt on is worse on %d shapes and better on %d: a cost, not chance", names[k], worse[k], better[k])
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// TestCountingLimiterAnswering503IsNoOutage: HAProxy counting refused
// requests and answering 503 refuses everything while its counter is
// over the limit, so a run of its 503s looks like an outage; the probe a
// minute later is accepted, and at the rate before, the counter fills
// again within seconds. Taken for an outage each time, the pace held
// 13.5 % of the limit (a random field case found it at 15 %); a run soon
// after an outage ended at a probe is a rate limit's.
func TestCountingLimiterAnswering503IsNoOutage(t *testing.T) {
	s := Shape{Limiter: Limiter{Kind: KindHAProxy, Requests: 42, Period: 9 * time.Second, Status: 503, Latency: time.Millisecond}}
	r := RunGrid([]Shape{s}, testSeed, 4, 0)[0]
	if share := *r.Metrics.OKPerCapacity; share < 0.95 {
		var b strings.Builder
		_ = WriteGrid(&b, []GridRow{r})
		t.Errorf("%s: %.1f %% of the limit over minutes 5-15, want >= 95 %%:\n%s", s.Name(), 100*share, b.String())
	}
}

// TestGridWorst: the worst figures are each the worst row's, with its
// shape; a cold start that never came counts ten times its target.
func TestGridWorst(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	shapes := GridShapes(1, 3)
	rows := []GridRow{
		{Shape: shapes[0], Targets: GridTargets{Cold90: 60}, Metrics: Metrics{ColdStart90: f(30), OKPerCapacity: f(0.99), SignalsPerMin: 0.5}},
		{Shape: shapes[1], Targets: GridTargets{Cold90: 60}, Metrics: Metrics{ColdStart90: f(-1), OKPerCapacity: f(0.80), SignalsPerMin: 0.1}},
		{Shape: shapes[2], Targets: GridTargets{Cold90: 90}, Metrics: Metrics{ColdStart90: f(135), OKPerCapacity: f(0.97), SignalsPerMin: 3}},
	}
	got := GridWorst(rows)
	// (30/60 x 600/60 x 135/90)^(1/3) = 7.5^(1/3) = 1.957; the one that never came is over twice
	want := fmt.Sprintf("worst: to 90 %% 600 s (%s), share 80.0 %% (%s), 3.00 refusals/min (%s); cold start over its target: geometric mean 1.957, 1 over twice",
		shapes[1].Name(), shapes[1].Name(), shapes[2].Name())
	if got != want {
		t.Errorf("GridWorst:\n got %s\nwant %s", got, want)
	}
	if got := GridWorst(nil); got != "no shapes" {
		t.Errorf("GridWorst(nil) = %q", got)
	}
}

// TestToldServer: every refusal of the wrapped limiter, and no success,
// states the limit in a RateLimit-Policy that parses to it within a part
// in a thousand.
func TestToldServer(t *testing.T) {
	for _, limit := range []float64{0.1, 1.3, 7, 49.5} {
		l := Limiter{Kind: KindNginx, Requests: 1, Period: time.Second, Latency: time.Millisecond}
		srv := newToldServer(l.NewServer(), limit)
		now := Epoch
		var ok, refused int
		for range 20 {
			r := srv.Handle(now, apiHost)
			v := r.Header.Get("RateLimit-Policy")
			if r.Status/100 == 2 {
				ok++
				if v != "" {
					t.Fatalf("limit %g: a success states %q", limit, v)
				}
				continue
			}
			refused++
			items, good := ratelimit.ParseRateLimitPolicy(v)
			if !good || len(items) != 1 {
				t.Fatalf("limit %g: refusal states %q", limit, v)
			}
			got := float64(items[0].Quota) / items[0].Window.Seconds()
			if math.Abs(got-limit) > limit*1e-3 {
				t.Fatalf("limit %g: stated %g (%q)", limit, got, v)
			}
			now = now.Add(100 * time.Millisecond)
		}
		if ok == 0 || refused == 0 {
			t.Fatalf("limit %g: %d successes, %d refusals: want both", limit, ok, refused)
		}
	}
}

// TestAddTold: AddTold runs the shapes that miss their cold start only,
// and told the limit at its first refusal the throttle holds it: an
// HAProxy whose cold start the search makes late (its Retry-After of 5 s
// and its count of refusals) meets the target told; the told run of an
// nginx without burst delivers 0.97 of the limit or more over minutes
// 5-15 with no refusal after its first minute.
func TestAddTold(t *testing.T) {
	shapes := []Shape{
		{Limiter: Limiter{Kind: KindNginx, Requests: 10, Period: time.Second, NoDelay: true, Status: 429, Latency: 20 * time.Millisecond}},
		{Limiter: Limiter{Kind: KindHAProxy, Requests: 42, Period: 6 * time.Second, Status: 429, RetryAfter: 5 * time.Second, Latency: 19 * time.Millisecond}},
	}
	rows := RunGrid(shapes, testSeed, 1, 0)
	AddTold(rows, testSeed, 1, 0)
	told := 0
	for _, r := range rows {
		if slices.Contains(r.Misses, "cold") != (r.Told != nil) {
			t.Errorf("%s: misses %v, told %v: want a told figure exactly when it misses its cold start", r.Shape.Name(), r.Misses, r.Told)
		}
		if r.Shape.Limiter.Kind == KindHAProxy {
			if r.Told == nil || *r.Told < 0 || *r.Told > r.Targets.Cold90 {
				t.Errorf("%s: to 90 %% %s, told %s: want a miss the told run meets", r.Shape.Name(), secs(r.Metrics.ColdStart90), secs(r.Told))
			}
			told++
		}
	}
	if told != 1 {
		t.Fatalf("%d HAProxy rows", told)
	}
	res := Run(shapes[0].ToldScenario(), shapes[0].ToldScenario().Policies[0], testSeed)
	m := res.Metrics
	if m.OKPerCapacity == nil || *m.OKPerCapacity < 0.97 || m.SignalsPerMin > 0 {
		t.Errorf("told run of %s: share %v, %.2f refusals a minute: want >= 0.97 and none", shapes[0].Name(), pct(m.OKPerCapacity), m.SignalsPerMin)
	}
	var out strings.Builder
	if err := WriteGrid(&out, rows); err != nil {
		t.Fatal(err)
	}
	if told := slices.ContainsFunc(rows, func(r GridRow) bool { return r.Told != nil }); told != strings.Contains(out.String(), "told (s)") {
		t.Errorf("a told figure and the table's told column disagree:\n%s", out.String())
	}
	if s := GridToldSummary(rows); !strings.Contains(s, "told the limit at the first refusal") {
		t.Errorf("summary %q", s)
	}
}
