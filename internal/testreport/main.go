// Command testreport runs `go test -json` (or reads its output from
// standard input) and reports it so that nothing scrolls out of view:
//
//  1. what plain `go test` prints: each package's ok, FAIL or "no test
//     files" line, the output of every test that failed or was still
//     running when its package died (a panic, a -timeout), and the
//     compiler's errors for a package that did not build;
//  2. the tests that were skipped, grouped by reason: a suite that needs a
//     server this machine lacks (redis-server, nginx, haproxy, chromium)
//     skips, and plain `go test` hides that behind an "ok";
//  3. the failures, last: every failed test, every test a panic or a
//     timeout cut short, every package that failed to build or failed
//     outside its tests (a leak check in TestMain, a race found after the
//     tests), each with its package and the first lines of its output;
//  4. one line: "N passed, N failed, N skipped".
//
// The counts are of tests, subtests included; "failed" also counts each
// package that failed without a failed test of its own (it did not build,
// it failed outside any test) and a go command that failed without a
// single test failing (a pattern that matched nothing, say).
//
// scripts/test runs it with the command to run:
//
//	go run ./internal/testreport go test -race -json github.com/crawlerkit/throttle/...
//
// With no arguments it reads the events from standard input. It exits 1
// when anything failed or no test ran, 2 when it could not run the
// command, else 0. With TESTREPORT_JSON=file in its environment it also
// writes the lines it read to file (go test -json's events, whose Elapsed
// give each test's and each package's time).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), or of the build
// output the go command interleaves with them (ImportPath, build-output,
// build-fail).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string
	FailedBuild string
}

// excerptLines is how many lines of a failure's output the final list
// shows; a panic's first line is shown too when it comes later.
const excerptLines = 20

// panicLines is how many lines from a later panic's first the list shows.
const panicLines = 5

// maxAsserts is how many later assertion reports the list shows, and
// assertLines the most lines it shows of each.
const (
	maxAsserts  = 3
	assertLines = 12
)

func main() {
	var (
		failed bool
		err    error
		raw    io.Writer = io.Discard
	)
	if name := os.Getenv("TESTREPORT_JSON"); name != "" {
		f, err := os.Create(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testreport:", err)
			os.Exit(2)
		}
		defer f.Close()
		raw = f
	}
	if args := os.Args[1:]; len(args) > 0 {
		failed, err = runCommand(args, os.Stdout, raw)
	} else {
		failed, err = report(io.TeeReader(os.Stdin, raw), os.Stdout, 0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// runCommand runs args, reads its standard output and standard error as
// one stream of events (copied to raw) and writes the report to w; a
// nonzero exit of the command is a failure even when no test failed.
func runCommand(args []string, w, raw io.Writer) (failed bool, err error) {
	cmd := exec.Command(args[0], args[1:]...)
	pr, pw, err := os.Pipe()
	if err != nil {
		return true, err
	}
	cmd.Stdout, cmd.Stderr, cmd.Stdin = pw, pw, os.Stdin
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return true, err
	}
	pw.Close() // the command holds its own copy
	c := newCollector(w)
	readErr := c.read(io.TeeReader(pr, raw))
	pr.Close()
	waitErr := cmd.Wait()
	status := 0
	if waitErr != nil {
		var exit *exec.ExitError
		if !errors.As(waitErr, &exit) {
			return true, waitErr
		}
		status = exit.ExitCode()
		if status == 0 || status == -1 { // killed by a signal
			status = 1
		}
	}
	if readErr != nil {
		return true, readErr
	}
	return c.finish(status), nil
}

// report reads the events from r and writes the report to w. status is
// the go command's exit status (0 when unknown). It reports whether
// anything failed (or nothing ran).
func report(r io.Reader, w io.Writer, status int) (failed bool, err error) {
	c := newCollector(w)
	if err := c.read(r); err != nil {
		return true, err
	}
	return c.finish(status), nil
}

// test is what the collector knows of one test (or one package, Test "").
type test struct {
	pkg, name string
	output    []string // its output lines so far
	done      bool     // it passed, failed or skipped
	printed   bool     // its output was printed while it was still running
}

// failure is one entry of the final list.
type failure struct {
	title  string   // "pkg TestName", "pkg: build failed" ...
	output []string // its output, whole; the list shows an excerpt
}

// skip is the tests skipped for one reason.
type skip struct {
	reason string
	tests  []string // "package TestName"
}

// collector turns the events into the report as they come.
type collector struct {
	w        io.Writer
	tests    map[string]*test    // package + " " + test
	running  map[string][]*test  // per package, its tests in the order they started
	builds   map[string][]string // build output per ImportPath
	pkgOut   map[string][]string // per package, its output outside any test
	other    []string            // lines that are no event
	events   int
	passed   int
	failed   int
	skipped  int
	failures []failure
	skips    []*skip
	byReason map[string]*skip
}

func newCollector(w io.Writer) *collector {
	return &collector{
		w:        w,
		tests:    map[string]*test{},
		running:  map[string][]*test{},
		builds:   map[string][]string{},
		pkgOut:   map[string][]string{},
		byReason: map[string]*skip{},
	}
}

// read handles every line of r.
func (c *collector) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		c.line(sc.Bytes())
	}
	return sc.Err()
}

