#!/usr/bin/env bash
# make test-podman: the Docker backend's Engine tests against Podman from
# Debian (R11p, docs/podman.md), rootful and rootless. It starts Podman's
# API service itself, on a socket of its own in a temp dir (rootful) or on
# an unprivileged user's socket (rootless), loads the test images from the
# Engine (docker save | podman load: nothing is pulled), runs the selected
# tests with DOCKER_HOST pointing at Podman, and removes everything it
# made, also on failure. Needs root, podman, uidmap and slirp4netns (.ci/run
# installs them). MODES="rootful rootless" (default), rootful or rootless.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
MODES=${MODES:-rootful rootless}
# The Engine tests that run against Podman: routing, readiness, health,
# leave on stop, scale to zero (stop and pause), permission, and the
# measurements (start event to first 200, stop to out of rotation, wake).
ROOT_TESTS=${ROOT_TESTS:-'^TestDocker_(R2_three_containers_share_a_site_evenly|R2_host_label_routing_without_selector|R3_caddy_port_overrides_the_route_port|R1_health_gating|R1a_no_request_before_the_port_accepts|R6_lifecycle_events_within_a_second|Standby_idle_stop_and_in_flight|R7_permission_allows_only_claimed_hosts|Readiness_P5_start_event_to_first_200|Standby_P5_wake_overhead|Standby_pause_mode_resumes|Standby_permission_allows_a_stopped_container)$'}
ADAPTER_TESTS=${ADAPTER_TESTS:-'^TestPodman'}
ROOTLESS_USER=${ROOTLESS_USER:-caddy-dicer-podman}

