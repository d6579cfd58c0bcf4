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
	scenario string
	duration time.Duration
	json     bool
	out      string
	list     bool
}

func main() {
	var o options
	flag.Uint64Var(&o.seed, "seed", 1, "random seed: a run is deterministic for a seed")
	flag.StringVar(&o.scenario, "scenario", "all", "scenarios to run: comma-separated names or patterns (e.g. ratelimit,'rampup-50*')")
	flag.DurationVar(&o.duration, "duration", 0, "override every scenario's virtual duration (0: each scenario's default)")
	flag.BoolVar(&o.json, "json", false, "print the rows as JSON instead of a table")
	flag.StringVar(&o.out, "out", "throttlesim-out", "directory for the SVG plots (empty: no plots)")
	flag.BoolVar(&o.list, "list", false, "list the scenarios and their policies, then exit")
	flag.Parse()
	if err := run(os.Stdout, os.Stderr, o); err != nil {
		fmt.Fprintln(os.Stderr, "throttlesim:", err)
		os.Exit(1)
	}
}

func run(stdout, stderr io.Writer, o options) error {
	scs, err := sim.Select(sim.Scenarios(o.duration), o.scenario)
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
	res := sim.RunAll(scs, o.seed, 0)
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
	fmt.Fprintf(stderr, "%d scenarios, seed %d, %v real time", len(res), o.seed, time.Since(start).Round(time.Millisecond))
	if o.out != "" {
		fmt.Fprintf(stderr, ", plots in %s", o.out)
	}
	fmt.Fprintln(stderr)
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
