#!/usr/bin/env bash
# Runs real peer crawlers beside the throttle on the field suite's rate
# limiters and prints one Markdown table of their figures:
#
#   bash scripts/peers.sh [duration] [go test flags...]
#
#   bash scripts/peers.sh            # 3 minutes per run, ~27 minutes in all
#   bash scripts/peers.sh 30s        # a quick run, ~6 minutes
#   bash scripts/peers.sh 3m -run 'TestPeers/haproxy'   # some limiters only
#   THROTTLE_PEERS_CLIENTS=throttle,colly bash scripts/peers.sh 60s
#
# The duration is each run's, in h, m and s ("90s", "1m30s"), from 30s to
# 30m. Clients: throttle (fieldtest.APIConfig, 16 goroutines through its
# Transport), Scrapy with AutoThrottle (Debian's python3-scrapy), Crawlee's
# HttpCrawler (npm crawlee, the version fieldtest/peers/package.json pins,
# which the test installs into the user's cache directory on first use) and
# colly (Async, Parallelism 16). Limiters: the field suite's five, plus
# HAProxy over a 1 s period, nginx with a burst and Retry-After: 3, and
# HAProxy below 1 req/s. Each client crawls its own server on 127.0.0.1;
# the clients of one limiter run at once, the limiters one after the
# other. The figures come from the servers' access logs; fieldtest/doc.go
# says how they are taken. A missing scrapy, node/npm, nginx or haproxy
# skips its client or limiters, with a note under the table.
# bash scripts/test does not run this: TestPeers skips without
# THROTTLE_PEERS=1.
set -euo pipefail
cd "$(dirname "$0")/.."

duration=${1:-3m}
[ $# -gt 0 ] && shift
seconds=0
rest=$duration
while [[ $rest =~ ^([0-9]+)([hms])(.*)$ ]]; do
  case ${BASH_REMATCH[2]} in
    h) seconds=$((seconds + 3600 * BASH_REMATCH[1])) ;;
    m) seconds=$((seconds + 60 * BASH_REMATCH[1])) ;;
    s) seconds=$((seconds + BASH_REMATCH[1])) ;;
  esac
  rest=${BASH_REMATCH[3]}
done
if [ -n "$rest" ] || [ "$seconds" -lt 30 ] || [ "$seconds" -gt 1800 ]; then
  echo "usage: bash scripts/peers.sh [duration from 30s to 30m, as 3m or 90s] [go test flags...]" >&2
  exit 2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export THROTTLE_PEERS=1 THROTTLE_PEERS_DURATION="$duration" THROTTLE_PEERS_TABLE="$tmp/table.md"
# 8 limiters, each its run, the clients' exit and its servers' start and
# stop; then Crawlee's installation the first time. TestPeers checks the
# same bound against its list of limiters.
timeout=$((8 * (seconds + 50) + 660))
echo "peers: $duration per run (go test log: $tmp/test.log while it runs)" >&2
set +e
go test -count=1 -v -timeout "${timeout}s" -run '^TestPeers$' "$@" ./fieldtest 2>&1 |
  tee "$tmp/test.log" | grep --line-buffered -E '^ *--- (PASS|FAIL|SKIP): TestPeers' >&2
status=${PIPESTATUS[0]}
set -e
if [ -s "$tmp/table.md" ]; then
  cat "$tmp/table.md"
fi
if [ "$status" -ne 0 ]; then
  echo "peers: go test failed; the end of its log:" >&2
  tail -n 60 "$tmp/test.log" >&2
fi
exit "$status"
