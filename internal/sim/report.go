package sim

import (
	"encoding/json"
	"fmt"
	"io"
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
	Results  []Result
}

// RunAll runs every policy of every scenario with seed, up to parallel
// runs at once (0 means GOMAXPROCS). Each run is deterministic on its own,
// so the results do not depend on parallel.
func RunAll(scs []Scenario, seed uint64, parallel int) []ScenarioResult {
	if parallel <= 0 {
		parallel = runtime.GOMAXPROCS(0)
	}
	out := make([]ScenarioResult, len(scs))
	type job struct{ i, j int }
	jobs := make(chan job)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for jb := range jobs {
				out[jb.i].Results[jb.j] = Run(scs[jb.i], scs[jb.i].Policies[jb.j], seed)
			}
		})
	}
	for i, sc := range scs {
		out[i] = ScenarioResult{Scenario: sc, Results: make([]Result, len(sc.Policies))}
	}
	for i, sc := range scs {
		for j := range sc.Policies {
			jobs <- job{i, j}
		}
	}
	close(jobs)
	wg.Wait()
	return out
}

// Table columns: see Metrics.
var tableHeader = []string{"scenario", "policy", "req/s", "2xx/s", "2xx/cap", "sig/min", "inflight",
	"storm req", "storm quiet", "recover s", "in gate (raw)"}

// WriteTable writes one row per (scenario, policy) as an aligned text
// table; "-" marks a figure that does not apply.
func WriteTable(w io.Writer, res []ScenarioResult) error {
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
	rows := [][]string{tableHeader}
	for _, sr := range res {
		for _, r := range sr.Results {
			rows = append(rows, cells(r.Metrics))
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

func cells(m Metrics) []string {
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
	ratio := "-"
	if m.OKPerCapacity != nil {
		ratio = f(100**m.OKPerCapacity, 1) + "%"
	}
	gate := "-"
	if m.InGate != nil {
		gate = fmt.Sprintf("%d (%d)", *m.InGate, *m.InGateRaw)
	}
	return []string{m.Scenario, m.Policy, f(m.SentRate, 2), f(m.OKRate, 2), ratio, f(m.SignalsPerMin, 2),
		f(m.MeanInFlight, 2), pi(m.StormRequests), pi(m.StormQuietAfter), pf(m.RecoverSeconds, 0), gate}
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
