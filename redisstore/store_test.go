package redisstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

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
