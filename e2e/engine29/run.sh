#!/usr/bin/env bash
# make test-engine29: the Docker backend's Engine tests against Docker
# Engine 29 beside the machine's own Engine (20.10). It builds dockerd and
# docker-proxy from the Moby module (github.com/moby/moby/v2, a Docker 29
# daemon) and runc from its module (Debian's runc 1.1.5 cannot start a
# Docker 29 container, Debian's docker-proxy cannot serve its published
# ports), once per version, under bin/engine29/; starts that dockerd in a network
# namespace of its own (and its own mount and PID namespaces: killing it
# ends its containerd and containers, and its mounts go with it), on
# Debian's containerd, with its own configuration file, data root, exec
# root, pid file and socket, and vfs storage (the machine's
# /etc/docker/daemon.json is not read); loads the test images from the
# machine's Engine (docker save | docker load: nothing is pulled); runs the
# chosen tests inside that namespace with DOCKER_HOST pointing at its
# socket, so that every request stays on its loopback and bridge; and
# removes everything it made, also on failure and on SIGINT/SIGTERM. It
# touches nothing it did not make. Needs root, containerd, libseccomp-dev.
#
# Settings (environment):
#   MOBY_VERSION    the github.com/moby/moby/v2 module version (v2.0.0-beta.18: Docker 29, API 1.55)
#   ENGINE_VERSION  the version string the daemon reports (29.0.0-beta.18)
#   RUNC_VERSION    the github.com/opencontainers/runc module version (v1.4.4)
#   ENGINE_PKG      the Engine suite's package (./e2e/engine)
#   ENGINE_TESTS    its tests to run (-run pattern; "" for none)
#   ADAPTER_TESTS   internal/docker's tests to run ("" for none)
#   L4_CADDY        a Caddy with caddy-l4 and the layer4 package (bin/image/caddy/caddy): e2e/layer4 runs when it exists
#   L4_TESTS        its tests to run
#   FLEET_CADDY     a Caddy with the plugin (bin/caddy): e2e/fleet runs when it exists
#   FLEET_TESTS     its tests to run
#   BUILD_ONLY=1    build the binaries and stop (make engine29-bin)
#   KEEP=1          leave the logs in bin/engine29/logs (always copied there)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)

MOBY_VERSION=${MOBY_VERSION:-v2.0.0-beta.18}
ENGINE_VERSION=${ENGINE_VERSION:-29.0.0-beta.18}
RUNC_VERSION=${RUNC_VERSION:-v1.4.4}
ENGINE_PKG=${ENGINE_PKG:-./e2e/engine}
# The Engine suite's lean subset (the whole package is over 20 minutes on
# 2 cores): routing, health gating, readiness, lifecycle events, the leave
# reasons, network modes, scale to zero (stop and pause, wake, prewake),
# heal, churn (a rolling replacement), the version check (R9a).
ENGINE_TESTS=${ENGINE_TESTS-'^TestDocker_(R2_three_containers_share_a_site_evenly|R2_host_label_routing_without_selector|R3_caddy_port_overrides_the_route_port|R1_health_gating|R1a_no_request_before_the_port_accepts|R6_lifecycle_events_within_a_second|R6b_leave_says_what_happened|R11h_network_modes|churn_rolling_replacement_loses_no_request|R1e_heal_restarts_unhealthy_instance_and_none_fails|R1c_paused_container_with_health_check_wakes_at_once|Standby_idle_stop_and_in_flight|Standby_pause_mode_resumes|Standby_burst_wakes_once|R5k_database_woken_first_and_kept_while_used|R5n_client_hello_wakes_and_is_not_use|R9a_engine_version|Readiness_P5_start_event_to_first_200)$'}
# The adapter's own Engine tests: every event, health, the per-event cost
# (Engine calls per container join), a cut stream, the listing.
ADAPTER_TESTS=${ADAPTER_TESTS-'^(TestListing|TestListingInspectsUnknownHealth|TestEvents|TestHealth|TestPerEventCost|TestJoinCost|TestStreamCut|TestAPIVersionNegotiation|TestStopSignalHoldIsBounded|TestStalledStreamIsDetected)$'}
L4_CADDY=${L4_CADDY:-$ROOT/bin/image/caddy/caddy}
L4_TESTS=${L4_TESTS-'^TestL4_R14(_connections_rotate_over_the_routable_instances|a_first_connection_wakes_a_stopped_container)$'}
FLEET_CADDY=${FLEET_CADDY:-$ROOT/bin/caddy}
FLEET_TESTS=${FLEET_TESTS-'^TestFleet_R5m_a_killed_Caddy_holds_nothing_past_its_lease$'}

