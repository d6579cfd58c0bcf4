package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	o := options{seed: 3, seeds: 1, scenario: "storm,skew", duration: 2 * time.Minute, out: dir}
	if err := run(&out, &errOut, o); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "\n"); n < 10 || !strings.Contains(out.String(), "throttle/ready") {
		t.Fatalf("table:\n%s", out.String())
	}
	for _, name := range []string{"storm.svg", "skew.svg"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || !bytes.HasPrefix(b, []byte("<svg")) {
			t.Fatalf("%s: %v", name, err)
		}
	}
	// The same seed gives the same rows, as JSON too.
	var js1, js2 bytes.Buffer
	o.json, o.out = true, ""
	if err := run(&js1, &errOut, o); err != nil {
		t.Fatal(err)
	}
	if err := run(&js2, &errOut, o); err != nil {
		t.Fatal(err)
	}
	var rows []map[string]any
	if err := json.Unmarshal(js1.Bytes(), &rows); err != nil || len(rows) < 10 {
		t.Fatalf("JSON: %v, %d rows", err, len(rows))
	}
	if js1.String() != js2.String() {
		t.Fatal("two runs with one seed printed different rows")
	}
	if err := run(&out, &errOut, options{scenario: "nope"}); err == nil {
		t.Fatal("unknown scenario accepted")
	}
}

// TestSeedsAndSelection: -seeds prints the worst of the seeds with the
// mean 2xx/cap; the cold family is out of the default set, in all and
// in -list.
func TestSeedsAndSelection(t *testing.T) {
	var out, errOut bytes.Buffer
	o := options{seed: 3, seeds: 2, scenario: "cold-5rps-b10-50ms", duration: 2 * time.Minute}
	if err := run(&out, &errOut, o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2+5 || !strings.HasPrefix(lines[0], "worst of 2 seeds (3-4)") ||
		!strings.Contains(lines[1], "2xx/cap mean") || !strings.Contains(lines[1], "cold90 s") || !strings.Contains(lines[1], "first5") {
		t.Fatalf("table:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "seeds 3-4") {
		t.Fatalf("stderr: %s", errOut.String())
	}
	if err := run(&out, &errOut, options{seeds: 0, scenario: "storm"}); err == nil {
		t.Fatal("-seeds 0 accepted")
	}
	def, err := selectScenarios(options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range def {
		if strings.HasPrefix(sc.Name, "cold-") {
			t.Fatalf("%s in the default set", sc.Name)
		}
	}
	all, _ := selectScenarios(options{scenario: "all"})
	listed, _ := selectScenarios(options{list: true})
	if len(all) <= len(def) || len(listed) != len(all) {
		t.Fatalf("default %d, all %d, listed %d scenarios", len(def), len(all), len(listed))
	}
	out.Reset()
	if err := run(&out, &errOut, options{list: true, seeds: 1}); err != nil || !strings.Contains(out.String(), "cold-600pm-sliding (10m0s)") || !strings.Contains(out.String(), "throttle+cold") {
		t.Fatalf("-list: %v\n%s", err, out.String())
	}
}

// TestRunGrid: -grid prints the worst shapes first (-top of them), as a
// table or Markdown, and the whole grid's summary.
func TestRunGrid(t *testing.T) {
	var out, errOut bytes.Buffer
	o := options{seed: 1, seeds: 1, gridSeed: 1, grids: 1, shapes: 7, top: 3}
	if err := runGrid(&out, &errOut, o); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[0], "to 90% (s)") {
		t.Fatalf("table of the worst 3:\n%s", out.String())
	}
	if !strings.Contains(errOut.String(), "7 shapes, ") || !strings.Contains(errOut.String(), "grid seed 1, seeds 1-1") {
		t.Fatalf("summary: %s", errOut.String())
	}
	out.Reset()
	o.markdown = true
	if err := runGrid(&out, &errOut, o); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 5 || !strings.HasPrefix(lines[2], "| `") {
		t.Fatalf("Markdown:\n%s", out.String())
	}
	// -told adds the told column and its summary.
	out.Reset()
	errOut.Reset()
	o.markdown, o.top = false, 0
	o.told = true
	if err := runGrid(&out, &errOut, o); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "told (s)") || !strings.Contains(errOut.String(), "told the limit at the first refusal") {
		t.Fatalf("-told:\n%s\n%s", out.String(), errOut.String())
	}
	if err := runGrid(&out, &errOut, options{seeds: 0, shapes: 7, grids: 1}); err == nil {
		t.Fatal("-seeds 0 accepted")
	}
	if err := runGrid(&out, &errOut, options{seeds: 1, shapes: 7, grids: -1}); err == nil {
		t.Fatal("-grids -1 accepted")
	}
	// -grids judges the shapes of several grid seeds together, and the
	// summary names the worst figures.
	out.Reset()
	errOut.Reset()
	o = options{seed: 1, seeds: 1, gridSeed: 1, grids: 2, shapes: 4}
	if err := runGrid(&out, &errOut, o); err != nil {
		t.Fatal(err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 9 {
		t.Fatalf("-grids 2 -shapes 4: want 8 rows:\n%s", out.String())
	}
	for _, want := range []string{"8 shapes, ", "grid seeds 1-2, seeds 1-1", "\nworst: to 90 % "} {
		if !strings.Contains(errOut.String(), want) {
			t.Fatalf("summary without %q: %s", want, errOut.String())
		}
	}
}
