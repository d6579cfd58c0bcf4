#!/usr/bin/env bash
# Runs the overhead benchmarks with -count and prints each against its
# baseline from the same run. Usage: scripts/bench.sh [count]
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-5}
out=$(go test -run='^$' -bench='AcquireRelease|Transport|TryAcquireBusy|Baseline|MemoryPerScope' -benchtime=1s -count="$count" .)
echo "$out" | grep -E '^Benchmark'
echo
# The parallel speed-up compares the same benchmark on 1 and on 2 CPUs.
par=$(go test -run='^$' -bench='^BenchmarkAcquireReleaseParallel$' -cpu 1,2 -benchtime=1s -count="$count" .)
echo "$par" | grep -E '^Benchmark'
echo "$par" | awk '/^Benchmark/ { if ($1 ~ /-2$/) { two+=$3; n2++ } else { one+=$3; n1++ } }
END { printf "parallel speed-up, BenchmarkAcquireReleaseParallel -cpu 1 vs -cpu 2: %.2fx\n", (one/n1)/(two/n2) }'
echo
echo "$out" | awk '
/^Benchmark/ {
  name=$1; sub(/-[0-9]+$/, "", name)
  for (i=2; i<=NF; i++) if ($(i+1)=="ns/op") { ns[name]+=$i; n[name]++ }
  for (i=2; i<=NF; i++) if ($(i+1)=="B/scope") { bs[name]+=$i; nb[name]++ }
}
END {
  split("BenchmarkAcquireRelease BenchmarkAcquireReleaseParallel BenchmarkAcquireReleaseMultiScope BenchmarkTransport BenchmarkTryAcquireBusy BenchmarkBaselineRateLimiterMap BenchmarkBaselineRateLimiterMapParallel BenchmarkBaselineSemaphore", names, " ")
  for (k in names) { b=names[k]; if (n[b]) mean[b]=ns[b]/n[b] }
  base=mean["BenchmarkBaselineRateLimiterMap"]
  printf "mean ns/op over %d runs:\n", n["BenchmarkAcquireRelease"]
  for (k=1; k<=8; k++) { b=names[k]; if (b in mean) printf "  %-42s %8.1f\n", b, mean[b] }
  printf "AcquireRelease / BaselineRateLimiterMap:            %.2fx\n", mean["BenchmarkAcquireRelease"]/base
  printf "AcquireReleaseParallel / BaselineRateLimiterMapParallel: %.2fx\n", mean["BenchmarkAcquireReleaseParallel"]/mean["BenchmarkBaselineRateLimiterMapParallel"]
  if (nb["BenchmarkMemoryPerScope"]) printf "live heap per recent scope: %.0f B\n", bs["BenchmarkMemoryPerScope"]/nb["BenchmarkMemoryPerScope"]
}'
echo
# The ready-time queue over 20,000 hosts: push and pop (TryPop, with the
# TryAcquire calls it makes and the permit's release) per op.
rq=$(go test -run='^$' -bench='^BenchmarkReadyQueue$' -benchtime=1s -count="$count" .)
echo "$rq" | grep -E '^Benchmark'
echo "$rq" | awk '/^Benchmark/ { for (i=2; i<=NF; i++) { if ($(i+1)=="push-ns/op") { push+=$i; n++ } if ($(i+1)=="pop-ns/op") pop+=$i } }
END { printf "ReadyQueue at 20,000 hosts, mean over %d runs: push %.0f ns, pop %.0f ns\n", n, push/n, pop/n }'
echo
# Memory at a million hosts (bounded by the scopes in recent use): the test logs its figures.
go test -count=1 -run='^TestMemoryMillionHosts$' -v . | grep -E 'live heap|^--- '
echo
# Instructions per operation (callgrind), when valgrind is installed.
if command -v valgrind >/dev/null; then
	bash scripts/instructions.sh
	bash scripts/pathfiles.sh
else
	echo "valgrind is not installed: scripts/instructions.sh (instructions per operation) and scripts/pathfiles.sh skipped"
fi
