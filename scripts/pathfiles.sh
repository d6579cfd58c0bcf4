#!/usr/bin/env bash
# The files of this module whose code one request runs through: callgrind
# profiles BenchmarkClientTransportRobots (http.Client.Do through the
# Transport, the default configuration, robots.txt on and fetched) and
# lists each file with a function that ran at least once per request, most
# instructions first. ARCHITECTURE.md's
# table of a request's path is this list.
# Usage: scripts/pathfiles.sh (needs valgrind; about 20 seconds).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is not installed (Debian: apt-get install valgrind)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
go test -c -o "$dir/bench.test" .
n=20000
# Valgrind 3.19 cannot run RDTSCP, which the Go runtime uses when one of
# its locks is contended: such a run dies with SIGILL, and is tried again.
for try in $(seq 1 31); do
	[ "$try" = 31 ] && { echo "valgrind failed 30 times (try it alone on a quiet machine)" >&2; exit 1; }
	GOMAXPROCS=1 GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$dir/cg.out" \
		"$dir/bench.test" -test.run='^$' -test.bench='^BenchmarkClientTransportRobots$' -test.benchtime="${n}x" >/dev/null 2>&1 && break
done
module=$(awk '/^module/ { print $2 }' go.mod)
callgrind_annotate --inclusive=no --auto=no --threshold=100 "$dir/cg.out" |
	awk -v n="$n" -v mod="$module" '
	index($0, mod) && / \(/ {
		ir = $1; gsub(",", "", ir)
		file = substr($0, index($0, "%)") + 4); sub(/:.*/, "", file)
		if (ir + 0 >= n && file ~ /\.go$/ && file !~ /_test\.go$/ && file !~ /^[.\/]/) sum[file] += ir
	}
	END { for (f in sum) printf "%8d  %s\n", sum[f] / n, f }' | sort -rn |
	awk '{ print } END { printf "%d files (instructions a request, without inlined standard library code)\n", NR }'
