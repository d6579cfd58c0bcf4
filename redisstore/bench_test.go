package redisstore_test

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/crawlerkit/throttle"
	"github.com/crawlerkit/throttle/redisstore"
	"github.com/crawlerkit/throttle/redisstore/redistest"
	"github.com/crawlerkit/throttle/store"
	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// The benchmarks run on a redis-server of their own on loopback. Compare
// each with its peers from the same run: scripts/bench-redis.sh runs them
// together and prints the ratios.
//
// Every benchmark spreads its goroutines the same way: goroutine i works
// on key i alone (host i, scope i, rate-limit key i), so no goroutine
// waits for another's limit and what is measured is the cost of a call
// on an uncontended key, one key per caller as a crawler's workers on
// different sites.

// benchCalls runs op from goroutines goroutines, op(i) on goroutine i's
// key, and reports the rate as unit, and what the calls cost: the CPU time
// of Redis (INFO cpu) and of this process (getrusage) per op, and Redis's
// time per script (INFO commandstats). On a machine with few CPUs, where
// client and Redis share them, the two CPU times say who ran out.
func benchCalls(b *testing.B, goroutines int, unit string, client *redis.Client, op func(i int) error) {
	b.Helper()
	ctx := context.Background()
	client.ConfigResetStat(ctx)
	redis0, self0 := redisCPU(client), selfCPU()
	b.ResetTimer()
	if goroutines == 1 { // RunParallel would start GOMAXPROCS goroutines
		for b.Loop() {
			if err := op(0); err != nil {
				b.Fatal(err)
			}
		}
	} else {
		var next atomic.Int64
		b.SetParallelism(max(1, goroutines/max(1, runtimeProcs())))
		b.RunParallel(func(pb *testing.PB) {
			i := int(next.Add(1)-1) % goroutines
			for pb.Next() {
				if err := op(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), unit)
	b.ReportMetric(float64((selfCPU()-self0).Microseconds())/n, "client-cpu-µs/op")
	b.ReportMetric(float64((redisCPU(client)-redis0).Microseconds())/n, "redis-cpu-µs/op")
	reportRedisStats(b, client, n)
}

// selfCPU is this process's CPU time so far, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// redisCPU is Redis's CPU time so far, user and system (INFO cpu).
func redisCPU(client *redis.Client) time.Duration {
	info, err := client.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return time.Duration(sum * float64(time.Second))
}

func benchAcquireRelease(b *testing.B, goroutines int) {
	srv := redistest.Start(b)
	s, client := newStore(b, srv, redisstore.Options{})
	// GlobalConcurrency (default 16) would hold 34 of the 50 goroutines
	// in the manager: a crawler with 50 workers raises it to 50.
	m := sharedManager(b, s, nil, func(c *throttle.Config) { c.GlobalConcurrency = max(c.GlobalConcurrency, goroutines) })
	reqs := make([]*http.Request, goroutines)
	for i := range reqs {
		reqs[i] = req(b, fmt.Sprintf("host%d.test", i))
	}
	ok := &http.Response{StatusCode: 200}
	ctx := context.Background()
	benchCalls(b, goroutines, "pairs/s", client, func(i int) error {
		p, err := m.Acquire(ctx, reqs[i])
		if err != nil {
			return err
		}
		p.Release(ok, nil)
		return nil
	})
}

// benchStore is benchAcquireRelease on the bare store: an Admit and a
// Release of one scope, nothing learned, without the manager's policies.
func benchStore(b *testing.B, goroutines int) {
	srv := redistest.Start(b)
	s, client := newStore(b, srv, redisstore.Options{})
	keys := make([]string, goroutines)
	for i := range keys {
		keys[i] = fmt.Sprintf("host%d.test", i)
	}
	var lease atomic.Int64
	ctx := context.Background()
	benchCalls(b, goroutines, "pairs/s", client, func(i int) error {
		l := "b" + strconv.FormatInt(lease.Add(1), 36)
		ans, err := s.Admit(ctx, &store.Request{Lease: l, Scopes: []store.Scope{{Key: keys[i], Cost: 1, Concurrency: 1, Jitter: 1}}})
		if err != nil {
			return err
		}
		if !ans.Admitted {
			return fmt.Errorf("refused: %v", ans.Reason)
		}
		_, err = s.Release(ctx, &store.Release{Lease: l, Scopes: []store.ReleaseScope{{Key: keys[i], Ticket: ans.Tickets[0], QuotaFloor: -1}}})
		return err
	})
}

// benchRedisRate calls redis_rate's Allow (one GCRA script, one round
// trip) with a limit it never reaches, through a client made the same way
// as the store's (redisstore.NewClient: same pool size and timeouts).
func benchRedisRate(b *testing.B, goroutines int) {
	srv := redistest.Start(b)
	client := redisstore.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	limiter := redis_rate.NewLimiter(client)
	limit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	keys := make([]string, goroutines)
	for i := range keys {
		keys[i] = fmt.Sprintf("host%d.test", i)
	}
	ctx := context.Background()
	if _, err := limiter.Allow(ctx, keys[0], limit); err != nil { // loads the script
		b.Fatal(err)
	}
	benchCalls(b, goroutines, "allows/s", client, func(i int) error {
		res, err := limiter.Allow(ctx, keys[i], limit)
		if err != nil {
			return err
		}
		if res.Allowed != 1 {
			return fmt.Errorf("redis_rate refused (retry after %v)", res.RetryAfter)
		}
		return nil
	})
}

// reportRedisStats reports how long Redis spent running each script (INFO
// commandstats: wall time inside Redis, so a Redis that shares its CPU
// with the client counts the time it was descheduled too) and how many
// reads from its clients it made per op (INFO stats): fewer than the
// scripts per op when pipelines carry several.
func reportRedisStats(b *testing.B, client *redis.Client, ops float64) {
	ctx := context.Background()
	if info, err := client.Info(ctx, "commandstats").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			stats, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
			if !ok {
				continue
			}
			for _, kv := range strings.Split(stats, ",") {
				if v, ok := strings.CutPrefix(kv, "usec_per_call="); ok {
					if f, err := strconv.ParseFloat(v, 64); err == nil {
						b.ReportMetric(f, "redis-µs/script")
					}
				}
			}
		}
	}
	if info, err := client.Info(ctx, "stats").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_reads_processed:"); ok {
				if f, err := strconv.ParseFloat(v, 64); err == nil {
					b.ReportMetric(f/ops, "redis-reads/op")
				}
			}
		}
	}
}

