package sim

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crawlerkit/throttle"
)

// The grid judges the throttle's pace on many limiter shapes at once,
// drawn from the whole space of limiters a crawler meets rather than
// listed by hand: every model, limits from 0.1 to 50 req/s, bursts 0-10,
// Retry-After none or 1-5 s, counting periods and windows of 1-60 s,
// latencies from 1 ms to 1 s and 2 s, robots.txt on and off. Each shape
// is one run of 24 virtual minutes per seed: a cold start, the steady
// state, a 6-minute outage of 503s and the recovery after it, crawled
// with the README's recipe for an API whose limit you don't know
// (DefaultConfig with Rampup on).

// Shape is one point of the grid: a limiter and how the crawl meets it.
type Shape struct {
	// Limiter is the server's limiter, with its latency.
	Limiter Limiter
	// Robots turns the throttle's robots.txt handling on; the server
	// answers robots.txt 404 when its limiter accepts the fetch.
	Robots bool
}

// The grid's timeline, from the first request: minutes 0-15 crawl the
// limiter (the cold start in the first one or two, the steady state
// measured over 5-15), minutes 15-21 are an outage in which every
// request is answered 503 (the limiter sees none of them), and minutes
// 21-24 the recovery.
const (
	gridSteadyFrom = 5 * time.Minute
	gridOutageFrom = 15 * time.Minute
	gridOutageTo   = 21 * time.Minute
	gridDuration   = 24 * time.Minute
	gridSignalFrom = time.Minute
)

// Name is the shape's name: the limiter's (Limiter.String), with
// "-robots" when robots.txt is on.
func (s Shape) Name() string {
	if s.Robots {
		return s.Limiter.String() + "-robots"
	}
	return s.Limiter.String()
}

// Limit is the rate the limiter admits at most in the long run, in
// req/s: its Requests per Period, but for httprate, which refuses once
// its weighted count rounds to the quota and so admits Requests - 0.5 a
// window at a steady rate.
func (s Shape) Limit() float64 {
	l := s.Limiter
	if l.Kind == KindHTTPRate {
		return (float64(l.Requests) - 0.5) / l.Period.Seconds()
	}
	return l.Rate()
}

// outageServer answers every request 503 in [from, to) without asking
// its limiter, and asks the limiter otherwise.
type outageServer struct {
	Server
	from, to time.Time
	latency  time.Duration
}

func (s *outageServer) Handle(now time.Time, host string) Response {
	if !now.Before(s.from) && now.Before(s.to) {
		return Response{Status: 503, Latency: s.latency}
	}
	return s.Server.Handle(now, host)
}

// toldServer adds to every answer of Server that is not 2xx a
// RateLimit-Policy stating limit, in requests an hour (a long window, so
// that the stated rate is the limit to a part in a thousand or better).
type toldServer struct {
	Server
	policy string
}

func newToldServer(srv Server, limit float64) *toldServer {
	const window = 3600
	return &toldServer{Server: srv, policy: fmt.Sprintf(`"told";q=%d;w=%d`, max(1, int(math.Floor(limit*window))), window)}
}

// Handle implements Server.
func (s *toldServer) Handle(now time.Time, host string) Response {
	r := s.Server.Handle(now, host)
	if r.Status/100 == 2 {
		return r
	}
	h := r.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("RateLimit-Policy", s.policy)
	r.Header = h
	return r
}

// GridConfig is the throttle configuration the grid judges: the README's
// recipe for an API whose limit you don't know, DefaultConfig with
// Rampup on (ColdRampupConfig), with GlobalConcurrency and
// Rampup.MaxConcurrency raised where 16 slots cannot carry the limit at
// the shape's latency.
func (s Shape) GridConfig() throttle.Config {
	cfg := ColdRampupConfig()
	if need := s.Limit() * s.Limiter.Latency.Seconds(); need > float64(cfg.GlobalConcurrency) {
		n := s.workers()
		cfg.GlobalConcurrency = n
		cfg.Default.Rampup.MaxConcurrency = n
	}
	return cfg
}

// workers is twice what the limit needs in flight, at least 16.
func (s Shape) workers() int {
	return max(16, int(math.Ceil(2*s.Limit()*s.Limiter.Latency.Seconds())))
}

