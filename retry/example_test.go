package retry_test

import (
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/retry"
	"github.com/crawlerkit/throttle/throttletest"
)

// A server answers 429 with Retry-After: 3, then 200. The retry is sent
// as soon as the throttle's gate lets it, 3 s after the 429: the wait
// happens once, in the throttle. A fake clock makes the times exact.
func Example() {
	clock := throttletest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := throttle.DefaultConfig()
	cfg.Clock = clock
	cfg.Robots.Enabled = false // no robots.txt fetch in this example
	m, err := throttle.New(cfg)
	if err != nil {
		panic(err)
	}
	t0 := clock.Now()
	n := 0
	server := throttletest.RoundTripFunc(func(req *http.Request) (*http.Response, error) {
		n++
		if n == 1 {
			fmt.Println(clock.Now().Sub(t0), "429 Retry-After: 3")
			return throttletest.Response(req, 429, "slow down", "Retry-After", "3"), nil
		}
		fmt.Println(clock.Now().Sub(t0), "200")
		return throttletest.Response(req, 200, "hello"), nil
	})
	client := &http.Client{Transport: &retry.Transport{
		Next:     m.Transport(server), // the throttle admits each attempt
		Attempts: 3,                   // the first and up to two retries
	}}

	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, err := client.Get("https://example.com/")
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println("got", resp.StatusCode, string(body))
	}()
	clock.BlockUntilTimers(1) // the retry waits for the gate ...
	clock.AdvanceToNext()     // ... until the fake clock reaches it
	<-done
	// Output:
	// 0s 429 Retry-After: 3
	// 3s 200
	// got 200 hello
}