// line handles one line of input.
func (c *collector) line(line []byte) {
	var ev event
	if json.Unmarshal(line, &ev) != nil || ev.Action == "" {
		// Not an event: the go command's own messages (a pattern that
		// matches nothing, a module it cannot find).
		fmt.Fprintln(c.w, string(line))
		c.other = append(c.other, string(line))
		return
	}
	c.events++
	switch ev.Action {
	case "build-output":
		fmt.Fprint(c.w, ev.Output)
		c.builds[ev.ImportPath] = append(c.builds[ev.ImportPath], ev.Output)
		return
	case "build-fail":
		return
	}
	if ev.Test == "" {
		c.packageEvent(ev)
		return
	}
	id := ev.Package + " " + ev.Test
	t := c.tests[id]
	if t == nil {
		t = &test{pkg: ev.Package, name: ev.Test}
		c.tests[id] = t
		c.running[ev.Package] = append(c.running[ev.Package], t)
	}
	switch ev.Action {
	case "output":
		t.output = append(t.output, ev.Output)
	case "pass":
		c.passed++
		c.end(t)
	case "fail":
		c.failed++
		c.printOutput(t.output)
		if !c.hasFailedSubtest(t) {
			c.failures = append(c.failures, failure{title: ev.Package + " " + ev.Test, output: t.output})
		}
		c.end(t)
	case "skip":
		c.skipped++
		c.addSkip(skipReason(t.output), ev.Package+" "+ev.Test)
		c.end(t)
	}
}

// packageEvent handles an event of the package itself.
func (c *collector) packageEvent(ev event) {
	switch ev.Action {
	case "output":
		// ok, FAIL, "no test files" and what the package printed outside
		// its tests (TestMain, a panic before any test ran).
		if !strings.HasPrefix(ev.Output, "=== ") && ev.Output != "PASS\n" && ev.Output != "FAIL\n" {
			if strings.HasPrefix(ev.Output, "FAIL\t") {
				// go test prints the output of the tests a panic or a
				// timeout cut short (they get no fail event) before
				// the package's FAIL line.
				for _, t := range c.running[ev.Package] {
					if !t.done && !t.printed {
						c.printOutput(t.output)
						t.printed = true
					}
				}
			}
			fmt.Fprint(c.w, ev.Output)
			if !isResultLine(ev.Output) {
				c.pkgOut[ev.Package] = append(c.pkgOut[ev.Package], ev.Output)
			}
		}
	case "fail":
		c.packageFailed(ev)
		c.forget(ev.Package)
	case "pass", "skip":
		c.forget(ev.Package)
	}
}

