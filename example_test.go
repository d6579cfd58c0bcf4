package throttle_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/throttletest"
)

// Wrap a client's transport: every request waits for its host's turn.
func Example_transport() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	cfg := throttle.DefaultConfig()
	cfg.Default.Delay = 10 * time.Millisecond // keep the example quick
	cfg.Default.SlotDelay = 0
	m, err := throttle.New(cfg)
	if err != nil {
		panic(err)
	}
	client := &http.Client{Transport: m.Transport(http.DefaultTransport)}
	for range 3 {
		resp, err := client.Get(srv.URL)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body) // reading to EOF releases the slot
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 hello
	// 200 hello
	// 200 hello
}

// Acquire and release by hand around any client. The fake clock makes
// the times exact: Concurrency 2, Delay 300ms, SlotDelay 1s.
func ExampleThrottlingManager_Acquire() {
	clock := throttletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Default.Concurrency = 2
	cfg.Default.Delay = 300 * time.Millisecond
	cfg.Default.SlotDelay = time.Second
	cfg.Default.Jitter = throttle.Jitter{} // exact times
	cfg.Robots.Enabled = false             // no robots.txt fetch in this example
	m, _ := throttle.New(cfg)

	t0 := clock.Now()
	starts := make(chan time.Duration, 3)
	for range 3 {
		go func() {
			req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)
			p, err := m.Acquire(context.Background(), req)
			if err != nil {
				panic(err)
			}
			started := clock.Now().Sub(t0)
			p.Release(&http.Response{StatusCode: 200}, nil) // a quick response
			starts <- started                               // released: the clock may move on
		}()
	}
	fmt.Println(<-starts) // the first starts at once
	for range 2 {
		clock.BlockUntilTimers(1) // the next one waits for a timer ...
		clock.AdvanceToNext()     // ... until the fake clock reaches it
		fmt.Println(<-starts)
	}
	// Output:
	// 0s
	// 300ms
	// 1s
}

// TryAcquire never blocks: a crawler with many hosts asks when a request
// could start and keeps a ready-time queue.
func ExampleThrottlingManager_TryAcquire() {
	clock := throttletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Default.Delay = 2 * time.Second
	cfg.Default.Jitter = throttle.Jitter{}
	m, _ := throttle.New(cfg)

	req, _ := http.NewRequest(http.MethodGet, "https://example.com/a", nil)
	p, _, _ := m.TryAcquire(req)
	p.Release(&http.Response{StatusCode: 200}, nil)

	next, _ := http.NewRequest(http.MethodGet, "https://example.com/b", nil)
	p, when, _ := m.TryAcquire(next)
	fmt.Println(p == nil, when.Reason, when.At.Sub(clock.Now()))
	// Output: true delay 2s
}

// A ReadyQueue gives a pool of workers the request that can start soonest:
// a slow host's backlog, pushed first, holds no other host up. Workers
// block in Pop; here TryPop and a fake clock show the order and the times.
func ExampleReadyQueue() {
	clock := throttletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Default.Delay, cfg.Default.SlotDelay, cfg.Default.Jitter = time.Second, 0, throttle.Jitter{}
	cfg.Robots.Enabled = false // no robots.txt fetch in this example
	m, _ := throttle.New(cfg)
	q := throttle.NewReadyQueue(m)

	push := func(u string, priority int) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if err := q.Push(req, priority); err != nil {
			panic(err)
		}
	}
	push("https://slow.example/1", 0)
	push("https://slow.example/2", 0)
	push("https://slow.example/3", 0)
	push("https://a.example/", 0)
	push("https://b.example/", 0)
	push("https://slow.example/urgent", 1) // first among what can start at once

	t0 := clock.Now()
	for q.Len() > 0 {
		req, p, at, err := q.TryPop()
		if err != nil {
			panic(err)
		}
		if req == nil {
			clock.Set(at) // nothing can start before at: Pop would wait
			continue
		}
		fmt.Println(clock.Now().Sub(t0), req.URL)
		p.Release(&http.Response{StatusCode: 200}, nil) // after the fetch
	}
	// Output:
	// 0s https://slow.example/urgent
	// 0s https://a.example/
	// 0s https://b.example/
	// 1s https://slow.example/1
	// 2s https://slow.example/2
	// 3s https://slow.example/3
}

