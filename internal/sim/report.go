package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
)

// ScenarioResult is a scenario and the results of its policies, in the
// scenario's policy order.
type ScenarioResult struct {
	Scenario Scenario
	// Results are the rows: with one seed, each policy's Result; with
	// several, each policy's results aggregated by Aggregate.
	Results []Result
	// PerSeed are, for each policy, its result with each seed, in seed
	// order.
	PerSeed [][]Result
}

// RunAll runs every policy of every scenario with seed, up to parallel
// runs at once (0 means GOMAXPROCS). Each run is deterministic on its own,
// so the results do not depend on parallel.
func RunAll(scs []Scenario, seed uint64, parallel int) []ScenarioResult {
	return RunSeeds(scs, seed, 1, parallel)
}

// RunSeeds runs every policy of every scenario with the n seeds seed,
// seed+1 ... seed+n-1, up to parallel runs at once (0 means GOMAXPROCS),
// and aggregates each policy's runs with Aggregate: the worst seed for
// each figure. Runs share nothing and each is deterministic, so the
// results depend neither on parallel nor on the order runs finish in.
func RunSeeds(scs []Scenario, seed uint64, n, parallel int) []ScenarioResult {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	n = max(n, 1)
	out := make([]ScenarioResult, len(scs))
	for i, sc := range scs {
		out[i] = ScenarioResult{Scenario: sc, Results: make([]Result, len(sc.Policies)), PerSeed: make([][]Result, len(sc.Policies))}
		for j := range sc.Policies {
			out[i].PerSeed[j] = make([]Result, n)
		}
	}
	type job struct{ i, j, k int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for jb := range jobs {
				out[jb.i].PerSeed[jb.j][jb.k] = Run(scs[jb.i], scs[jb.i].Policies[jb.j], seed+uint64(jb.k))
			}
		})
	}
	for i, sc := range scs {
		for j := range sc.Policies {
			for k := range n {
				jobs <- job{i, j, k}
			}
		}
	}
	close(jobs)
	wg.Wait()
	for i := range out {
		for j, rs := range out[i].PerSeed {
			out[i].Results[j] = Aggregate(rs)
		}
	}
	return out
}

// Aggregate merges the results of one (scenario, policy) pair with
// several seeds, given in seed order, into one row that reports the worst
// seed for each figure on its own (so two figures of the row may come
// from different seeds): the lowest OKRate, OKPerCapacity and
// First5Share; the highest SignalsPerMin, ColdStart90, StormRequests,
// StormQuietAfter, RecoverSeconds, InGate and InGateRaw, where -1 (never)
// is the worst of all. OKPerCapacityMean is the mean of OKPerCapacity;
// Requests, SentRate and MeanInFlight, which have no worse direction, are
// means too. Seed is the first seed's, Seeds how many there are; Series
// and About are the first seed's. One result is returned as it is.
func Aggregate(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0]
	}
	if len(rs) == 0 {
		return Result{}
	}
	out := rs[0]
	m := &out.Metrics
	n := float64(len(rs))
	m.Seeds = len(rs)
	var req, sent, inflight, okcap float64
	for _, r := range rs {
		x := r.Metrics
		req += float64(x.Requests)
		sent += x.SentRate
		inflight += x.MeanInFlight
		m.OKRate = min(m.OKRate, x.OKRate)
		m.SignalsPerMin = max(m.SignalsPerMin, x.SignalsPerMin)
		if x.OKPerCapacity != nil {
			okcap += *x.OKPerCapacity
		}
		m.OKPerCapacity = worse(m.OKPerCapacity, x.OKPerCapacity, false, false)
		m.First5Share = worse(m.First5Share, x.First5Share, false, false)
		m.ColdStart90 = worse(m.ColdStart90, x.ColdStart90, true, true)
		m.RecoverSeconds = worse(m.RecoverSeconds, x.RecoverSeconds, true, true)
		m.StormQuietAfter = worse(m.StormQuietAfter, x.StormQuietAfter, true, true)
		m.StormRequests = worse(m.StormRequests, x.StormRequests, true, false)
		m.StormKnown = worse(m.StormKnown, x.StormKnown, true, false)
		m.InGate = worse(m.InGate, x.InGate, true, false)
		m.InGateRaw = worse(m.InGateRaw, x.InGateRaw, true, false)
	}
	m.Requests = int(math.Round(req / n))
	m.SentRate, m.MeanInFlight = sent/n, inflight/n
	if m.OKPerCapacity != nil {
		m.OKPerCapacityMean = ptr(okcap / n)
	}
	return out
}

