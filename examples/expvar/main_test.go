package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crawlerkit/throttle/internal/localnet"
)

// The crawl's expvar variables live for the process: the tests share one
// run, in fake time (a synctest bubble, the hosts served in process), and
// the pages the monitoring mux served right after it.
var (
	once   sync.Once
	shared result
	pages  map[string][]byte // by path: /debug/vars, /status ...
	output string
	ranOK  bool
)

// monitored are the paths of the monitoring mux the tests read.
var monitored = []string{"/debug/vars", "/status?format=json", "/status"}

func runOnce(t *testing.T) result {
	t.Helper()
	once.Do(func() {
		pages = map[string][]byte{}
		var out strings.Builder
		shared = localnet.Run(t, func(ctx context.Context) (result, error) {
			mux := http.NewServeMux()
			res, err := run(ctx, &out, mux)
			for _, path := range monitored {
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != http.StatusOK {
					return res, fmt.Errorf("GET %s: %d\n%s", path, rec.Code, rec.Body)
				}
				pages[path] = rec.Body.Bytes()
			}
			return res, err
		})
		output = out.String()
		ranOK = true
	})
	if !ranOK {
		t.Fatal("the shared run failed")
	}
	t.Log("\n" + output)
	return shared
}

// getBody is what the monitoring mux served for path after the crawl.
func getBody(t *testing.T, path string) []byte {
	t.Helper()
	b, ok := pages[path]
	if !ok {
		t.Fatalf("%s was not read after the crawl", path)
	}
	return b
}

// vars is the "throttle" variable as /debug/vars serves it.
type vars struct {
	Requests       map[string]int64     `json:"requests"`
	RobotsTxt      map[string]int64     `json:"robots_txt"`
	BackoffSignals map[string]int64     `json:"backoff_signals"`
	DelayMS        map[string]float64   `json:"delay_ms"`
	Concurrency    map[string]int64     `json:"concurrency"`
	Gates          map[string]int64     `json:"gates"`
	GateUntil      map[string]time.Time `json:"gate_until"`
	Admitted       int64                `json:"admitted"`
	WaitedMS       float64              `json:"waited_ms_total"`
	Waiting        int                  `json:"waiting"`
}

func scrapeVars(t *testing.T) vars {
	t.Helper()
	var all map[string]json.RawMessage
	if err := json.Unmarshal(getBody(t, "/debug/vars"), &all); err != nil {
		t.Fatal(err)
	}
	if _, ok := all["memstats"]; !ok {
		t.Error("/debug/vars lacks the standard memstats")
	}
	var v vars
	if err := json.Unmarshal(all["throttle"], &v); err != nil {
		t.Fatalf("throttle var: %v\n%s", err, all["throttle"])
	}
	return v
}

// TestCountersMatchTheServer: the hooks counted every answer the server
// gave to a page, by status class, and apart from them every robots.txt
// fetch (4 404s, no 4xx among the requests for them), and every backoff
// signal, by scope.
func TestCountersMatchTheServer(t *testing.T) {
	res := runOnce(t)
	v := scrapeVars(t)
	want := map[string]int64{}
	var total int64
	for _, statuses := range res.Statuses {
		for status, n := range statuses {
			want[class(status, nil)] += int64(n)
			total += int64(n)
		}
	}
	for c, n := range want {
		if v.Requests[c] != n {
			t.Errorf("requests[%s] = %d, the server answered %d", c, v.Requests[c], n)
		}
	}
	if len(v.Requests) != len(want) {
		t.Errorf("requests = %v, want classes %v", v.Requests, want)
	}
	if v.Admitted != total || total != int64(len(hosts)*pagesPerHost) {
		t.Errorf("admitted = %d, the server saw %d pages, the crawl asked for %d", v.Admitted, total, len(hosts)*pagesPerHost)
	}
	wantRobots := map[string]int64{}
	for _, statuses := range res.Robots {
		for status, n := range statuses {
			wantRobots[class(status, nil)] += int64(n)
		}
	}
	if len(v.RobotsTxt) != 1 || v.RobotsTxt["4xx"] != int64(len(hosts)) || wantRobots["4xx"] != int64(len(hosts)) {
		t.Errorf("robots_txt = %v, the server answered %v, want one 404 per host", v.RobotsTxt, wantRobots)
	}
	if v.WaitedMS <= 0 {
		t.Errorf("waited_ms_total = %v: callers queued at once must have waited", v.WaitedMS)
	}
	wantSignals := map[string]int64{"busy.example": 2, "flaky.example": 2}
	if len(v.BackoffSignals) != len(wantSignals) {
		t.Errorf("backoff_signals = %v, want %v", v.BackoffSignals, wantSignals)
	}
	for h, n := range wantSignals {
		if v.BackoffSignals[h] != n {
			t.Errorf("backoff_signals[%s] = %d, want %d", h, v.BackoffSignals[h], n)
		}
	}
	if v.Waiting != 0 {
		t.Errorf("waiting = %d after the crawl", v.Waiting)
	}
}

