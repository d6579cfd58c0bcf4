package store_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/store"
	"github.com/crawlerkit/throttle/throttletest"
)

// Two workers share one store: the host's limits hold across both, and a
// 429 with Retry-After seen by one holds back the other. With redisstore
// the workers are processes on different machines; here they share a
// Memory and a fake clock.
func ExampleMemory() {
	clock := throttletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	mem := store.NewMemory(clock)
	worker := func() *throttle.ThrottlingManager {
		cfg := throttle.DefaultConfig()
		cfg.Default.Jitter, cfg.Default.SlotDelay = throttle.Jitter{}, 0 // 1 s apart exactly
		cfg.Clock, cfg.Store = clock, mem
		cfg.Robots.Enabled = false
		m, err := throttle.New(cfg)
		if err != nil {
			panic(err)
		}
		return m
	}
	w1, w2 := worker(), worker()
	req, _ := http.NewRequest(http.MethodGet, "https://example.com/", nil)

	p, _, _ := w1.TryAcquire(req)
	_, adm, _ := w2.TryAcquire(req)
	fmt.Println("worker 2 waits for:", adm.Reason)
	p.Release(throttletest.Response(req, http.StatusOK, ""), nil)
	_, adm, _ = w2.TryAcquire(req)
	fmt.Println("then for:", adm.Reason, adm.At.Sub(clock.Now()))

	clock.Advance(time.Second)
	p, _, _ = w2.TryAcquire(req)
	p.Release(throttletest.Response(req, http.StatusTooManyRequests, "", "Retry-After", "30"), nil)
	_, adm, _ = w1.TryAcquire(req)
	fmt.Println("after worker 2's 429, worker 1 waits for:", adm.Reason, adm.At.Sub(clock.Now()))
	// Output:
	// worker 2 waits for: concurrency
	// then for: delay 1s
	// after worker 2's 429, worker 1 waits for: server gate 30s
}
