package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/redis/go-redis/v9"
)

// runWorker is one worker process: it crawls both sites from
// o.goroutines goroutines per site, as fast as its throttle allows, for
// o.duration. With o.shared its throttle keeps its state in the Redis
// store at o.redis under o.prefix, shared with the other workers;
// otherwise in its own memory.
func runWorker(ctx context.Context, o options) error {
	cfg := throttle.DefaultConfig()
	cfg.Scopes = scopeConfigs()
	cfg.Robots.Enabled = false // the simulated sites have no robots.txt
	if o.shared {
		rdb := redisstore.NewClient(&redis.Options{Addr: o.redis})
		defer rdb.Close()
		// Timeout 5s, not the default 1s: the test runs four of these
		// under the race detector on small CI machines, where a call to
		// Redis can stall for a second; a crawler would keep the default
		// and failing closed (or StoreFallbackLocal) on such a hiccup.
		store, err := redisstore.New(rdb, redisstore.Options{Prefix: o.prefix, Timeout: 5 * time.Second})
		if err != nil {
			return err
		}
		defer store.Close()
		cfg.Store = store
	}
	m, err := throttle.New(cfg)
	if err != nil {
		return err
	}
	// Every host name resolves to the local server of the sites.
	var d net.Dialer
	base := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, o.target)
		},
		MaxIdleConnsPerHost: 2 * o.goroutines,
	}
	defer base.CloseIdleConnections()
	client := &http.Client{Transport: m.Transport(base)}

	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for _, host := range hosts {
		for g := range o.goroutines {
			wg.Go(func() {
				for i := 0; ; i++ {
					url := fmt.Sprintf("http://%s/w%d/g%d/page-%d", host, o.id, g, i)
					if err := get(ctx, client, url); err != nil {
						// The crawl's end: the context ended, or Acquire
						// saw that the next start falls after it.
						if ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
						return
					}
				}
			})
		}
	}
	wg.Wait()
	return errors.Join(errs...)
}

// get fetches url through the throttled client; a 429 is no error (the
// throttle backs off on it), the crawl goes on with the next page.
func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body) // the permit is released at EOF
	return err
}
