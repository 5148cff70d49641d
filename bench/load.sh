#!/usr/bin/env bash
# Load through a real Caddy (bin/caddy, built by `make build`): wrk against
# a static upstream list (baseline), a dicer selector route and a dicer host
# route over the same three test-daemon instances, in one run, reported as
# ratios to the baseline. Loopback only. Needs wrk (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-32}
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }
[ -x bin/caddy ] && [ -x bin/dicer-testd ] || { echo "run 'make build' first" >&2; exit 1; }

dir=$(mktemp -d /tmp/caddy-dicer-load.XXXXXX)
export DICER_SOCKET="$dir/dicer.sock"
bin/dicer-testd -socket "$DICER_SOCKET" -instances bench/instances.json >"$dir/daemon.log" 2>&1 &
daemon=$!
caddy=
cleanup() { [ -n "$caddy" ] && kill "$caddy" 2>/dev/null; kill "$daemon" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
for _ in $(seq 100); do [ -S "$DICER_SOCKET" ] && break; sleep 0.1; done
bin/caddy run --config bench/Caddyfile --adapter caddyfile >"$dir/caddy.log" 2>&1 &
caddy=$!
for port in 8890 8891 8892; do
	for _ in $(seq 100); do curl -sf -o /dev/null -H 'Host: load.localhost' "http://127.0.0.1:$port/" && break; sleep 0.1; done
done

run() { # name port -> requests/s
	wrk -t2 -c"$CONNECTIONS" -d"$DURATION" -H 'Host: load.localhost' "http://127.0.0.1:$2/" |
		awk -v name="$1" '/Requests\/sec/ {print name, $2} /Non-2xx/ {print "FAIL", name, "non-2xx:", $0 > "/dev/stderr"; exit 1}'
}
results=$(run static 8890; run dicer_selector 8891; run dicer_host 8892; run static_again 8890)
echo "$results" | awk '
	NR == 1 {base = $2}
	{printf "%-16s %10.0f req/s  %.2fx of static\n", $1, $2, $2 / base}'
