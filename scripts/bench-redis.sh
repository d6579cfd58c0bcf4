#!/usr/bin/env bash
# Runs the Redis benchmarks (each on a redis-server of its own, on
# loopback) with -count and prints Acquire+Release pairs per second
# against a trivial EVALSHA's rate from the same run.
# Usage: scripts/bench-redis.sh [count]
set -euo pipefail
cd "$(dirname "$0")/../redisstore"
count=${1:-3}
out=$(go test -run='^$' -bench=. -benchtime=3s -count="$count" .)
echo "$out" | grep -E '^Benchmark'
echo
echo "$out" | awk '
/^Benchmark/ {
  name=$1; sub(/-[0-9]+$/, "", name)
  for (i=2; i<=NF; i++) if ($(i+1)=="pairs/s" || $(i+1)=="evals/s") { r[name]+=$i; n[name]++ }
}
END {
  for (g=1; g<=50; g+=49) {
    p=r["BenchmarkRedisAcquireRelease" g]/n["BenchmarkRedisAcquireRelease" g]
    e=r["BenchmarkRedisBaselineEvalsha" g]/n["BenchmarkRedisBaselineEvalsha" g]
    printf "%2d goroutine(s): %7.0f pairs/s, trivial EVALSHA %7.0f/s: %.0f %%\n", g, p, e, 100*p/e
  }
}'