// Scenario returns the shape's scenario: one API host, the limiter with
// the outage, the grid's policy.
func (s Shape) Scenario() Scenario { return s.scenario(false) }

// ToldScenario is Scenario with every refusal of the limiter stating its
// limit exactly, in a RateLimit-Policy (toldServer): the same crawl by a
// throttle that knows the limit from its first refusal on. What its cold
// start still misses is not the pace's search but what comes before it
// and what the first refusal costs: the configured pace and the slow
// start's ramp, the excess in flight when the first refusal comes, the
// server's Retry-After and a counter's dead time.
func (s Shape) ToldScenario() Scenario { return s.scenario(true) }

func (s Shape) scenario(told bool) Scenario {
	cfg := s.GridConfig()
	pol := ThrottlePolicy("throttle", "DefaultConfig with Rampup on", cfg)
	pol.Robots = s.Robots
	name := s.Name()
	if told {
		name += "-told"
	}
	return Scenario{
		Name:     name,
		About:    fmt.Sprintf("grid shape %s", name),
		Duration: gridDuration, Clients: 1, Workers: s.workers(),
		Frontier: oneHost(apiHost),
		NewServer: func(start time.Time, _ *rand.Rand) Server {
			srv := s.Limiter.NewServer()
			if told {
				srv = newToldServer(srv, s.Limit())
			}
			return &outageServer{Server: srv, from: start.Add(gridOutageFrom), to: start.Add(gridOutageTo), latency: s.Limiter.Latency}
		},
		Limit: s.Limit(), Capacity: s.Limit(),
		MeasureFrom: gridSteadyFrom, MeasureTo: gridOutageFrom, SignalsFrom: gridSignalFrom,
		StormFrom: gridOutageFrom, StormTo: gridOutageTo,
		RetryAfter: s.Limiter.RetryAfter > 0 || s.Limiter.RetryAfterWait || s.Limiter.Kind == KindHTTPRate,
		Policies:   []PolicySpec{pol},
	}
}

// gridKinds are the models the grid draws from, in turn.
var gridKinds = []LimiterKind{KindNginx, KindHAProxy, KindGCRA, KindBucket, KindFixed, KindSliding, KindHTTPRate}

