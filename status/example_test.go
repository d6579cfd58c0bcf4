package status_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/status"
)

// Mount the status page on an operators' mux and read its JSON.
func ExampleHandler() {
	cfg := throttle.DefaultConfig()
	cfg.Robots.Enabled = false // no robots.txt fetch in this example
	m, err := throttle.New(cfg)
	if err != nil {
		panic(err)
	}
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)
	p, err := m.Acquire(context.Background(), req)
	if err != nil {
		panic(err)
	}
	p.Release(&http.Response{StatusCode: 200, Header: http.Header{}}, nil)

	mux := http.NewServeMux()
	mux.Handle("/debug/throttle", status.Handler(m))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/throttle?format=json", nil))
	type scope struct {
		Key    string `json:"key"`
		Why    string `json:"why"`
		Counts struct {
			Requests uint64 `json:"requests"`
		} `json:"counts"`
	}
	var doc struct {
		Scopes     int     `json:"scopes"`
		TopWaiting []scope `json:"top_waiting"` // only scopes with callers waiting
		TopBusy    []scope `json:"top_busy"`    // every scope, busiest first
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		panic(err)
	}
	fmt.Println(rec.Code, rec.Header().Get("Content-Type"))
	fmt.Println("scopes:", doc.Scopes, "with callers waiting:", len(doc.TopWaiting))
	for _, s := range doc.TopBusy {
		fmt.Printf("%s: %d request, waits for the %s\n", s.Key, s.Counts.Requests, s.Why)
	}
	// Output:
	// 200 application/json; charset=utf-8
	// scopes: 1 with callers waiting: 0
	// example.com: 1 request, waits for the delay
}
