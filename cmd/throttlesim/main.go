// Command throttlesim runs the traffic simulator of package throttle: whole
// crawls against model servers in virtual time, one row per (scenario,
// policy) to stdout, and one SVG plot per scenario. See README.md.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/crawlerkit/throttle/internal/sim"
)

// options are the command's flags.
type options struct {
	seed     uint64
	seeds    int
	scenario string
	duration time.Duration
	json     bool
	out      string
	list     bool
	grid     bool
	gridSeed uint64
	grids    int
	shapes   int
	top      int
	markdown bool
	told     bool
}

func main() {
	var o options
	flag.Uint64Var(&o.seed, "seed", 1, "random seed: a run is deterministic for a seed; the first seed with -seeds")
	flag.IntVar(&o.seeds, "seeds", 1, "run seeds seed..seed+N-1; each row is then the worst seed for each figure, plus the mean 2xx/cap")
	flag.StringVar(&o.scenario, "scenario", "", "scenarios: comma-separated names or patterns (e.g. ratelimit,'cold-*'); \"default\" the default set, \"all\" every scenario (default: the default set; all with -list)")
	flag.DurationVar(&o.duration, "duration", 0, "override every scenario's virtual duration (0: each scenario's default)")
	flag.BoolVar(&o.json, "json", false, "print the rows as JSON instead of a table")
	flag.StringVar(&o.out, "out", "throttlesim-out", "directory for the SVG plots (empty: no plots)")
	flag.BoolVar(&o.list, "list", false, "list the scenarios and their policies, then exit")
	flag.BoolVar(&o.grid, "grid", false, "run the grid of limiter shapes instead (worst shapes first, each the worst of -seeds seeds, 4 unless given)")
	flag.Uint64Var(&o.gridSeed, "grid-seed", 1, "with -grid: the seed that draws the shapes")
	flag.IntVar(&o.grids, "grids", 1, "with -grid: draw N grids, with grid seeds grid-seed..grid-seed+N-1, and judge their shapes together")
	flag.IntVar(&o.shapes, "shapes", 200, "with -grid: how many shapes to draw")
	flag.IntVar(&o.top, "top", 0, "with -grid: print the worst N shapes only (0: all)")
	flag.BoolVar(&o.markdown, "markdown", false, "with -grid: a Markdown table (the README's)")
	flag.BoolVar(&o.told, "told", false, "with -grid: run each shape that misses its cold start again, every refusal stating the limit (a column: what a throttle told the limit at its first refusal reaches)")
	flag.Parse()
	if o.grid {
		seedsSet := false
		flag.Visit(func(f *flag.Flag) { seedsSet = seedsSet || f.Name == "seeds" })
		if !seedsSet {
			o.seeds = 4
		}
		if err := runGrid(os.Stdout, os.Stderr, o); err != nil {
			fmt.Fprintln(os.Stderr, "throttlesim:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(os.Stdout, os.Stderr, o); err != nil {
		fmt.Fprintln(os.Stderr, "throttlesim:", err)
		os.Exit(1)
	}
}

// selectScenarios returns the scenarios o selects: the default set for
// "default" (or no -scenario, unless listing), else those of every
// scenario (the cold family included) that match the patterns.
func selectScenarios(o options) ([]sim.Scenario, error) {
	p := o.scenario
	if p == "" {
		p = "default"
		if o.list {
			p = "all"
		}
	}
	if p == "default" {
		return sim.Scenarios(o.duration), nil
	}
	return sim.Select(sim.AllScenarios(o.duration), p)
}

func run(stdout, stderr io.Writer, o options) error {
	if o.seeds < 1 {
		return fmt.Errorf("-seeds %d: want at least 1", o.seeds)
	}
	scs, err := selectScenarios(o)
	if err != nil {
		return err
	}
	if o.list {
		for _, sc := range scs {
			fmt.Fprintf(stdout, "%s (%v): %s\n", sc.Name, sc.Duration, sc.About)
			for _, p := range sc.Policies {
				fmt.Fprintf(stdout, "    %-16s %s\n", p.Name, p.About)
			}
		}
		return nil
	}
	start := time.Now()
	res := sim.RunSeeds(scs, o.seed, o.seeds, 0)
	if o.json {
		err = sim.WriteJSON(stdout, res)
	} else {
		err = sim.WriteTable(stdout, res)
	}
	if err != nil {
		return err
	}
	if o.out != "" {
		if err := writePlots(o.out, res); err != nil {
			return err
		}
	}
	seeds := fmt.Sprintf("seed %d", o.seed)
	if o.seeds > 1 {
		seeds = fmt.Sprintf("seeds %d-%d (worst of %d per figure)", o.seed, o.seed+uint64(o.seeds)-1, o.seeds)
	}
	fmt.Fprintf(stderr, "%d scenarios, %s, %v real time", len(res), seeds, time.Since(start).Round(time.Millisecond))
	if o.out != "" {
		fmt.Fprintf(stderr, ", plots in %s", o.out)
	}
	fmt.Fprintln(stderr)
	return nil
}

// runGrid runs the grid: o.shapes shapes drawn with each grid seed of
// o.gridSeed..o.gridSeed+o.grids-1, each shape on seeds
// o.seed..o.seed+o.seeds-1, printed worst first, then the summary and the
// worst figures.
func runGrid(stdout, stderr io.Writer, o options) error {
	if o.seeds < 1 || o.shapes < 1 || o.grids < 1 {
		return fmt.Errorf("-seeds %d, -shapes %d, -grids %d: want at least 1", o.seeds, o.shapes, o.grids)
	}
	start := time.Now()
	var shapes []sim.Shape
	for g := range uint64(o.grids) {
		shapes = append(shapes, sim.GridShapes(o.gridSeed+g, o.shapes)...)
	}
	rows := sim.RunGrid(shapes, o.seed, o.seeds, 0)
	if o.told {
		sim.AddTold(rows, o.seed, o.seeds, 0)
	}
	shown := rows
	if o.top > 0 && o.top < len(rows) {
		shown = rows[:o.top]
	}
	var err error
	if o.markdown {
		err = sim.WriteGridMarkdown(stdout, shown)
	} else {
		err = sim.WriteGrid(stdout, shown)
	}
	if err != nil {
		return err
	}
	grids := fmt.Sprintf("grid seed %d", o.gridSeed)
	if o.grids > 1 {
		grids = fmt.Sprintf("grid seeds %d-%d", o.gridSeed, o.gridSeed+uint64(o.grids)-1)
	}
	fmt.Fprintf(stderr, "%s; %s, seeds %d-%d (worst of %d per figure), %v real time\n%s\n", sim.GridSummary(rows),
		grids, o.seed, o.seed+uint64(o.seeds)-1, o.seeds, time.Since(start).Round(time.Millisecond), sim.GridWorst(rows))
	if o.told {
		fmt.Fprintln(stderr, sim.GridToldSummary(rows))
	}
	return nil
}

func writePlots(dir string, res []sim.ScenarioResult) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, sr := range res {
		f, err := os.Create(filepath.Join(dir, sr.Scenario.Name+".svg"))
		if err != nil {
			return err
		}
		err = sim.WriteSVG(f, sr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}
