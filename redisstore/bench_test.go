package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/redis/go-redis/v9"
)

// The benchmarks run on a redis-server of their own on loopback. Compare
// each with its baseline from the same run: scripts/bench-redis.sh prints
// the ratios.

func benchAcquireRelease(b *testing.B, goroutines int) {
	srv := redistest.Start(b)
	s, client := newStore(b, srv, redisstore.Options{})
	defer reportScriptTime(b, client)
	m := sharedManager(b, s, nil, nil)
	reqs := make([]*http.Request, goroutines)
	for i := range reqs {
		reqs[i] = req(b, fmt.Sprintf("host%d.test", i))
	}
	ok := &http.Response{StatusCode: 200}
	ctx := context.Background()
	var next atomic.Int64
	client.ConfigResetStat(ctx)
	b.ResetTimer()
	if goroutines == 1 { // RunParallel would start GOMAXPROCS goroutines
		for b.Loop() {
			p, err := m.Acquire(ctx, reqs[0])
			if err != nil {
				b.Fatal(err)
			}
			p.Release(ok, nil)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
		return
	}
	b.SetParallelism(max(1, goroutines/max(1, runtimeProcs())))
	b.RunParallel(func(pb *testing.PB) {
		r := reqs[int(next.Add(1)-1)%len(reqs)]
		for pb.Next() {
			p, err := m.Acquire(ctx, r)
			if err != nil {
				b.Error(err)
				return
			}
			p.Release(ok, nil)
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// reportScriptTime reports how long Redis spent running each script
// (INFO commandstats: wall time inside Redis, so a Redis that shares its
// CPU with the client counts the time it was descheduled too).
func reportScriptTime(b *testing.B, client *redis.Client) {
	info, err := client.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, kv := range strings.Split(strings.TrimSpace(line[len("cmdstat_evalsha:"):]), ",") {
			if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					b.ReportMetric(f, "redis-µs/script")
				}
			}
		}
	}
}

func benchBaseline(b *testing.B, goroutines int) {
	srv := redistest.Start(b)
	client := redisstore.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	defer reportScriptTime(b, client)
	trivial := redis.NewScript("return 1")
	ctx := context.Background()
	if err := trivial.Load(ctx, client).Err(); err != nil {
		b.Fatal(err)
	}
	client.ConfigResetStat(ctx)
	b.ResetTimer()
	if goroutines == 1 {
		for b.Loop() {
			if err := trivial.EvalSha(ctx, client, nil).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "evals/s")
		return
	}
	b.SetParallelism(max(1, goroutines/max(1, runtimeProcs())))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := trivial.EvalSha(ctx, client, nil).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "evals/s")
}

// BenchmarkRedisAcquireRelease1: Acquire+Release pairs from one goroutine,
// each an admission and a release script.
func BenchmarkRedisAcquireRelease1(b *testing.B) { benchAcquireRelease(b, 1) }

// BenchmarkRedisAcquireRelease50: 50 goroutines, each on its own host.
func BenchmarkRedisAcquireRelease50(b *testing.B) { benchAcquireRelease(b, 50) }

// BenchmarkRedisBaselineEvalsha1: EVALSHA of "return 1", one goroutine.
func BenchmarkRedisBaselineEvalsha1(b *testing.B) { benchBaseline(b, 1) }

// BenchmarkRedisBaselineEvalsha50: the same from 50 goroutines.
func BenchmarkRedisBaselineEvalsha50(b *testing.B) { benchBaseline(b, 50) }
