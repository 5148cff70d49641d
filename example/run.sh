#!/usr/bin/env bash
# Runs the quick start: the test daemon with example/instances.json, and
# bin/caddy with example/Caddyfile, both on loopback addresses only. Caddy's
# admin API is on 127.0.0.1:2880 and it saves nothing in your home: its
# HOME and XDG folders are in a temp folder, removed on exit. The daemon's
# sockets are at the path `bin/dicer-testd run|stop|start|standby|rm|ls`
# use by default, $TMPDIR/caddy-dicer-example-<uid>/. Ctrl-C stops both and
# exits 0.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x bin/caddy ] && [ -x bin/dicer-testd ] || { echo "run 'make build' first" >&2; exit 1; }

admin=127.0.0.1:2880 # as in example/Caddyfile
dir=$(mktemp -d "${TMPDIR:-/tmp}/caddy-dicer-example.XXXXXX")
# The socket folder is the one dicer-testd's commands default to (its
# exampleSocket); mkdir -m applies to the last folder only, which is this.
sockdir="${TMPDIR:-/tmp}/caddy-dicer-example-$(id -u)"
if bin/dicer-testd ls --socket "$sockdir/dicer.sock" >/dev/null 2>&1; then
	echo "an example is already running (its daemon answers on $sockdir/dicer.sock)" >&2
	exit 1
fi
mkdir -p -m 700 "$sockdir"
rm -f "$sockdir/dicer.sock" "$sockdir/dicer.sock.ctl" # left by a run that crashed
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
	rmdir "$sockdir" 2>/dev/null || true
}
trap cleanup EXIT
# Ctrl-C reaches this shell; the background processes ignore it (no job
# control) and cleanup stops them.
trap 'exit 0' INT TERM

export DICER_SOCKET="$sockdir/dicer.sock"
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
Make an instance come and go; Caddy follows the daemon's events, with no reload:
  bin/dicer-testd run --name api --label caddy.host=api.localhost --standby-after 1m && curl -H 'Host: api.localhost' http://127.0.0.1:8881/
  bin/dicer-testd standby api && curl -H 'Host: api.localhost' http://127.0.0.1:8881/     # frozen; the request wakes it
  bin/dicer-testd stop api && curl -i -H 'Host: api.localhost' http://127.0.0.1:8881/    # 503: it left
  bin/dicer-testd ls                                       # the daemon's instances (also start, rm; -h for more)
See inside (docs/observing.md):
  bin/caddy dicer daemons --address $admin                 # the daemon followed, its state
  bin/caddy dicer instances --address $admin               # each instance and its verdict
  bin/caddy dicer explain shop.localhost --address $admin  # where a request for that host goes, and why
  curl http://$admin/dicer/instances                       # the same as JSON (also /dicer/daemons, /dicer/explain?host=H)
  curl -s http://$admin/metrics | grep '^caddy_dicer'      # the metrics
Ctrl-C stops it.

MSG
wait "$caddy"
