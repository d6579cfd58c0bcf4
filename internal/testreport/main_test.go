package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A run with a pass, a failure, skips for two reasons and a package
// without tests, as `go test -json` prints it.
const sample = `{"Action":"start","Package":"ex/a"}
{"Action":"run","Package":"ex/a","Test":"TestOK"}
{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"ex/a","Test":"TestOK"}
{"Action":"run","Package":"ex/a","Test":"TestRedis"}
{"Action":"output","Package":"ex/a","Test":"TestRedis","Output":"=== RUN   TestRedis\n"}
{"Action":"output","Package":"ex/a","Test":"TestRedis","Output":"    redistest.go:135: redis-server not found: apt-get install redis-server\n"}
{"Action":"output","Package":"ex/a","Test":"TestRedis","Output":"--- SKIP: TestRedis (0.00s)\n"}
{"Action":"skip","Package":"ex/a","Test":"TestRedis"}
{"Action":"run","Package":"ex/a","Test":"TestRedis2"}
{"Action":"output","Package":"ex/a","Test":"TestRedis2","Output":"    redistest.go:135: redis-server not found: apt-get install redis-server\n"}
{"Action":"skip","Package":"ex/a","Test":"TestRedis2"}
{"Action":"output","Package":"ex/a","Output":"PASS\n"}
{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t0.01s\n"}
{"Action":"pass","Package":"ex/a"}
{"Action":"run","Package":"ex/b","Test":"TestBad"}
{"Action":"output","Package":"ex/b","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"ex/b","Test":"TestBad","Output":"    b_test.go:9: got 1, want 2\n"}
{"Action":"output","Package":"ex/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"ex/b","Test":"TestBad"}
{"Action":"run","Package":"ex/b","Test":"TestField"}
{"Action":"output","Package":"ex/b","Test":"TestField","Output":"    limiters.go:53: field tests skipped (~2 min): set THROTTLE_FIELD=1\n"}
{"Action":"skip","Package":"ex/b","Test":"TestField"}
{"Action":"output","Package":"ex/b","Output":"FAIL\tex/b\t0.02s\n"}
{"Action":"fail","Package":"ex/b"}
{"Action":"output","Package":"ex/c","Output":"?   \tex/c\t[no test files]\n"}
{"Action":"skip","Package":"ex/c"}
`

func TestReport(t *testing.T) {
	var out bytes.Buffer
	failed, err := report(strings.NewReader(sample), &out, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("a test failed: want failed")
	}
	got := out.String()
	for _, want := range []string{
		"ok  \tex/a\t0.01s\n",
		"    b_test.go:9: got 1, want 2\n--- FAIL: TestBad (0.00s)\n",
		"FAIL\tex/b\t0.02s\n",
		"?   \tex/c\t[no test files]\n",
		"=== SKIPPED: 3 tests, for 2 reason(s) ===\n",
		"   2  redis-server not found: apt-get install redis-server\n      in ex/a\n",
		"   1  field tests skipped (~2 min): set THROTTLE_FIELD=1\n      in ex/b\n",
		"bash .ci/run",
		"=== FAILED ===\n--- ex/b TestBad\n      b_test.go:9: got 1, want 2\n      --- FAIL: TestBad (0.00s)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	for _, not := range []string{"=== RUN   TestOK", "--- PASS", "TestRedis (0.00s)"} {
		if strings.Contains(got, not) {
			t.Errorf("report has %q (plain go test hides it):\n%s", not, got)
		}
	}
	checkEnd(t, got, "1 passed, 1 failed, 3 skipped")
}

// checkEnd checks that the report lists its failures after the skips and
// ends with the one line of counts.
func checkEnd(t *testing.T, report, counts string) {
	t.Helper()
	if !strings.HasSuffix(report, "\n"+counts+"\n") {
		t.Errorf("report does not end with %q:\n%s", counts, report)
	}
	if n := strings.Count(report, " passed, "); n != 1 {
		t.Errorf("report has %d lines of counts, want 1:\n%s", n, report)
	}
	skips := max(strings.LastIndex(report, "=== SKIPPED"), strings.LastIndex(report, "No test was skipped."))
	if skips < 0 {
		t.Errorf("report has no skip summary:\n%s", report)
	}
	if f := strings.Index(report, "=== FAILED"); f >= 0 && f < skips {
		t.Errorf("failures listed before the skips:\n%s", report)
	}
}