// worse returns the worse of two figures, a new pointer; nil where either
// is nil. The higher is worse when high is set, the lower otherwise; with
// never, a negative figure (never) is worse than any other.
func worse[T int | float64](a, b *T, high, never bool) *T {
	if a == nil || b == nil {
		return nil
	}
	x, y := *a, *b
	switch {
	case never && (x < 0 || y < 0):
		return ptr(min(x, y))
	case high:
		return ptr(max(x, y))
	default:
		return ptr(min(x, y))
	}
}

// Table columns: see Metrics. "2xx/cap mean" follows "2xx/cap" in a
// table of several seeds.
func tableHeader(mean bool) []string {
	h := []string{"scenario", "policy", "req/s", "2xx/s", "2xx/cap"}
	if mean {
		h = append(h, "2xx/cap mean")
	}
	return append(h, "sig/min", "inflight", "cold90 s", "first5", "storm req (known)", "storm quiet", "recover s", "in gate (raw)")
}

// WriteTable writes one row per (scenario, policy) as an aligned text
// table; "-" marks a figure that does not apply. When the rows aggregate
// several seeds, a line above the column names says so and which way each
// figure is the worst, and a column "2xx/cap mean" follows "2xx/cap".
func WriteTable(w io.Writer, res []ScenarioResult) error {
	seeds, first := 1, uint64(0)
	for _, sr := range res {
		for _, r := range sr.Results {
			if r.Metrics.Seeds > seeds {
				seeds, first = r.Metrics.Seeds, r.Metrics.Seed
			}
		}
	}
	if seeds > 1 {
		if _, err := fmt.Fprintf(w, "worst of %d seeds (%d-%d) per column: lowest 2xx/s, 2xx/cap, first5; highest sig/min, cold90 s, storm and gate figures (never is the worst); req/s, inflight and 2xx/cap mean are means over the seeds\n",
			seeds, first, first+uint64(seeds)-1); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	row := func(cells []string) {
		for i, c := range cells {
			if i > 0 {
				fmt.Fprint(tw, "\t")
			}
			fmt.Fprint(tw, c)
		}
		fmt.Fprint(tw, "\t\n")
	}
	rows := [][]string{tableHeader(seeds > 1)}
	for _, sr := range res {
		for _, r := range sr.Results {
			rows = append(rows, cells(r.Metrics, seeds > 1))
		}
	}
	// Names read best left-aligned: pad them to their column's width, so
	// AlignRight, which suits the figures, leaves them in place.
	for col := range 2 {
		w := 0
		for _, r := range rows {
			w = max(w, len(r[col]))
		}
		for _, r := range rows {
			r[col] += strings.Repeat(" ", w-len(r[col]))
		}
	}
	for _, r := range rows {
		row(r)
	}
	return tw.Flush()
}

// cells returns the cells of m's row, with the mean 2xx/cap if mean.
func cells(m Metrics, mean bool) []string {
	f := func(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }
	pf := func(v *float64, prec int) string {
		if v == nil {
			return "-"
		}
		if *v < 0 {
			return "never"
		}
		return f(*v, prec)
	}
	pi := func(v *int) string {
		if v == nil {
			return "-"
		}
		if *v < 0 {
			return "never"
		}
		return strconv.Itoa(*v)
	}
	pct := func(v *float64) string {
		if v == nil {
			return "-"
		}
		return f(100**v, 1) + "%"
	}
	gate := "-"
	if m.InGate != nil {
		gate = fmt.Sprintf("%d (%d)", *m.InGate, *m.InGateRaw)
	}
	c := []string{m.Scenario, m.Policy, f(m.SentRate, 2), f(m.OKRate, 2), pct(m.OKPerCapacity)}
	if mean {
		c = append(c, pct(m.OKPerCapacityMean))
	}
	return append(c, f(m.SignalsPerMin, 2), f(m.MeanInFlight, 2), pf(m.ColdStart90, 1), pct(m.First5Share),
		storm(&m), pi(m.StormQuietAfter), pf(m.RecoverSeconds, 0), gate)
}

// storm is the storm's requests for the table: "24 (10)", all of them and,
// in brackets, those sent after the first storm answer arrived.
func storm(m *Metrics) string {
	if m.StormRequests == nil {
		return "-"
	}
	if m.StormKnown == nil {
		return strconv.Itoa(*m.StormRequests)
	}
	return fmt.Sprintf("%d (%d)", *m.StormRequests, *m.StormKnown)
}

// WriteJSON writes the rows of WriteTable as a JSON array of Metrics.
func WriteJSON(w io.Writer, res []ScenarioResult) error {
	rows := []Metrics{}
	for _, sr := range res {
		for _, r := range sr.Results {
			rows = append(rows, r.Metrics)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rows)
}