BIN=$ROOT/bin/engine29
DOCKERD=$BIN/dockerd-$MOBY_VERSION
# Debian's docker-proxy (20.10) cannot serve Docker 29's published ports.
PROXY=$BIN/docker-proxy-$MOBY_VERSION
RUNC_DIR=$BIN/runc-$RUNC_VERSION # holds "runc", first on dockerd's PATH
LOGS=$BIN/logs

[ "$(id -u)" = 0 ] || { echo "FATAL: make test-engine29 runs as root (network namespace, dockerd)" >&2; exit 1; }
command -v containerd >/dev/null || { echo "FATAL: no containerd (apt-get install containerd)" >&2; exit 1; }

# ---- build, once per version --------------------------------------------------
build() {
	mkdir -p "$BIN"
	if [ ! -x "$DOCKERD" ]; then
		echo "== building dockerd $ENGINE_VERSION (github.com/moby/moby/v2 $MOBY_VERSION)"
		local tmp; tmp=$(mktemp -d "$BIN/.build.XXXXXX")
		# The version string is dockerversion.Version, "library-import"
		# otherwise.
		GOBIN=$tmp GOFLAGS=-buildvcs=false go install \
			-ldflags "-X github.com/moby/moby/v2/dockerversion.Version=$ENGINE_VERSION -X github.com/moby/moby/v2/dockerversion.GitCommit=$MOBY_VERSION" \
			"github.com/moby/moby/v2/cmd/dockerd@$MOBY_VERSION"
		mv "$tmp/dockerd" "$DOCKERD" && rmdir "$tmp"
	fi
	if [ ! -x "$PROXY" ]; then
		echo "== building docker-proxy (github.com/moby/moby/v2 $MOBY_VERSION)"
		local tmp; tmp=$(mktemp -d "$BIN/.build.XXXXXX")
		GOBIN=$tmp GOFLAGS=-buildvcs=false go install "github.com/moby/moby/v2/cmd/docker-proxy@$MOBY_VERSION"
		mv "$tmp/docker-proxy" "$PROXY" && rmdir "$tmp"
	fi
	if [ ! -x "$RUNC_DIR/runc" ]; then
		echo "== building runc $RUNC_VERSION"
		[ -e /usr/include/seccomp.h ] || { echo "FATAL: runc needs libseccomp-dev (apt-get install libseccomp-dev)" >&2; exit 1; }
		local tmp; tmp=$(mktemp -d "$BIN/.build.XXXXXX")
		CGO_ENABLED=1 GOBIN=$tmp GOFLAGS=-buildvcs=false go install -tags "seccomp urfave_cli_no_docs" \
			"github.com/opencontainers/runc@$RUNC_VERSION"
		mkdir -p "$RUNC_DIR" && mv "$tmp/runc" "$RUNC_DIR/runc" && rmdir "$tmp"
	fi
}
build
# BUILD_ONLY=1 (make engine29-bin): the binaries, nothing run.
if [ "${BUILD_ONLY:-}" = 1 ]; then
	echo "== built: $DOCKERD $PROXY $RUNC_DIR/runc"
	exit 0
fi