// The recorded streams in testdata are `go test -json -count=1` of the
// packages in testdata/sample.txtar (it says how to record them again),
// with the checkout's path replaced by /src/ex.
func recorded(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRecordedStreams(t *testing.T) {
	for _, tc := range []struct {
		file   string
		failed bool
		counts string
		want   []string // in the report, in this order
		not    []string
	}{
		{file: "pass.json", counts: "1 passed, 0 failed, 0 skipped",
			want: []string{"ok  \tex/pass\t", "No test was skipped."},
			not:  []string{"FAILED", "=== RUN"}},
		{file: "skip.json", counts: "1 passed, 0 failed, 1 skipped",
			want: []string{"ok  \tex/skip\t", "=== SKIPPED: 1 tests, for 1 reason(s) ===\n   1  redis-server not found: apt-get install redis-server\n      in ex/skip\n"},
			not:  []string{"FAILED"}},
		{file: "notests.json", counts: "0 passed, 0 failed, 0 skipped",
			want: []string{"?   \tex/notests\t[no test files]"},
			not:  []string{"FAILED"}},
		{file: "fail.json", failed: true, counts: "1 passed, 3 failed, 0 skipped",
			want: []string{
				"    f_test.go:9: got 1, want 2\n--- FAIL: TestBad", // as go test prints it
				"FAIL\tex/fail\t",
				"No test was skipped.",
				"=== FAILED ===\n",
				"--- ex/fail TestBad\n      f_test.go:8: context line\n      f_test.go:9: got 1, want 2\n",
				"--- ex/fail TestSub/inner\n      f_test.go:13: inner broke\n",
			},
			not: []string{"--- ex/fail TestSub\n", "--- ex/fail TestOK"}},
		{file: "panic.json", failed: true, counts: "1 passed, 1 failed, 0 skipped",
			want: []string{
				"No test was skipped.",
				"--- ex/panic TestNilMap\n      --- FAIL: TestNilMap (0.00s)\n      panic: assignment to entry in nil map",
			}},
		{file: "timeout.json", failed: true, counts: "1 passed, 1 failed, 0 skipped",
			want: []string{
				"panic: test timed out after 3s\n", // as go test prints it
				"FAIL\tex/timeout\t3.",
				"No test was skipped.",
				"--- ex/timeout TestHangs (still running when the package failed: a panic or a -timeout)\n" +
					"      t_test.go:11: waiting for the server\n      panic: test timed out after 3s\n      \trunning tests:\n      \t\tTestHangs (3s)\n",
			}},
		{file: "build.json", failed: true, counts: "0 passed, 1 failed, 0 skipped",
			want: []string{
				"# ex/build [ex/build.test]\nbuild/b.go:3:23: cannot use", // as go test prints it
				"FAIL\tex/build [build failed]",
				"No test was skipped.",
				"--- ex/build: build failed\n      # ex/build [ex/build.test]\n      build/b.go:3:23: cannot use \"x\"",
			}},
		{file: "mainfail.json", failed: true, counts: "1 passed, 1 failed, 0 skipped",
			want: []string{
				"leakcheck: 1 goroutine left behind:\n",
				"No test was skipped.",
				"--- ex/mainfail: failed outside any test\n      leakcheck: 1 goroutine left behind:\n      goroutine 7 [select]",
			},
			not: []string{"      FAIL\tex/mainfail"}},
		{file: "all.json", failed: true, counts: "6 passed, 7 failed, 1 skipped",
			want: []string{
				"=== SKIPPED: 1 tests",
				"=== FAILED ===",
				"--- ex/build: build failed",
				"--- ex/fail TestBad",
				"--- ex/fail TestSub/inner",
				"--- ex/mainfail: failed outside any test",
				"--- ex/panic TestNilMap",
				"--- ex/timeout TestHangs (still running",
			}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var out bytes.Buffer
			failed, err := report(strings.NewReader(recorded(t, tc.file)), &out, 0)
			if err != nil {
				t.Fatal(err)
			}
			got := out.String()
			if failed != tc.failed {
				t.Errorf("failed = %v, want %v", failed, tc.failed)
			}
			checkEnd(t, got, tc.counts)
			at := 0
			for _, w := range tc.want {
				i := strings.Index(got[at:], w)
				if i < 0 {
					t.Errorf("report lacks %q after byte %d:\n%s", w, at, got)
					continue
				}
				at += i + len(w)
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("report has %q:\n%s", n, got)
				}
			}
		})
	}
}