command -v podman >/dev/null || { echo "FATAL: podman is not installed (apt-get install podman uidmap slirp4netns)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "FATAL: make test-podman runs as root (it starts Podman's service, and creates the rootless user)" >&2; exit 1; }

T=$(mktemp -d /tmp/caddy-dicer-podman.XXXXXX)
chmod 755 "$T"
PIDS=()
CLEANUPS=()
cleanup() {
	local rc=$?
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	for c in "${CLEANUPS[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
	mkdir -p "$ROOT/bin/test-podman" && cp "$T"/*.log "$ROOT/bin/test-podman/" 2>/dev/null || true
	rm -rf "$T" 2>/dev/null || true
	exit $rc
}
trap cleanup EXIT INT TERM

# No systemd here: Podman's health-check timers never run, so a loop runs
# each running container's check every second, as the timers would, each
# container's on its own (one slow `podman healthcheck run` on a loaded
# machine does not hold back the others' verdicts). A container labelled
# caddy-dicer.test.checks=manual is left to its test, which runs its checks
# itself (TestPodman_engine_side_by_side asserts it is starting until then).
# One listing gives each container with its label: two listings, one of the
# manual containers and one of those with a check, let a container started
# between them be checked by the loop (CI, stop 29: its test timed out
# waiting for "starting", the loop had made it healthy).
drive_checks() { # podman command...
	local id mode
	while sleep 1; do
		while read -r id mode; do
			[ "$mode" = manual ] && continue
			"$@" healthcheck run "$id" >/dev/null 2>&1 &
		done < <("$@" ps --filter health=starting --filter health=healthy --filter health=unhealthy \
			--format '{{.ID}} {{index .Labels "caddy-dicer.test.checks"}}' 2>/dev/null)
		wait
	done
}

load_images() { # podman command...
	local imgs
	imgs=$(docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^caddy-dicer-test/hello:' || true)
	for i in $imgs; do docker save "$i" | "$@" load -q >/dev/null; done
}

wait_socket() { # socket
	for _ in $(seq 100); do
		curl -sf --unix-socket "$1" http://podman/_ping >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "FATAL: Podman's service did not answer on $1" >&2
	return 1
}

# failures prints what each failed test logged (its last 60 lines since
# it started or resumed): the filtered output above shows only the verdicts,
# and CI shows only this script's output, not its logs in bin/test-podman.
failures() { # log
	awk '/^=== (RUN|CONT|PAUSE|NAME)/ { n = 0; next }
		/--- FAIL/ { for (i = (n > 60 ? n - 60 : 0); i < n; i++) print buf[i % 60]; n = 0; print; next }
		{ buf[n % 60] = $0; n++ }' "$1" >&2
}

run_tests() { # mode socket
	local mode=$1 sock=$2
	echo "== $mode Podman ($(podman --version)) at unix://$sock"
	# The adapter's tests: the Engine (its default socket) and Podman side
	# by side, then the recorded and written Podman payloads.
	CADDY_DICER_PODMAN_HOST=unix://$sock CADDY_DICER_PODMAN=$mode go test -race -count=1 -p 1 -v -timeout 20m -run "$ADAPTER_TESTS" ./internal/docker/ 2>&1 | tee "$T/$mode-adapter.log" | grep -E '^(--- |ok|FAIL|PASS|panic)|measured|catalog writes' || true
	grep -q '^ok' "$T/$mode-adapter.log" || { failures "$T/$mode-adapter.log"; echo "FAIL: $mode: internal/docker" >&2; return 1; }
	[ -n "$ROOT_TESTS" ] || return 0
	DOCKER_HOST=unix://$sock CADDY_DICER_PODMAN=$mode CADDY_DICER_P5=1 go test -race -count=1 -p 1 -v -timeout 25m -run "$ROOT_TESTS" ./e2e/engine 2>&1 | tee "$T/$mode-root.log" | grep -E '^(--- |ok|FAIL|PASS|panic)|P5|measured|podman' || true
	grep -q '^ok' "$T/$mode-root.log" || { failures "$T/$mode-root.log"; echo "FAIL: $mode: the integration package" >&2; return 1; }
}

rootful() {
	local P=(podman --root "$T/rootful/root" --runroot "$T/rootful/run" --tmpdir "$T/rootful/tmp")
	mkdir -p "$T/rootful"
	cat >"$T/rootful/containers.conf" <<-CONF
	[containers]
	default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
	[engine]
	events_logger = "file"
	events_logfile_path = "$T/rootful/events.log"
	cgroup_manager = "cgroupfs"
	CONF
	export CONTAINERS_CONF=$T/rootful/containers.conf
	CLEANUPS+=("CONTAINERS_CONF=$T/rootful/containers.conf ${P[*]} rm -af -t 0" "CONTAINERS_CONF=$T/rootful/containers.conf ${P[*]} rmi -af" "umount -R $T/rootful/root/overlay 2>/dev/null")
	"${P[@]}" system service --time=0 "unix://$T/rootful/podman.sock" >"$T/rootful/service.log" 2>&1 &
	PIDS+=($!)
	wait_socket "$T/rootful/podman.sock"
	load_images "${P[@]}"
	drive_checks "${P[@]}" &
	PIDS+=($!)
	run_tests rootful "$T/rootful/podman.sock"
	unset CONTAINERS_CONF
}

rootless() {
	local u=$ROOTLESS_USER uid home
	if ! id "$u" >/dev/null 2>&1; then
		useradd --system --create-home --shell /usr/sbin/nologin "$u"
	fi
	uid=$(id -u "$u")
	home=$(getent passwd "$u" | cut -d: -f6)
	grep -q "^$u:" /etc/subuid 2>/dev/null || usermod --add-subuids 300000-365535 "$u"
	grep -q "^$u:" /etc/subgid 2>/dev/null || usermod --add-subgids 300000-365535 "$u"
	# Rootless networking (slirp4netns) opens /dev/net/tun in the user's
	# namespace: Debian makes it 0666; a machine where it is 0600 cannot
	# run rootless containers with a network at all. For this run the
	# target sets Debian's mode and puts the previous one back at the end
	# (also on failure).
	if ! runuser -u "$u" -- test -w /dev/net/tun; then
		local mode
		mode=$(stat -c %a /dev/net/tun)
		echo "rootless: /dev/net/tun is mode $mode: 0666 (Debian's default) for this run, $mode again afterwards"
		CLEANUPS+=("chmod $mode /dev/net/tun")
		chmod 0666 /dev/net/tun
	fi
	if ! runuser -u "$u" -- test -w /dev/net/tun; then
		echo "FAIL: rootless: /dev/net/tun is not writable by $u ($(stat -c %A /dev/net/tun)): slirp4netns cannot start" >&2
		return 1
	fi
	local run=/run/user/$uid
	mkdir -p "$run" && chown "$u:" "$run" && chmod 700 "$run"
	local conf=$T/rootless.conf
	cat >"$conf" <<-CONF
	[containers]
	default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]
	[engine]
	events_logger = "file"
	cgroup_manager = "cgroupfs"
	CONF
	chmod 644 "$conf"
	local P=(runuser -u "$u" -- env -C "$home" HOME="$home" XDG_RUNTIME_DIR="$run" CONTAINERS_CONF="$conf" podman)
	# Rootless Podman keeps a pause process holding the user namespace.
	CLEANUPS+=("${P[*]} rm -af -t 0" "${P[*]} rmi -af" "kill \$(cat $run/libpod/tmp/pause.pid)")
	mkdir -p "$run/podman" && chown "$u:" "$run/podman"
	"${P[@]}" system service --time=0 "unix://$run/podman/podman.sock" >"$T/rootless-service.log" 2>&1 &
	PIDS+=($!)
	# Ending runuser does not end the service it started (it outlived a
	# run): end that user's service on this socket by its command line.
	CLEANUPS+=("pkill -u $u -xf 'podman system service --time=0 unix://$run/podman/podman.sock'")
	wait_socket "$run/podman/podman.sock"
	load_images "${P[@]}"
	drive_checks "${P[@]}" &
	PIDS+=($!)
	# Rootless containers have no address of their own: only the tests
	# that route through published ports apply (R11p).
	ROOT_TESTS=${ROOTLESS_ROOT_TESTS:-} run_tests rootless "$run/podman/podman.sock"
}

for m in $MODES; do
	case $m in
	rootful) rootful ;;
	rootless) rootless ;;
	*) echo "FATAL: unknown mode $m" >&2; exit 1 ;;
	esac
done
echo "test-podman: passed ($MODES)"
