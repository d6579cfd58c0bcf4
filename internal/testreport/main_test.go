package main

import (
	"bytes"
	"strings"
	"testing"
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
	failed, err := report(strings.NewReader(sample), &out)
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
}

func TestReportAllPassed(t *testing.T) {
	in := `{"Action":"run","Package":"ex/a","Test":"TestOK"}
{"Action":"pass","Package":"ex/a","Test":"TestOK"}
{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t0.01s\n"}
{"Action":"pass","Package":"ex/a"}
`
	var out bytes.Buffer
	failed, err := report(strings.NewReader(in), &out)
	if err != nil || failed {
		t.Fatalf("failed %v, err %v", failed, err)
	}
	if !strings.Contains(out.String(), "No test was skipped.") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestReportNothingRan(t *testing.T) {
	var out bytes.Buffer
	failed, _ := report(strings.NewReader("go: cannot find main module\n"), &out)
	if !failed || !strings.Contains(out.String(), "go: cannot find main module") || !strings.Contains(out.String(), "no test ran") {
		t.Errorf("failed %v, report:\n%s", failed, out.String())
	}
}