// TestCommandExitStatus: a go command that fails with no failed test (a
// pattern that matched nothing, a module it could not load) fails the
// report, with the lines it printed; one that fails with failed tests
// counts those, not one more.
func TestCommandExitStatus(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	var out bytes.Buffer
	var raw bytes.Buffer
	failed, err := runCommand([]string{"sh", "-c", "cat testdata/pass.json; echo 'go: warning: \"./nothing/...\" matched no packages' >&2; exit 1"}, &out, &raw)
	if err != nil {
		t.Fatal(err)
	}
	if !failed {
		t.Error("the command failed: want failed")
	}
	checkEnd(t, out.String(), "1 passed, 1 failed, 0 skipped")
	if want := recorded(t, "pass.json"); !strings.HasPrefix(raw.String(), want) || !strings.Contains(raw.String(), "matched no packages") {
		t.Errorf("the command's output, copied:\n%s", raw.String())
	}
	if want := "--- go test exited with status 1, with no failed test\n      go: warning: \"./nothing/...\" matched no packages\n"; !strings.Contains(out.String(), want) {
		t.Errorf("report lacks %q:\n%s", want, out.String())
	}

	out.Reset()
	failed, err = runCommand([]string{"sh", "-c", "cat testdata/fail.json; exit 1"}, &out, io.Discard)
	if err != nil || !failed {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	checkEnd(t, out.String(), "1 passed, 3 failed, 0 skipped")

	out.Reset()
	failed, err = runCommand([]string{"sh", "-c", "cat testdata/pass.json"}, &out, io.Discard)
	if err != nil || failed {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	checkEnd(t, out.String(), "1 passed, 0 failed, 0 skipped")
}

func TestReportAllPassed(t *testing.T) {
	in := `{"Action":"run","Package":"ex/a","Test":"TestOK"}
{"Action":"pass","Package":"ex/a","Test":"TestOK"}
{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t0.01s\n"}
{"Action":"pass","Package":"ex/a"}
`
	var out bytes.Buffer
	failed, err := report(strings.NewReader(in), &out, 0)
	if err != nil || failed {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	if !strings.Contains(out.String(), "No test was skipped.") {
		t.Errorf("report:\n%s", out.String())
	}
	checkEnd(t, out.String(), "1 passed, 0 failed, 0 skipped")
}

func TestReportNothingRan(t *testing.T) {
	var out bytes.Buffer
	failed, _ := report(strings.NewReader("go: cannot find main module\n"), &out, 0)
	if !failed || !strings.Contains(out.String(), "go: cannot find main module") || !strings.Contains(out.String(), "--- no test ran") {
		t.Errorf("failed %v, report:\n%s", failed, out.String())
	}
	checkEnd(t, out.String(), "0 passed, 1 failed, 0 skipped")
}

// TestExcerpt: a long output is cut after its first lines, and a panic
// further down is shown with the lines that follow it.
func TestExcerpt(t *testing.T) {
	word := func(i int) string { return strings.Repeat("x", i+1) } // lines that differ in more than digits
	var output []string
	output = append(output, "=== RUN   TestX\n")
	for i := range 30 {
		output = append(output, fmt.Sprintf("    x_test.go:1: line %s\n", word(i)))
	}
	output = append(output, "panic: boom\n", "\n", "goroutine 1 [running]:\n", "main.f()\n", "\tx.go:1\n", "main.g()\n", "\tx.go:2\n")
	got := excerpt(output)
	want := []string{}
	for i := range excerptLines {
		want = append(want, fmt.Sprintf("x_test.go:1: line %s", word(i)))
	}
	want = append(want, "...", "panic: boom", "", "goroutine 1 [running]:", "main.f()", "\tx.go:1", "... (12 more lines)")
	if !slices.Equal(got, want) {
		t.Errorf("excerpt:\n%q\nwant\n%q", got, want)
	}
}

// TestExcerptAssertAfterFlood: a client library's log flood (the same line
// but for its timestamps and ports, 300 times) is folded into one line,
// and a testify report further down, after a page of other logs, is shown
// whole: the reader sees what failed. (CI once showed only the flood.)
func TestExcerptAssertAfterFlood(t *testing.T) {
	var output []string
	for i := range 300 {
		output = append(output, fmt.Sprintf("redis: 2026/11/27 19:16:%02d pool.go:770: failed to dial 127.0.0.1:%d: connection refused\n", i%60, 40000+i))
	}
	for i := range 40 {
		output = append(output, fmt.Sprintf("    node.go:1: %s\n", strings.Repeat("n", i+1)))
	}
	report := []string{
		"    cluster_test.go:952: \n",
		"        \tError Trace:\t/w/cluster_test.go:952\n",
		"        \tError:      \tShould be zero, but was 1\n",
		"        \tTest:       \tTestClusterMasterKilled/FallbackLocal\n",
		"        \tMessages:   \tcrawl-3: StoreFallbackLocal returned a store.Error\n",
	}
	output = append(output, report...)
	output = append(output, "    node.go:2: after\n")
	got := excerpt(output)
	require.Equal(t, "redis: 2026/11/27 19:16:00 pool.go:770: failed to dial 127.0.0.1:40000: connection refused", got[0])
	require.Equal(t, "(299 more like it)", got[1])
	var wantReport []string
	for _, l := range report {
		wantReport = append(wantReport, strings.TrimPrefix(strings.TrimRight(l, " \n"), "    "))
	}
	i := slices.Index(got, wantReport[0])
	require.GreaterOrEqual(t, i, excerptLines, "the report, after the first lines: %q", got)
	require.Equal(t, "...", got[i-1])
	require.Equal(t, wantReport, got[i:i+len(wantReport)])
	require.Equal(t, "... (23 more lines)", got[len(got)-1], "22 node lines skipped before the report, 1 after")
}