// GridShapes draws n shapes from the space of limiters with seed, by
// Latin hypercube: the models in turn, and each parameter's range cut
// into n strata, each stratum used once, so that a few hundred shapes
// cover every range evenly: limits of 0.1-50 req/s, bursts 0-10,
// Retry-After none, 1-5 s or the limiter's own wait, counting periods of
// 1-10 s and windows of 1-60 s, nginx in nodelay and delay modes
// answering 429 or 503, servers that state their limit in RateLimit or
// X-RateLimit headers, latencies of 1 ms-1 s and 2 s, robots.txt on and
// off. The same seed gives the same shapes.
func GridShapes(seed uint64, n int) []Shape {
	rng := rand.New(rand.NewPCG(seed, 0x67726964))
	strata := func() []float64 { // n points of [0, 1), one per stratum, shuffled
		p := rng.Perm(n)
		u := make([]float64, n)
		for i := range u {
			u[i] = (float64(p[i]) + rng.Float64()) / float64(n)
		}
		return u
	}
	limit, lat, burst, period, ra, mode, robots, stated := strata(), strata(), strata(), strata(), strata(), strata(), strata(), strata()
	kinds := rng.Perm(n)
	shapes := make([]Shape, n)
	for i := range shapes {
		l := Limiter{Kind: gridKinds[kinds[i]%len(gridKinds)]}
		rate := logScale(0.1, 50, limit[i])
		if lat[i] < 1.0/8 {
			l.Latency = 2 * time.Second
		} else {
			l.Latency = time.Duration(logScale(1e-3, 1, (lat[i]-1.0/8)*8/7) * float64(time.Second)).Round(time.Millisecond)
		}
		perSecondOrMinute := func() {
			l.Period = time.Second
			if rate < 2 {
				l.Period = time.Minute
			}
			l.Requests = max(1, int(math.Round(rate*l.Period.Seconds())))
		}
		window := func(lo, hi float64) {
			l.Period = time.Duration(logScale(lo, hi, period[i]) * float64(time.Second)).Round(time.Second)
			l.Requests = max(1, int(math.Round(rate*l.Period.Seconds())))
		}
		constRA := func() {
			if ra[i] >= 0.5 {
				l.RetryAfter = time.Duration(1+int((ra[i]-0.5)*10)) * time.Second
			}
		}
		waitRA := func() { l.RetryAfterWait = ra[i] >= 0.5 }
		switch l.Kind {
		case KindNginx:
			perSecondOrMinute()
			l.Burst = min(10, int(burst[i]*11))
			l.NoDelay = mode[i] >= 0.25
			if mode[i] >= 0.625 {
				l.Status = http.StatusTooManyRequests
			}
			constRA()
		case KindHAProxy:
			l.Period = time.Duration(1+int(period[i]*10)) * time.Second
			l.Requests = max(1, int(math.Round(rate*l.Period.Seconds())))
			constRA()
		case KindGCRA:
			perSecondOrMinute()
			l.Burst = 1 + min(9, int(burst[i]*10))
			waitRA()
		case KindBucket:
			l.Period = 100 * time.Second
			l.Requests = max(1, int(math.Round(rate*l.Period.Seconds())))
			l.Burst = min(10, int(burst[i]*11))
			waitRA()
		case KindFixed, KindSliding:
			window(1, 60)
			waitRA()
		case KindHTTPRate:
			l.Period = time.Duration(1+int(period[i]*10)) * time.Second
			l.Requests = max(1, int(math.Round(rate*l.Period.Seconds())))
		}
		if l.Kind != KindHTTPRate && stated[i] < 0.25 {
			l.Stated = StateIETF
			if stated[i] < 0.125 {
				l.Stated = StateX
			}
		}
		shapes[i] = Shape{Limiter: l, Robots: robots[i] < 0.5}
	}
	return shapes
}

// logScale maps u in [0, 1) to [lo, hi) evenly on a log scale.
func logScale(lo, hi, u float64) float64 { return lo * math.Pow(hi/lo, u) }

// GridTargets are what every shape must reach on its worst seed.
type GridTargets struct {
	// Cold90 is the most seconds from the first request to 90 % of the
	// limit over a trailing minute.
	Cold90 float64
	// Share is the least 2xx rate over minutes 5-15, over the limit.
	Share float64
	// Signals is the most refusals a minute after the first minute.
	Signals float64
	// OutageKnown is the most requests sent in the outage after its
	// first answer came back; Recover the most seconds from its end to a
	// minute at 90 % of the rate before it.
	OutageKnown int
	Recover     float64
}

// Targets returns the targets of the shape: 90 % of the limit within
// 60 s (90 s at a latency of 2 s), >= 0.95 of it over minutes 5-15, <= 2
// refusals a minute, <= 10 requests into the outage and back within
// 120 s.
func (s Shape) Targets() GridTargets {
	t := GridTargets{Cold90: 60, Share: 0.95, Signals: 2, OutageKnown: 10, Recover: 120}
	if s.Limiter.Latency >= 2*time.Second {
		t.Cold90 = 90
	}
	return t
}

// GridRow is one shape's figures, each the worst of its seeds.
type GridRow struct {
	Shape   Shape
	Metrics Metrics
	Targets GridTargets
	// Badness sums the figures over their targets where they miss them,
	// each counted 10 at most (a figure that never came: 10); 0 meets
	// every target. Rows rank by the targets they miss, then by it.
	Badness float64
	// Misses names the targets missed.
	Misses []string
	// Told is the cold start (ColdStart90, the worst of the seeds) of
	// the shape's ToldScenario, when AddTold ran it: nil otherwise, -1
	// if it never came.
	Told *float64
}

