package redisstore_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/stretchr/testify/require"
)

// TestKillLoopFreesSlots: five times, a worker process takes every slot of
// a scope and is killed with SIGKILL; each time its leases expire within
// the lease time of the kill (Redis time), and the slots are free again
// (no assertion on how soon this process notices: that is its clock's).
func TestKillLoopFreesSlots(t *testing.T) {
	t.Parallel() // waits, mostly
	const (
		conc     = 2
		leaseTTL = 500 * time.Millisecond
		rounds   = 5
	)
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	store, rdb := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL})
	m := fleetManager(t, store, conc, 0, nil)
	worst := time.Duration(0)
	for i := range rounds {
		url := fmt.Sprintf("http://kill%d.test/", i%2)
		w := startWorker(t, workerSpec{Mode: "hold", Addr: srv.Addr(), Prefix: prefix, URL: url, Concurrency: conc, LeaseTTL: leaseTTL})
		w.waitLine(t, "held", 30*time.Second)
		refused(t, m, url, throttle.ReasonConcurrency)
		require.NoError(t, w.cmd.Process.Kill())
		_ = w.wait(t, 10*time.Second)
		killed := time.Now()
		expiry := deadLeases(t, rdb, store, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"), conc, leaseTTL)
		var ps []*throttle.Permit
		for range conc {
			ps = append(ps, acquireWithin(t, m, url, leaseTTL+10*time.Second))
		}
		worst = max(worst, time.Since(killed))
		require.False(t, ps[0].Acquired().Before(expiry), "round %d: admitted before the dead worker's lease expired", i)
		for _, p := range ps {
			p.Release(nil, nil)
		}
	}
	t.Logf("%d workers killed holding %d slots each: leases expiring within LeaseTTL (%v) of the kill; every slot free again, the latest %v after a kill",
		rounds, conc, leaseTTL, worst.Round(time.Millisecond))
}

// TestRedisTenRestarts: three managers with two goroutines each crawl two
// scopes while redis-server is restarted ten times, with and without its
// data. Acquire may fail while Redis is down (failing closed); it never hangs,
// the crawl goes on after each restart, and afterwards every scope admits
// its full concurrency again within the lease time: no permit lost.
func TestRedisTenRestarts(t *testing.T) {
	const (
		conc     = 2
		leaseTTL = 2 * time.Second
		restarts = 10
	)
	srv := redistest.Start(t)
	prefix := uniquePrefix()
	var ms []*throttle.ThrottlingManager
	for range 3 {
		s, _ := dialStore(t, srv.Addr(), redisstore.Options{Prefix: prefix, LeaseTTL: leaseTTL, Timeout: 300 * time.Millisecond})
		ms = append(ms, fleetManager(t, s, conc, time.Millisecond, func(c *throttle.Config) {
			c.Logger = slog.New(slog.DiscardHandler)
		}))
	}
	urls := []string{"http://r1.test/", "http://r2.test/"}
	var mu sync.Mutex
	up := make(chan struct{}) // closed when Redis is up again; replaced at each restart
	close(up)
	current := func() chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		return up
	}
	progress := make(chan struct{}, 4096)
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for i, m := range ms {
		for g := range 2 {
			url := urls[(i+g)%2]
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					wait := current()
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					p, err := m.Acquire(ctx, getReq(t, url))
					cancel()
					if err != nil {
						failed.Add(1)
						select { // Redis is down: wait for it, not in a busy loop
						case <-wait:
						case <-stop:
							return
						}
						select {
						case <-current():
						case <-stop:
							return
						}
						continue
					}
					p.Release(&http.Response{StatusCode: http.StatusOK, Header: http.Header{}}, nil)
					ok.Add(1)
					select {
					case progress <- struct{}{}:
					default:
					}
				}
			})
		}
	}
	waitProgress := func(n int) {
		t.Helper()
		awaitProgress(t, progress, n, 15*time.Second, "no progress for 15s after restart (hang detector)")
	}
	waitProgress(20)
	for i := range restarts {
		mu.Lock()
		up = make(chan struct{})
		mu.Unlock()
		require.NoError(t, srv.Restart(i%2 == 0))
		mu.Lock()
		close(up)
		mu.Unlock()
		for len(progress) > 0 {
			<-progress
		}
		waitProgress(20)
	}
	close(stop)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("workers did not stop: a deadlock")
	}
	// No permit lost: a lease whose release failed during a restart
	// expires within LeaseTTL; then each scope admits conc, no more.
	for _, url := range urls {
		var ps []*throttle.Permit
		for i := range conc {
			ps = append(ps, acquireWithin(t, ms[i], url, leaseTTL+2*time.Second))
		}
		refused(t, ms[2], url, throttle.ReasonConcurrency)
		for _, p := range ps {
			p.Release(nil, nil)
		}
	}
	t.Logf("%d restarts of redis-server (data kept on even ones): %d admissions, %d Acquires failed while it was down, no hang, every slot free again",
		restarts, ok.Load(), failed.Load())
}
