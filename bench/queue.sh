#!/usr/bin/env bash
# The queue at capacity (R5q, issue 45) against Caddy's own max_requests
# with lb_try_duration, through a real Caddy (bin/caddy, built by `make
# build`), on the same two test-daemon instances answering /slow?d=50ms,
# in one run: CLIENTS closed-loop clients (default 16, twice the capacity
# of 2 instances x 4 requests), each case run twice, alternately, for
# DURATION each. Prints requests/s, latency percentiles (the wait is the
# latency less the 50 ms service time) and 5xx. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CLIENTS=${CLIENTS:-16}
SERVICE=${SERVICE:-50ms}
[ -x bin/caddy ] && [ -x bin/dicer-testd ] || { echo "run 'make build' first" >&2; exit 1; }
go build -o bin/queueload ./bench/queueload

dir=$(mktemp -d /tmp/caddy-dicer-queue.XXXXXX)
export DICER_SOCKET="$dir/dicer.sock"
bin/dicer-testd -socket "$DICER_SOCKET" -instances bench/queue-instances.json >"$dir/daemon.log" 2>&1 &
daemon=$!
caddy=
stop_caddy() { if [ -n "$caddy" ]; then kill "$caddy" 2>/dev/null || true; wait "$caddy" 2>/dev/null || true; caddy=; fi; }
cleanup() { stop_caddy; kill "$daemon" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$DICER_SOCKET" ] && break; sleep 0.1; done

run() { # case -> one result line
	bin/caddy run --config "bench/queue-$1.Caddyfile" --adapter caddyfile >"$dir/caddy-$1.log" 2>&1 &
	caddy=$!
	for _ in $(seq 100); do curl -sf -o /dev/null -H 'Host: queue.localhost' http://127.0.0.1:8895/ && break; sleep 0.1; done
	echo "$1 $(bin/queueload -host queue.localhost -clients "$CLIENTS" -duration "$DURATION" "http://127.0.0.1:8895/slow?d=$SERVICE")"
	stop_caddy
}
{
	echo "case req/s p50_ms p90_ms p99_ms max_ms 5xx failed total"
	run ours; run caddy; run ours; run caddy
} | column -t