// RunGrid runs every shape on seeds seed..seed+n-1 and returns a row per
// shape, the worst first: the most targets missed, then the largest
// Badness.
func RunGrid(shapes []Shape, seed uint64, n, parallel int) []GridRow {
	scs := make([]Scenario, len(shapes))
	for i, s := range shapes {
		scs[i] = s.Scenario()
	}
	res := RunSeeds(scs, seed, n, parallel)
	rows := make([]GridRow, len(shapes))
	for i, s := range shapes {
		rows[i] = gridRow(s, res[i].Results[0].Metrics)
	}
	slices.SortStableFunc(rows, func(a, b GridRow) int {
		if c := cmp.Compare(len(b.Misses), len(a.Misses)); c != 0 {
			return c
		}
		return cmp.Compare(b.Badness, a.Badness)
	})
	return rows
}

// AddTold runs the ToldScenario of every row that misses its cold start
// target, on seeds seed..seed+n-1, and sets its Told.
func AddTold(rows []GridRow, seed uint64, n, parallel int) {
	var at []int
	var scs []Scenario
	for i, r := range rows {
		if slices.Contains(r.Misses, "cold") {
			at = append(at, i)
			scs = append(scs, r.Shape.ToldScenario())
		}
	}
	res := RunSeeds(scs, seed, n, parallel)
	for k, i := range at {
		c := -1.0
		if v := res[k].Results[0].Metrics.ColdStart90; v != nil {
			c = *v
		}
		rows[i].Told = &c
	}
}

// GridToldSummary says, of the rows AddTold ran, how many would meet
// their cold start target if told the limit at the first refusal (the
// search's share of the misses), how many of those by less than
// toldSlack, and how many miss it even then.
func GridToldSummary(rows []GridRow) string {
	var ran, met, close int
	for _, r := range rows {
		if r.Told == nil {
			continue
		}
		ran++
		if *r.Told >= 0 && *r.Told <= r.Targets.Cold90+1e-9 {
			met++
			if *r.Told > r.Targets.Cold90-toldSlack.Seconds() {
				close++
			}
		}
	}
	return fmt.Sprintf("told the limit at the first refusal, %d of the %d cold starts that miss their target would meet it (%d by less than %v); %d miss it even then",
		met, ran, close, toldSlack, ran-met)
}

// toldSlack: a told cold start this close under its target leaves the
// search almost nothing: 5 s of a minute at the limit is about what one
// failed climb costs on most shapes (its drain, its Retry-After).
const toldSlack = 5 * time.Second

func gridRow(s Shape, m Metrics) GridRow {
	t := s.Targets()
	r := GridRow{Shape: s, Metrics: m, Targets: t}
	check := func(name string, ratio float64) {
		if math.IsNaN(ratio) {
			ratio = math.Inf(1)
		}
		if ratio > 1+1e-9 {
			r.Misses = append(r.Misses, name)
			r.Badness += min(ratio, 10)
		}
	}
	cold := math.Inf(1)
	if m.ColdStart90 != nil && *m.ColdStart90 >= 0 {
		cold = *m.ColdStart90
	}
	check("cold", cold/t.Cold90)
	share := 0.0
	if m.OKPerCapacity != nil {
		share = *m.OKPerCapacity
	}
	check("share", t.Share/max(share, 1e-9))
	check("signals", m.SignalsPerMin/t.Signals)
	if m.StormKnown != nil {
		check("outage", float64(*m.StormKnown)/float64(t.OutageKnown))
	}
	rec := math.Inf(1)
	if m.RecoverSeconds != nil && *m.RecoverSeconds >= 0 {
		rec = *m.RecoverSeconds
	}
	check("recover", rec/t.Recover)
	return r
}

// WriteGrid prints the rows as a table, in their order (RunGrid's: worst
// first). With AddTold's figures, a column "told" gives them, before the
// misses.
func WriteGrid(w io.Writer, rows []GridRow) error {
	told := hasTold(rows)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(gridColumns(told, false), "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(gridCells(r, told), "\t")+"\t")
	}
	return tw.Flush()
}

// WriteGridMarkdown prints the rows as a Markdown table, in their order;
// with AddTold's figures, as WriteGrid, a column "told".
func WriteGridMarkdown(w io.Writer, rows []GridRow) error {
	told := hasTold(rows)
	cols := gridColumns(told, true)
	align := slices.Repeat([]string{"--:"}, len(cols))
	align[0], align[len(align)-1] = "---", "---"
	fmt.Fprintln(w, "| "+strings.Join(cols, " | ")+" |")
	fmt.Fprintln(w, "|"+strings.Join(align, "|")+"|")
	for _, r := range rows {
		c := gridCells(r, told)
		c[0] = "`" + c[0] + "`"
		if _, err := fmt.Fprintln(w, "| "+strings.Join(c, " | ")+" |"); err != nil {
			return err
		}
	}
	return nil
}

