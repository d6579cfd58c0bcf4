// Command testreport reads `go test -json` from standard input, prints what
// plain `go test` prints (each package's ok, FAIL or "no test files" line,
// and the whole output of every test that failed), then says loudly which
// tests were skipped and why, grouped by reason: a suite that needs a
// server this machine lacks (redis-server, nginx, haproxy, chromium)
// skips, and plain `go test` hides that behind an "ok".
//
// scripts/test runs it:
//
//	go test -race -json github.com/crawlerkit/throttle/... | go run ./internal/testreport
//
// It exits 1 when a test or a package failed, or when the input held no
// test event at all, else 0.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is the tests skipped for one reason.
type skip struct {
	reason string
	tests  []string // "package TestName"
}

func main() {
	failed, err := report(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// report reads the events from r and writes the report to w. It reports
// whether anything failed (or nothing ran).
func report(r io.Reader, w io.Writer) (failed bool, err error) {
	out := map[string][]string{} // package + " " + test: its output so far
	var skips []*skip
	byReason := map[string]*skip{}
	events := 0
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev event
		if json.Unmarshal(line, &ev) != nil || ev.Action == "" {
			fmt.Fprintln(w, string(line)) // not an event: a build error, say
			continue
		}
		events++
		id := ev.Package + " " + ev.Test
		switch ev.Action {
		case "output":
			if ev.Test == "" {
				// The package's own lines: ok, FAIL, "no test files",
				// build failures, panics outside a test.
				if !strings.HasPrefix(ev.Output, "=== ") && !strings.HasPrefix(ev.Output, "PASS\n") {
					fmt.Fprint(w, ev.Output)
				}
				continue
			}
			out[id] = append(out[id], ev.Output)
		case "fail":
			failed = true
			if ev.Test != "" {
				for _, l := range out[id] {
					fmt.Fprint(w, l)
				}
			}
			delete(out, id)
		case "skip":
			if ev.Test != "" {
				reason := skipReason(out[id])
				s := byReason[reason]
				if s == nil {
					s = &skip{reason: reason}
					byReason[reason] = s
					skips = append(skips, s)
				}
				s.tests = append(s.tests, ev.Package+" "+ev.Test)
			}
			delete(out, id)
		case "pass":
			delete(out, id)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	if events == 0 {
		fmt.Fprintln(w, "testreport: no test ran")
		return true, nil
	}
	writeSkips(w, skips)
	return failed, nil
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
			names = append(names, strings.TrimPrefix(p, "github.com/crawlerkit/throttle/"))
		}
		slices.Sort(names)
		fmt.Fprintf(w, "%4d  %s\n      in %s\n", len(s.tests), s.reason, strings.Join(names, ", "))
	}
	fmt.Fprintln(w, "To run them all, with redis-server, nginx and haproxy installed when missing: bash .ci/run (as root, or with sudo)")
}
