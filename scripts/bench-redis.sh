#!/usr/bin/env bash
# Runs the Redis benchmarks of redisstore (each on a redis-server of its
# own, on loopback) and prints the throttle's Acquire+Release pairs per
# second against github.com/go-redis/redis_rate's Allow from the same run,
# at 1 and 50 goroutines: the medians of the rounds, and their ratio.
#
# The test binary is built once and run count times, each round running
# every benchmark once (go test -count would run each benchmark count
# times in a row): a burst of load on the machine then slows one round of
# every benchmark rather than every round of one. The raw lines are
# benchstat's input format.
#
# Usage: scripts/bench-redis.sh [count]   (default 5; BENCHTIME, default 2s)
set -euo pipefail
cd "$(dirname "$0")/../redisstore"
count=${1:-5}
benchtime=${BENCHTIME:-2s}
bench='^BenchmarkRedis(AcquireRelease|StoreAdmitRelease|RateAllow|BaselineEvalsha)(1|50)$'
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/redisstore.test" .
for ((i = 1; i <= count; i++)); do
  "$dir/redisstore.test" -test.run='^$' -test.bench="$bench" -test.benchtime="$benchtime" -test.count=1 |
    grep -E '^Benchmark' | tee -a "$dir/out"
done
echo
awk '
function median(name,    k, i, j, t, a) {
  k = n[name]
  if (k == 0) return 0
  for (i = 1; i <= k; i++) a[i] = v[name, i]
  for (i = 2; i <= k; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
  return k % 2 ? a[(k+1)/2] : (a[k/2] + a[k/2+1]) / 2
}
{
  name = $1; sub(/-[0-9]+$/, "", name); sub(/^BenchmarkRedis/, "", name)
  for (i = 2; i < NF; i++) if ($(i+1) ~ /^(pairs|allows|evals)\/s$/) v[name, ++n[name]] = $i
}
END {
  printf "per round, ours/redis_rate (Acquire+Release pairs against Allows, same round)\n"
  for (g = 1; g <= 50; g += 49) {
    printf "%-10d", g
    for (i = 1; i <= n["RateAllow" g]; i++) printf " %.2fx", v["RateAllow" g, i] ? v["AcquireRelease" g, i] / v["RateAllow" g, i] : 0
    printf "\n"
  }
  printf "\n"
  printf "median of %d rounds, per second\n", n["RateAllow1"]
  printf "%-10s %12s %12s %12s %12s %16s\n", "goroutines", "Acquire+Rel", "store A+R", "redis_rate", "EVALSHA", "ours/redis_rate"
  for (g = 1; g <= 50; g += 49) {
    ours = median("AcquireRelease" g); theirs = median("RateAllow" g)
    printf "%-10d %12.0f %12.0f %12.0f %12.0f %15.2fx\n", g, ours, median("StoreAdmitRelease" g), theirs,
      median("BaselineEvalsha" g), theirs ? ours / theirs : 0
  }
}' "$dir/out"