func benchBaseline(b *testing.B, goroutines int) {
	srv := redistest.Start(b)
	client := redisstore.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	trivial := redis.NewScript("return 1")
	ctx := context.Background()
	if err := trivial.Load(ctx, client).Err(); err != nil {
		b.Fatal(err)
	}
	benchCalls(b, goroutines, "evals/s", client, func(int) error {
		return trivial.EvalSha(ctx, client, nil).Err()
	})
}

// BenchmarkRedisAcquireRelease1: Acquire+Release pairs from one goroutine,
// each an admission and a release script.
func BenchmarkRedisAcquireRelease1(b *testing.B) { benchAcquireRelease(b, 1) }

// BenchmarkRedisAcquireRelease50: 50 goroutines, each on its own host.
func BenchmarkRedisAcquireRelease50(b *testing.B) { benchAcquireRelease(b, 50) }

// BenchmarkRedisStoreAdmitRelease1: the store's Admit+Release alone, one
// goroutine: the manager's share is AcquireRelease1's time minus this.
func BenchmarkRedisStoreAdmitRelease1(b *testing.B) { benchStore(b, 1) }

// BenchmarkRedisStoreAdmitRelease50: the same from 50 goroutines.
func BenchmarkRedisStoreAdmitRelease50(b *testing.B) { benchStore(b, 50) }

// BenchmarkRedisRateAllow1: github.com/go-redis/redis_rate's Allow, one
// goroutine: a peer's one-script admission, never refused.
func BenchmarkRedisRateAllow1(b *testing.B) { benchRedisRate(b, 1) }

// BenchmarkRedisRateAllow50: the same from 50 goroutines, each on its own
// key.
func BenchmarkRedisRateAllow50(b *testing.B) { benchRedisRate(b, 50) }

// BenchmarkRedisBaselineEvalsha1: EVALSHA of "return 1", one goroutine:
// a lower bound on one round trip.
func BenchmarkRedisBaselineEvalsha1(b *testing.B) { benchBaseline(b, 1) }

// BenchmarkRedisBaselineEvalsha50: the same from 50 goroutines.
func BenchmarkRedisBaselineEvalsha50(b *testing.B) { benchBaseline(b, 50) }