# ---- the Engine ---------------------------------------------------------------
# Each run's namespace, directory and cgroups carry its PID: what a run
# killed outright (SIGKILL, no trap) left is swept by the next, and only
# when that PID is no longer running.
NS=cdt-e29-$$
# thaw lets the processes of paused containers under the cgroup parent ns
# die: a frozen process does not, even of SIGKILL.
thaw() { # ns
	local f
	for f in /sys/fs/cgroup/freezer/"$1"/*/freezer.state; do [ -e "$f" ] && echo THAWED >"$f" 2>/dev/null; done
	for f in /sys/fs/cgroup/"$1"/*/cgroup.freeze; do [ -e "$f" ] && echo 0 >"$f" 2>/dev/null; done
	return 0
}
sweep() {
	local ns pid d
	for nsfile in /var/run/netns/cdt-e29-*; do
		[ -e "$nsfile" ] || continue
		ns=${nsfile##*/}; pid=${ns#cdt-e29-}
		kill -0 "$pid" 2>/dev/null && continue
		echo "== sweeping $ns, left by a run that is gone"
		# dockerd is PID 1 of its PID namespace: killing it kills the
		# containers (in namespaces of their own) too, a moment later.
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
		thaw "$ns"
		ip netns del "$ns" 2>/dev/null || true
		for d in /sys/fs/cgroup/"$ns" /sys/fs/cgroup/*/"$ns"; do
			[ -d "$d" ] || continue
			for _ in $(seq 100); do
				[ -z "$(find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null)" ] && break
				sleep 0.1
			done
			find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
		done
	done
	for d in /var/tmp/cdt-e29-*.*; do
		[ -d "$d" ] || continue
		pid=${d#/var/tmp/cdt-e29-}; pid=${pid%%.*}
		kill -0 "$pid" 2>/dev/null && continue
		{ grep -o " $d[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
		rm -rf "$d"
	done
}
sweep
T=$(mktemp -d /var/tmp/cdt-e29-$$.XXXXXX) # vfs wants a real disk: /var/tmp, not a tmpfs
SOCK=$T/docker.sock
ENGINE_PID=
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "${CHILD:-}" ]; then
		kill -TERM "$CHILD" 2>/dev/null || true
		wait "$CHILD" 2>/dev/null || true
	fi
	if [ -n "$ENGINE_PID" ]; then
		# The unshare's child is PID 1 of dockerd's PID namespace: killing
		# it ends dockerd, containerd and every container; their mounts
		# were in its own mount namespace.
		local init; init=$(pgrep -P "$ENGINE_PID" 2>/dev/null | head -1 || true)
		thaw "$NS"
		[ -n "$init" ] && kill -TERM "$init" 2>/dev/null || true
		for _ in $(seq 100); do kill -0 "$ENGINE_PID" 2>/dev/null || break; sleep 0.1; done
		[ -n "$init" ] && kill -KILL "$init" 2>/dev/null || true
		thaw "$NS"
		kill -KILL "$ENGINE_PID" 2>/dev/null || true
		wait "$ENGINE_PID" 2>/dev/null || true
	fi
	if [ -e "/var/run/netns/$NS" ]; then
		for p in $(ip netns pids "$NS" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
		ip netns del "$NS" 2>/dev/null || true
	fi
	# The cgroups of its containers, under its own parent (cgroup v1: one
	# per controller; v2: one).
	for d in /sys/fs/cgroup/"$NS" /sys/fs/cgroup/*/"$NS"; do
		[ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true
	done
	# Mounts left in this namespace under the run's directory (none
	# expected), then the directory.
	{ grep -o " $T[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf "$LOGS" && mkdir -p "$LOGS" && cp "$T"/*.log "$LOGS/" 2>/dev/null || true
	rm -rf "$T" 2>/dev/null || true
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

ip netns add "$NS"
ip -n "$NS" link set lo up
mkdir -p "$T/data" "$T/exec" "$T/tmp"
# The Engine's own cgroup parent, so that its containers' cgroups are
# told from the machine Engine's.
cat >"$T/daemon.json" <<JSON
{
  "data-root": "$T/data",
  "exec-root": "$T/exec",
  "pidfile": "$T/docker.pid",
  "hosts": ["unix://$SOCK"],
  "storage-driver": "vfs",
  "userland-proxy-path": "$PROXY",
  "cgroup-parent": "/$NS",
  "iptables": true,
  "ip6tables": false,
  "log-level": "warn",
  "features": {"containerd-snapshotter": false}
}
JSON
# DOCKER_MIN_API_VERSION=1.44, as release builds of Docker 29 have it (a
# source build accepts 1.24): a client pinned below is refused.
setsid nsenter --net=/var/run/netns/"$NS" \
	unshare --mount --pid --fork --mount-proc --propagation private \
	env PATH="$RUNC_DIR:$PATH" DOCKER_MIN_API_VERSION=1.44 \
	"$DOCKERD" --config-file "$T/daemon.json" >"$T/dockerd.log" 2>&1 </dev/null &
ENGINE_PID=$!
export DOCKER_HOST=unix://$SOCK
deadline=$((SECONDS + 120))
until docker version >/dev/null 2>&1; do
	if ((SECONDS > deadline)) || ! kill -0 "$ENGINE_PID" 2>/dev/null; then
		echo "FATAL: dockerd $ENGINE_VERSION did not answer on $SOCK; its log:" >&2
		tail -30 "$T/dockerd.log" >&2
		exit 1
	fi
	sleep 0.2
done
echo "== Engine $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}}, min {{.Server.MinAPIVersion}})'), runc $("$RUNC_DIR/runc" --version | head -1 | cut -d' ' -f3), containerd $(containerd --version | cut -d' ' -f3) in netns $NS"

# As a release build: a client pinned below 1.44 is refused (the plugin
# negotiates, and must never be).
if DOCKER_API_VERSION=1.43 docker ps >/dev/null 2>&1; then
	echo "FATAL: the Engine accepts API 1.43: DOCKER_MIN_API_VERSION=1.44 is not in effect" >&2
	exit 1
fi

# ---- images, from the machine's Engine -----------------------------------------
# The test image is built there first (once per helloserver binary).
env -u DOCKER_HOST go test -count=1 -run '^TestBuildImage$' ./internal/dockertest >/dev/null
for img in $(env -u DOCKER_HOST docker images --format '{{.Repository}}:{{.Tag}}' | grep -E '^caddy-dicer-test/' || true); do
	env -u DOCKER_HOST docker save "$img" | docker load -q >/dev/null
done
echo "== images: $(docker images --format '{{.Repository}}:{{.Tag}}' | tr '\n' ' ')"

# ---- the tests, inside the namespace -------------------------------------------
# Compiled outside (the namespace has no route out), run inside, with a
# TMPDIR of their own: the in-process Caddy's fixed ports are this
# namespace's, so the lock the Engine suite (e2e/engine) takes on them in
# TMPDIR (shared with every other run of it on this machine) is too.
# run_child runs a test binary in the background and waits for it, so
# that SIGINT/SIGTERM reach the trap at once (bash runs a trap only once
# its foreground command is done); the cleanup ends it.
CHILD=
run_child() { # log dir command...
	local log=$1 dir=$2; shift 2
	(cd "$dir" && exec "$@") >"$log" 2>&1 &
	CHILD=$!
	local rc=0
	wait "$CHILD" || rc=$?
	CHILD=
	return $rc
}
failures() { # log: what each failed test logged (its last 60 lines)
	awk '/^=== (RUN|CONT|PAUSE|NAME)/ { n = 0; next }
		/--- FAIL/ { for (i = (n > 60 ? n - 60 : 0); i < n; i++) print buf[i % 60]; n = 0; print; next }
		{ buf[n % 60] = $0; n++ }' "$1" >&2
}
run_pkg() { # name package pattern [env...]
	local name=$1 pkg=$2 pat=$3; shift 3
	[ -n "$pat" ] || return 0
	go test -race -c -o "$T/$name.test" "$pkg"
	echo "== $name ($pkg -run '$pat')"
	local start=$SECONDS rc=0
	run_child "$T/$name.log" "$pkg" nsenter --net=/var/run/netns/"$NS" env TMPDIR="$T/tmp" "$@" "$T/$name.test" -test.count=1 -test.v -test.timeout=15m -test.run "$pat" || rc=$?
	grep -E '^(--- |ok|FAIL|PASS|panic)|calls per join|P5|measured' "$T/$name.log" || true
	echo "   $name: $((SECONDS - start)) s"
	if [ $rc != 0 ]; then failures "$T/$name.log"; echo "FAIL: $name" >&2; return 1; fi
}
status=0
run_pkg adapter ./internal/docker "$ADAPTER_TESTS" || status=1
run_pkg engine "$ENGINE_PKG" "$ENGINE_TESTS" CADDY_DICER_P5=1 || status=1
# The e2e packages that run Caddy binaries against the Engine, each when
# its Caddy is built (make test-e2e builds bin/caddy, make image the
# layer-4 one): the namespace has no route out for xcaddy.
run_e2e() { # name package caddy-env caddy pattern
	local name=$1 pkg=$2 env=$3 bin=$4 pat=$5
	if [ ! -x "$bin" ]; then
		echo "== $name: skipped ($bin not built)"
		return 0
	fi
	go vet -tags e2e "$pkg"
	go test -tags e2e -c -o "$T/$name.test" "$pkg"
	echo "== $name ($pkg -run '$pat', Caddy $bin)"
	local start=$SECONDS rc=0
	run_child "$T/$name.log" "$pkg" nsenter --net=/var/run/netns/"$NS" env TMPDIR="$T/tmp" "$env=$bin" "$T/$name.test" -test.count=1 -test.v -test.timeout=10m -test.run "$pat" || rc=$?
	grep -E '^(--- |ok|FAIL|PASS|panic)' "$T/$name.log" || true
	echo "   $name: $((SECONDS - start)) s"
	if [ $rc != 0 ]; then failures "$T/$name.log"; echo "FAIL: $name" >&2; return 1; fi
}
run_e2e layer4 ./e2e/layer4 CADDY_DICER_E2E_L4_CADDY "$L4_CADDY" "$L4_TESTS" || status=1
run_e2e fleet ./e2e/fleet CADDY_DICER_E2E_PLAIN_CADDY "$FLEET_CADDY" "$FLEET_TESTS" || status=1
[ $status = 0 ] && echo "test-engine29: passed (Docker $ENGINE_VERSION)"
exit $status