// Per-scope settings, and the error New gives for a bad one.
func ExampleNew() {
	cfg := throttle.DefaultConfig()
	api := cfg.Default // start from the defaults, change what differs
	api.Concurrency = 8
	api.Delay = 0
	cfg.Scopes = map[string]throttle.ScopeConfig{"api.example.com": api}
	if _, err := throttle.New(cfg); err != nil {
		panic(err)
	}

	api.Delay = -time.Second
	cfg.Scopes["api.example.com"] = api
	_, err := throttle.New(cfg)
	fmt.Println(err)
	var ce *throttle.ConfigError
	fmt.Println(errors.As(err, &ce), ce.Field)
	// Output:
	// throttle: config Scopes["api.example.com"].Delay = -1s: must be >= 0
	// true Scopes["api.example.com"].Delay
}

// A request may be throttled by several scopes: here a paid API's host and
// its credits, with the request's cost.
func ExampleWithScopes() {
	cfg := throttle.DefaultConfig()
	credits := cfg.Default
	credits.Delay, credits.SlotDelay, credits.Concurrency = 0, 0, 100
	credits.Quota = 100 // credits per Window (60s)
	cfg.Scopes = map[string]throttle.ScopeConfig{"credits": credits}
	cfg.Robots.Enabled = false // no robots.txt fetch in this example
	m, _ := throttle.New(cfg)

	ctx := throttle.WithScopes(context.Background(),
		throttle.Scope{Key: "api.example.com"}, throttle.Scope{Key: "credits", Cost: 25})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.example.com/v1/scrape", nil)
	p, err := m.Acquire(ctx, req)
	if err != nil {
		panic(err)
	}
	fmt.Println(p.Scopes())
	p.Release(&http.Response{StatusCode: 200}, nil)
	// Output: [api.example.com credits]
}

// Pattern rules are a few lines of ScopeConfigFunc: here every subdomain of
// example.com gets 4 slots and no delay, others the defaults.
func ExampleConfig_scopeConfigFunc() {
	cfg := throttle.DefaultConfig()
	cfg.ScopeConfigFunc = func(scope string, def throttle.ScopeConfig) (throttle.ScopeConfig, bool) {
		if !strings.HasSuffix(scope, ".example.com") {
			return def, false // the defaults
		}
		def.Concurrency, def.Delay, def.SlotDelay = 4, 0, 0
		return def, true
	}
	m, _ := throttle.New(cfg)

	var held []*throttle.Permit
	for _, u := range []string{"https://a.example.com/", "https://a.example.com/", "https://other.org/", "https://other.org/"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		p, when, _ := m.TryAcquire(req)
		if p != nil {
			held = append(held, p)
		}
		fmt.Println(u, p != nil, when.Reason)
	}
	for _, p := range held {
		p.Release(nil, nil)
	}
	// Output:
	// https://a.example.com/ true none
	// https://a.example.com/ true none
	// https://other.org/ true none
	// https://other.org/ false concurrency
}

// Servers on several ports of one host are one scope by default
// (HostScope drops the port); HostPortScope keeps them apart.
func ExampleHostPortScope() {
	cfg := throttle.DefaultConfig()
	cfg.Scoper = throttle.HostPortScope // e.g. local test servers on 127.0.0.1
	for _, u := range []string{"http://127.0.0.1:8081/", "http://127.0.0.1:8082/", "https://example.com/"} {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		byHost, _ := throttle.HostScope(req)
		byPort, _ := cfg.Scoper(req)
		fmt.Println(byHost[0].Key, byPort[0].Key)
	}
	// Output:
	// 127.0.0.1 127.0.0.1:8081
	// 127.0.0.1 127.0.0.1:8082
	// example.com example.com:443
}
