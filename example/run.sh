#!/usr/bin/env bash
# Runs the quick start: the test daemon with example/instances.json, and
# bin/caddy with example/Caddyfile, both on loopback addresses only. Caddy's
# admin API is on 127.0.0.1:2880 and it saves nothing in your home: its
# HOME and XDG folders are in a temp folder, removed on exit. Ctrl-C stops
# both and exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/caddy ] && [ -x bin/dicer-testd ] || { echo "run 'make build' first" >&2; exit 1; }

admin=127.0.0.1:2880 # as in example/Caddyfile
dir=$(mktemp -d "${TMPDIR:-/tmp}/caddy-dicer-example.XXXXXX")
daemon='' caddy=''
cleanup() {
	# Under set -e too: nothing here may fail before the rm, and the
	# processes may already be gone.
	for pid in $caddy $daemon; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in $caddy $daemon; do
		wait "$pid" 2>/dev/null || true
	done
	rm -rf "$dir"
}
trap cleanup EXIT
# Ctrl-C reaches this shell; the background processes ignore it (no job
# control) and cleanup stops them.
trap 'exit 0' INT TERM

export DICER_SOCKET="$dir/dicer.sock"
bin/dicer-testd -socket "$DICER_SOCKET" -instances example/instances.json &
daemon=$!
for _ in $(seq 100); do
	[ -S "$DICER_SOCKET" ] && break
	kill -0 "$daemon" 2>/dev/null || { echo "dicer-testd did not start" >&2; exit 1; }
	sleep 0.1
done
[ -S "$DICER_SOCKET" ] || { echo "dicer-testd did not open $DICER_SOCKET within 10s" >&2; exit 1; }

mkdir -p "$dir/home" "$dir/config" "$dir/data"
HOME="$dir/home" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/data" \
	bin/caddy run --config example/Caddyfile --adapter caddyfile &
caddy=$!

# The hints once Caddy answers, within 30 s.
deadline=$((SECONDS + 30))
until curl -fsS -o /dev/null "http://$admin/config/" 2>/dev/null; do
	kill -0 "$caddy" 2>/dev/null || { echo "caddy exited; see its log above" >&2; exit 1; }
	((SECONDS < deadline)) || { echo "caddy did not answer on $admin within 30s" >&2; exit 1; }
	sleep 0.1
done
cat <<MSG

Caddy is ready. Try, from another terminal:
  curl http://127.0.0.1:8880/                            # web-1, web-2, web-3 in turn
  curl -H 'Host: shop.localhost' http://127.0.0.1:8881/  # shop
  curl -H 'Host: nobody.localhost' http://127.0.0.1:8881/ -i  # 503: no instance claims it
See inside (docs/observing.md):
  bin/caddy dicer daemons --address $admin                 # the daemon followed, its state
  bin/caddy dicer instances --address $admin               # each instance and its verdict
  bin/caddy dicer explain shop.localhost --address $admin  # where a request for that host goes, and why
  curl http://$admin/dicer/instances                       # the same as JSON (also /dicer/daemons, /dicer/explain?host=H)
  curl -s http://$admin/metrics | grep '^caddy_dicer'      # the metrics
Ctrl-C stops it.

MSG
wait "$caddy"