// TestDelayAndGates: DelayChanged left each backed-off scope's raised
// delay; GateSet counted busy.example's two Retry-After answers.
func TestDelayAndGates(t *testing.T) {
	runOnce(t)
	v := scrapeVars(t)
	for _, h := range []string{"busy.example", "flaky.example"} {
		if d, ok := v.DelayMS[h]; !ok || d <= float64(delay/time.Millisecond) {
			t.Errorf("delay_ms[%s] = %v (present %v), want above the configured %v", h, d, ok, delay)
		}
		if v.Concurrency[h] != 1 {
			t.Errorf("concurrency[%s] = %d, want 1", h, v.Concurrency[h])
		}
	}
	for _, h := range []string{"shop.example", "news.example"} {
		if d, ok := v.DelayMS[h]; ok {
			t.Errorf("delay_ms[%s] = %v: its delay never changed", h, d)
		}
	}
	if v.Gates["busy.example"] != 2 || len(v.Gates) != 1 {
		t.Errorf("gates = %v, want busy.example: 2", v.Gates)
	}
	if v.GateUntil["busy.example"].IsZero() {
		t.Errorf("gate_until = %v", v.GateUntil)
	}
}

// TestStatusPage: the same mux serves the manager's status page.
func TestStatusPage(t *testing.T) {
	res := runOnce(t)
	var doc struct {
		Totals struct {
			Requests int `json:"requests"`
			Robots   int `json:"robots_txt"`
		} `json:"totals"`
		TopBackoff []struct {
			Key string `json:"key"`
		} `json:"top_backoff"`
	}
	if err := json.Unmarshal(getBody(t, "/status?format=json"), &doc); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, statuses := range res.Statuses {
		for _, n := range statuses {
			total += n
		}
	}
	if doc.Totals.Requests != total {
		t.Errorf("status totals.requests = %d, want %d pages", doc.Totals.Requests, total)
	}
	if doc.Totals.Robots != len(hosts) {
		t.Errorf("status totals.robots_txt = %d, want %d", doc.Totals.Robots, len(hosts))
	}
	var keys []string
	for _, s := range doc.TopBackoff {
		keys = append(keys, s.Key)
	}
	if strings.Join(keys, " ") != "busy.example flaky.example" && strings.Join(keys, " ") != "flaky.example busy.example" {
		t.Errorf("scopes in backoff: %v, want busy.example and flaky.example", keys)
	}
	if page := string(getBody(t, "/status")); !strings.Contains(page, `<td class="key">busy.example</td>`) {
		t.Errorf("status page lacks busy.example:\n%s", page)
	}
}

// TestLabelsAreBounded: a host outside the known set shares "other".
func TestLabelsAreBounded(t *testing.T) {
	if got := label("x1234.linkfarm.example"); got != "other" {
		t.Errorf("label = %q, want other", got)
	}
	if got := label("shop.example"); got != "shop.example" {
		t.Errorf("label = %q", got)
	}
}
