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
	o := options{seed: 3, scenario: "storm,skew", duration: 2 * time.Minute, out: dir}
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