// packageFailed lists what made the package fail that no test's fail
// event covers: a build failure, the tests a panic or a timeout cut
// short (they never get a fail event), a failure outside any test.
func (c *collector) packageFailed(ev event) {
	if ev.FailedBuild != "" {
		c.failed++
		c.failures = append(c.failures, failure{title: ev.Package + ": build failed", output: c.builds[ev.FailedBuild]})
		return
	}
	cut := 0
	for _, t := range c.running[ev.Package] {
		if t.done {
			continue
		}
		cut++
		c.failed++
		if !t.printed {
			c.printOutput(t.output)
			t.printed = true
		}
		if c.hasRunningSubtest(t) {
			continue // the subtest is listed
		}
		c.failures = append(c.failures, failure{
			title:  ev.Package + " " + t.name + " (still running when the package failed: a panic or a -timeout)",
			output: t.output,
		})
	}
	if cut > 0 {
		return
	}
	for _, f := range c.failures {
		if strings.HasPrefix(f.title, ev.Package+" ") {
			return // a failed test explains it
		}
	}
	c.failed++
	c.failures = append(c.failures, failure{title: ev.Package + ": failed outside any test", output: c.pkgOut[ev.Package]})
}

// end marks t done.
func (c *collector) end(t *test) {
	t.done = true
	t.output = slices.Clip(t.output)
}

// forget drops what is kept of a package once it ended.
func (c *collector) forget(pkg string) {
	for _, t := range c.running[pkg] {
		delete(c.tests, pkg+" "+t.name)
	}
	delete(c.running, pkg)
	delete(c.pkgOut, pkg)
}

// hasFailedSubtest reports whether a subtest of t failed (it is listed
// itself: its parent's own output is only the --- FAIL lines).
func (c *collector) hasFailedSubtest(t *test) bool {
	prefix := t.name + "/"
	for _, f := range c.failures {
		if strings.HasPrefix(f.title, t.pkg+" "+prefix) {
			return true
		}
	}
	return false
}

// hasRunningSubtest reports whether a subtest of t is still running.
func (c *collector) hasRunningSubtest(t *test) bool {
	for _, o := range c.running[t.pkg] {
		if !o.done && strings.HasPrefix(o.name, t.name+"/") {
			return true
		}
	}
	return false
}

func (c *collector) printOutput(lines []string) {
	for _, l := range lines {
		fmt.Fprint(c.w, l)
	}
}

func (c *collector) addSkip(reason, test string) {
	s := c.byReason[reason]
	if s == nil {
		s = &skip{reason: reason}
		c.byReason[reason] = s
		c.skips = append(c.skips, s)
	}
	s.tests = append(s.tests, test)
}

// finish writes the skips, the failures and the counts; status is the go
// command's exit status. It reports whether anything failed.
func (c *collector) finish(status int) bool {
	if c.events == 0 {
		c.failed++
		c.failures = append(c.failures, failure{title: "no test ran", output: c.other})
	} else if status != 0 && c.failed == 0 {
		c.failed++
		c.failures = append(c.failures, failure{title: fmt.Sprintf("go test exited with status %d, with no failed test", status), output: c.other})
	}
	writeSkips(c.w, c.skips)
	writeFailures(c.w, c.failures)
	fmt.Fprintf(c.w, "%d passed, %d failed, %d skipped\n", c.passed, c.failed, c.skipped)
	return c.failed > 0
}

// isResultLine reports whether l is a package's result line: "ok  \t",
// "FAIL\t", "?   \t".
func isResultLine(l string) bool {
	return strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "?   \t")
}

// skipReason is the message a skipped test gave: its output without the
// === and --- lines and without the file:line prefix.
func skipReason(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		if i := strings.Index(t, ": "); i > 0 && strings.Contains(t[:i], ".go:") {
			t = t[i+2:]
		}
		msg = append(msg, t)
	}
	if len(msg) == 0 {
		return "(no reason given)"
	}
	return strings.Join(msg, " ")
}

// writeSkips lists the skipped tests by reason, the most common first.
func writeSkips(w io.Writer, skips []*skip) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nNo test was skipped.")
		return
	}
	slices.SortStableFunc(skips, func(a, b *skip) int { return len(b.tests) - len(a.tests) })
	n := 0
	for _, s := range skips {
		n += len(s.tests)
	}
	fmt.Fprintf(w, "\n=== SKIPPED: %d tests, for %d reason(s) ===\n", n, len(skips))
	for _, s := range skips {
		pkgs := map[string]bool{}
		for _, t := range s.tests {
			pkgs[strings.Fields(t)[0]] = true
		}
		names := make([]string, 0, len(pkgs))
		for p := range pkgs {
			names = append(names, shortPackage(p))
		}
		slices.Sort(names)
		fmt.Fprintf(w, "%4d  %s\n      in %s\n", len(s.tests), s.reason, strings.Join(names, ", "))
	}
	fmt.Fprintln(w, "To run them all, with redis-server, nginx, haproxy and chromium installed when missing: bash .ci/run (as root, or with sudo)")
}

