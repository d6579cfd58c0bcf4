package hooks_test

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/hooks"
	"github.com/crawlerkit/throttle/throttletest"
)

// Count the 429s per scope from the Backoff hook. The hook runs on the
// goroutines of the callers that release permits, several at once in a
// real crawl, so the counts are under a mutex. Here one caller fetches
// four pages of each of two hosts, in fake time: a.example refuses every
// other request with a 429, b.example never does.
func ExampleHooks() {
	var (
		mu      sync.Mutex
		refused = map[string]int{} // 429s by scope
	)
	cfg := throttle.DefaultConfig()
	cfg.Hooks = hooks.Hooks{
		Backoff: func(e hooks.Backoff) {
			if e.Status != http.StatusTooManyRequests || e.Robots {
				return // a 503, a timeout ..., or the manager's robots.txt fetch
			}
			mu.Lock()
			refused[e.Scope]++
			mu.Unlock()
		},
	}

	clock := throttletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg.Clock = clock          // fake time: the example does not wait for the delays
	cfg.Robots.Enabled = false // no robots.txt fetch in this example
	m, err := throttle.New(cfg)
	if err != nil {
		panic(err)
	}
	fetch := func(url string, status int) {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		for {
			p, adm, err := m.TryAcquire(req)
			if err != nil {
				panic(err)
			}
			if p != nil {
				p.Release(throttletest.Response(req, status, ""), nil) // the Backoff hook runs here
				return
			}
			clock.Set(adm.At) // the scope's turn, at once in fake time
		}
	}
	for i := range 4 {
		status := http.StatusOK
		if i%2 == 1 {
			status = http.StatusTooManyRequests
		}
		fetch("https://a.example/page", status)
		fetch("https://b.example/page", http.StatusOK)
	}

	mu.Lock()
	defer mu.Unlock()
	fmt.Println("a.example:", refused["a.example"])
	fmt.Println("b.example:", refused["b.example"])
	// Output:
	// a.example: 2
	// b.example: 0
}