func hasTold(rows []GridRow) bool {
	return slices.ContainsFunc(rows, func(r GridRow) bool { return r.Told != nil })
}

// gridColumns are the tables' column names, the Markdown table's or the
// plain one's, with "told" before the misses when told.
func gridColumns(told, markdown bool) []string {
	cols := []string{"shape", "to 90% (s)", "share 5-15", "refusals/min", "into outage", "recovery (s)", "misses"}
	if markdown {
		cols[1], cols[2] = "to 90 % (s)", "share, min 5-15"
	}
	if told {
		cols = slices.Insert(cols, len(cols)-1, "told (s)")
	}
	return cols
}

// gridCells are a row's cells as the tables print them, in gridColumns'
// order.
func gridCells(r GridRow, told bool) []string {
	m := r.Metrics
	miss := strings.Join(r.Misses, ",")
	if miss == "" {
		miss = "-"
	}
	c := []string{r.Shape.Name(), secs(m.ColdStart90), pct(m.OKPerCapacity), fmt.Sprintf("%.2f", m.SignalsPerMin),
		fmtIntPtr(m.StormKnown), secs(m.RecoverSeconds), miss}
	if told {
		c = slices.Insert(c, len(c)-1, secs(r.Told))
	}
	return c
}

// GridSummary says how many of the rows miss a target, and how many miss
// each.
func GridSummary(rows []GridRow) string {
	failed := 0
	per := map[string]int{}
	for _, r := range rows {
		if len(r.Misses) > 0 {
			failed++
		}
		for _, m := range r.Misses {
			per[m]++
		}
	}
	var parts []string
	for _, t := range gridTargetNames {
		parts = append(parts, fmt.Sprintf("%s %d", t, per[t]))
	}
	return fmt.Sprintf("%d shapes, %d miss a target (%s)", len(rows), failed, strings.Join(parts, ", "))
}

// GridWorst names the rows' worst figures, each with its shape: the
// latest cold start, the lowest share, the most refusals a minute; and
// the cold starts over their targets, as a geometric mean and as the
// count at more than twice the target (a cold start that never came
// counts ten times its target). Counts of misses jump by a few shapes
// with any change, either way; these move with it.
func GridWorst(rows []GridRow) string {
	if len(rows) == 0 {
		return "no shapes"
	}
	var (
		cold, share, sig    = -1.0, math.Inf(1), -1.0
		coldAt, shAt, sigAt string
		logSum              float64
		over2               int
	)
	for _, r := range rows {
		m, name := r.Metrics, r.Shape.Name()
		c := 10 * r.Targets.Cold90 // never: ten times the target
		if m.ColdStart90 != nil && *m.ColdStart90 >= 0 {
			c = *m.ColdStart90
		}
		if c > cold {
			cold, coldAt = c, name
		}
		ratio := max(c, 1) / r.Targets.Cold90
		logSum += math.Log(ratio)
		if ratio > 2 {
			over2++
		}
		if v := m.OKPerCapacity; v != nil && *v < share {
			share, shAt = *v, name
		}
		if m.SignalsPerMin > sig {
			sig, sigAt = m.SignalsPerMin, name
		}
	}
	return fmt.Sprintf("worst: to 90 %% %.0f s (%s), share %.1f %% (%s), %.2f refusals/min (%s); cold start over its target: geometric mean %.3f, %d over twice",
		cold, coldAt, 100*share, shAt, sig, sigAt, math.Exp(logSum/float64(len(rows))), over2)
}

// gridTargetNames are the targets as GridRow.Misses names them.
var gridTargetNames = []string{"cold", "share", "signals", "outage", "recover"}

func secs(v *float64) string {
	if v == nil {
		return "-"
	}
	if *v < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f", *v)
}

func pct(v *float64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**v)
}

func fmtIntPtr(v *int) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}