// writeFailures lists the failures, in the order they happened, each with
// the first lines of its output.
func writeFailures(w io.Writer, failures []failure) {
	if len(failures) == 0 {
		return
	}
	fmt.Fprintln(w, "\n=== FAILED ===")
	for _, f := range failures {
		fmt.Fprintf(w, "--- %s\n", shortPackage(f.title))
		for _, l := range excerpt(f.output) {
			if l == "" {
				fmt.Fprintln(w)
				continue
			}
			fmt.Fprintf(w, "      %s\n", l)
		}
	}
}

// excerpt is what a failure's output says, cut to be read at a glance:
// its first excerptLines lines that say something (not the === RUN
// lines), with a run of lines that differ only in their digits (a client
// library logging each failed dial) folded into its first; then, further
// down, each assertion's report (testify's "Error Trace:" block, up to
// maxAsserts of them) and the first panic with the lines that name what it
// hit (a timeout's running tests). An assertion that comes after a flood
// of log lines is what the reader needs, and the flood is what hid it.
func excerpt(output []string) []string {
	var lines []string
	for _, chunk := range output {
		for l := range strings.SplitSeq(strings.TrimSuffix(chunk, "\n"), "\n") {
			t := strings.TrimSpace(l)
			if strings.HasPrefix(t, "=== RUN") || strings.HasPrefix(t, "=== PAUSE") || strings.HasPrefix(t, "=== CONT") || strings.HasPrefix(t, "=== NAME") {
				continue
			}
			// A test's log lines are indented by four spaces under
			// its --- FAIL line; here the title is above them.
			lines = append(lines, strings.TrimPrefix(strings.TrimRight(l, " \t"), "    "))
		}
	}
	lines = foldRepeats(lines)
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) <= excerptLines {
		return lines
	}
	out := slices.Clone(lines[:excerptLines])
	shown := excerptLines // lines[:shown] are out, or counted as skipped
	skipped := 0
	show := func(from, to int) {
		skipped += from - shown
		out = append(append(out, "..."), lines[from:to]...)
		shown = to
	}
	asserts, panicked := 0, false
	for i := excerptLines; i < len(lines); i++ {
		switch l := strings.TrimSpace(lines[i]); {
		case strings.HasPrefix(l, "Error Trace:") && asserts < maxAsserts:
			asserts++
			from := max(i-1, shown) // the file:line header above the block
			to := i + 1
			for to < len(lines) && to-from < assertLines && isAssertLine(lines[to]) {
				to++
			}
			show(from, to)
			i = to - 1
		case strings.HasPrefix(l, "panic: ") && !panicked:
			panicked = true
			to := min(i+panicLines, len(lines))
			show(i, to)
			i = to - 1
		}
	}
	skipped += len(lines) - shown
	if skipped == 0 {
		return out
	}
	return append(out, fmt.Sprintf("... (%d more lines)", skipped))
}

// isAssertLine reports whether l goes on a testify report: its fields
// ("Error:", "Messages:" ...) and their continuations are indented by a
// tab.
func isAssertLine(l string) bool {
	return strings.HasPrefix(strings.TrimLeft(l, " "), "\t")
}

// foldRepeats folds each run of lines that differ only in their digits
// (timestamps, ports, counters) into its first line and a count.
func foldRepeats(lines []string) []string {
	shape := func(l string) string {
		return strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return '#'
			}
			return r
		}, l)
	}
	var out []string
	for i := 0; i < len(lines); {
		j := i + 1
		if lines[i] != "" {
			si := shape(lines[i])
			for j < len(lines) && shape(lines[j]) == si {
				j++
			}
		}
		out = append(out, lines[i])
		if n := j - i - 1; n > 0 {
			out = append(out, fmt.Sprintf("(%d more like it)", n))
		}
		i = j
	}
	return out
}

// shortPackage drops the module path from s, which starts with a package.
func shortPackage(s string) string {
	const module = "github.com/crawlerkit/throttle/"
	return strings.TrimPrefix(s, module)
}
