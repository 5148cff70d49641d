#!/usr/bin/env bash
# Runs the quick start: the test daemon with example/instances.json, and
# bin/caddy with example/Caddyfile. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/caddy ] && [ -x bin/dicer-testd ] || { echo "run 'make build' first" >&2; exit 1; }

dir=$(mktemp -d /tmp/caddy-dicer-example.XXXXXX)
export DICER_SOCKET="$dir/dicer.sock"
bin/dicer-testd -socket "$DICER_SOCKET" -instances example/instances.json &
daemon=$!
trap 'kill $daemon 2>/dev/null; wait $daemon 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do
	[ -S "$DICER_SOCKET" ] && break
	kill -0 $daemon 2>/dev/null || { echo "dicer-testd did not start" >&2; exit 1; }
	sleep 0.1
done

cat <<MSG
Try, from another terminal:
  curl http://127.0.0.1:8880/                            # web-1, web-2, web-3 in turn
  curl -H 'Host: shop.localhost' http://127.0.0.1:8881/  # shop
  curl -H 'Host: nobody.localhost' http://127.0.0.1:8881/ -i  # 503: no instance claims it
MSG
bin/caddy run --config example/Caddyfile --adapter caddyfile
