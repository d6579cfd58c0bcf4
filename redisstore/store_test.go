package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/storetest"
	"github.com/redis/go-redis/v9"
)

var prefixes atomic.Int64

// newStore returns a store on srv under a prefix of its own, closed with
// the test.
func newStore(t testing.TB, srv *redistest.Server, opts redisstore.Options) (*redisstore.Store, *redis.Client) {
	t.Helper()
	client := redisstore.NewClient(&redis.Options{Addr: srv.Addr()})
	if opts.Prefix == "" {
		opts.Prefix = "t" + strconv.FormatInt(prefixes.Add(1), 10) + ":"
	}
	s, err := redisstore.New(client, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Close()
		client.Close()
	})
	return s, client
}

func TestConformance(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) throttle.Store {
		s, _ := newStore(t, srv, redisstore.Options{Clock: clock})
		return s
	})
}

func TestConformanceClusterRule(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Run(t, func(t *testing.T, clock throttle.Clock) throttle.Store {
		s, _ := newStore(t, srv, redisstore.Options{Clock: clock, Cluster: true})
		return s
	}, storetest.PartialAdmission())
}

var _ = context.Background

// awaitProgress waits for n signals on progress, failing with msg if
// none comes for within (a hang detector for tests on a real Redis).
func awaitProgress(t *testing.T, progress <-chan struct{}, n int, within time.Duration, msg string) {
	t.Helper()
	hang := time.NewTimer(within)
	defer hang.Stop()
	for range n {
		select {
		case <-progress:
		case <-hang.C:
			t.Fatal(msg)
		}
	}
}
