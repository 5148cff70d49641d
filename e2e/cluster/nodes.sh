#!/usr/bin/env bash
# nodes.sh: the extra Docker Engines of the cluster test, each a dockerd in
# a network namespace of its own (and its own UTS, mount and PID
# namespaces, so that killing it kills its containers too, as a node crash
# does), linked by a veth to a bridge on this host.
#
#   nodes.sh up N        start nodes 1..N (cdt-n1 ...) and the bridge
#   nodes.sh down        stop every node, remove namespaces, veths, bridge,
#                        firewall rule and data roots (idempotent)
#   nodes.sh kill I      SIGKILL node I's whole PID namespace (a crash)
#   nodes.sh stop I      stop node I's dockerd cleanly (SIGTERM; it stops
#                        its containers and leaves, then the namespace ends)
#   nodes.sh start I     start node I's dockerd again on its data root
#   nodes.sh cut I       take node I's link down (a partition)
#   nodes.sh heal I      bring it back up
#   nodes.sh host I      print unix:///... for node I's Engine socket
#   nodes.sh addr I      print node I's address
#
# Addresses: the bridge is 10.213.77.1/24 (the swarm manager, this host's
# Engine, advertises it), node I is 10.213.77.(10+I). Names start with
# cdt-, so `down` finds what a killed run left.
set -euo pipefail

PREFIX=cdt
BRIDGE=${PREFIX}br0
NET=10.213.77
ROOT=/var/lib/${PREFIX}-cluster   # data roots (vfs: on the real disk)
RUN=/run/${PREFIX}-cluster        # exec roots, sockets, pid files
COMMENT=caddy-dicer-cluster-test

node() { echo "${PREFIX}-n$1"; }
addr() { echo "$NET.$((10 + $1))"; }
sock() { echo "$RUN/n$1/docker.sock"; }

bridge_up() {
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		# The range must be free: no address or route of this host in it.
		if ip -o addr show | grep -q " $NET\." || ip route show | grep -q "^$NET\."; then
			echo "nodes.sh: $NET.0/24 is in use on this host; not touching it" >&2
			return 1
		fi
		ip link add "$BRIDGE" type bridge
		ip addr add "$NET.1/24" dev "$BRIDGE"
		ip link set "$BRIDGE" up
	fi
	# The host's FORWARD policy drops bridged traffic (br_netfilter):
	# let the nodes talk to each other.
	iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$COMMENT" -j ACCEPT 2>/dev/null ||
		iptables -I FORWARD 1 -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$COMMENT" -j ACCEPT
}

netns_up() {
	local i=$1 n; n=$(node "$i")
	ip netns add "$n"
	ip link add "${n}h" type veth peer name eth0 netns "$n"
	ip link set "${n}h" master "$BRIDGE" up
	ip -n "$n" addr add "$(addr "$i")/24" dev eth0
	ip -n "$n" link set lo up
	ip -n "$n" link set eth0 up
	# No default route: a node reaches the bridge and nothing else, so an
	# image pull (Swarm's agent tries one per task) fails at once.
}

start() {
	local i=$1 n dir run; n=$(node "$i"); dir=$ROOT/n$i; run=$RUN/n$i
	mkdir -p "$dir/data" "$run"
	# A crashed node's pid file names a PID of its dead PID namespace, and
	# its exec root holds the dead containerd's socket and state: a reboot
	# starts with an empty /run.
	rm -rf "$run/docker.pid" "$run/exec"
	cat >"$dir/daemon.json" <<JSON
{
  "data-root": "$dir/data",
  "exec-root": "$run/exec",
  "pidfile": "$run/docker.pid",
  "hosts": ["unix://$(sock "$i")"],
  "storage-driver": "vfs",
  "cgroup-parent": "/$n",
  "bridge": "",
  "iptables": true,
  "log-level": "warn"
}
JSON
	# PID 1 of the node's PID namespace is a shell that waits on dockerd:
	# killing it (kill I) takes dockerd, containerd and every container
	# with it.
	setsid nsenter --net=/var/run/netns/"$n" \
		unshare --uts --mount --pid --fork --mount-proc --propagation private \
		sh -c "hostname $n && exec dockerd --config-file $dir/daemon.json" \
		>>"$dir/dockerd.log" 2>&1 </dev/null &
	echo $! >"$run/unshare.pid"
	local deadline=$((SECONDS + 120))
	until docker -H "unix://$(sock "$i")" version >/dev/null 2>&1; do
		if ((SECONDS > deadline)); then
			echo "node $i: dockerd does not answer; its log:" >&2
			tail -30 "$dir/dockerd.log" >&2
			return 1
		fi
		sleep 0.2
	done
}

# pidns_init prints the PID (in this namespace) of node I's PID 1.
pidns_init() {
	local pid; pid=$(cat "$RUN/n$1/unshare.pid" 2>/dev/null) || return 0
	# unshare --fork: its only child is the namespace's PID 1.
	{ pgrep -P "$pid" 2>/dev/null || true; } | head -1
}

kill_node() {
	local init; init=$(pidns_init "$1")
	[ -n "$init" ] && kill -KILL "$init" 2>/dev/null || true
	local pid; pid=$(cat "$RUN/n$1/unshare.pid" 2>/dev/null) || true
	if [ -n "$pid" ]; then
		for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	fi
}

# stop_node sends SIGTERM to node I's dockerd (its PID namespace's PID 1)
# and waits until the namespace has ended.
stop_node() {
	local init; init=$(pidns_init "$1")
	[ -n "$init" ] && kill -TERM "$init" 2>/dev/null || true
	local pid; pid=$(cat "$RUN/n$1/unshare.pid" 2>/dev/null) || true
	if [ -n "$pid" ]; then
		for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
		kill_node "$1"
	fi
}

down() {
	local n
	for nsfile in /var/run/netns/${PREFIX}-n*; do
		[ -e "$nsfile" ] || continue
		n=${nsfile##*/}; i=${n#${PREFIX}-n}
		kill_node "$i"
	done
	# Anything still in a node's network namespace.
	for nsfile in /var/run/netns/${PREFIX}-n*; do
		[ -e "$nsfile" ] || continue
		n=${nsfile##*/}
		for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
		ip link del "${n}h" 2>/dev/null || true
		ip netns del "$n" 2>/dev/null || true
	done
	ip link del "$BRIDGE" 2>/dev/null || true
	while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment "$COMMENT" -j ACCEPT 2>/dev/null; do :; done
	# Mounts a dockerd left in this mount namespace (none expected: each
	# has its own).
	{ grep -o " $ROOT[^ ]*\| $RUN[^ ]*" /proc/mounts || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf "$ROOT" "$RUN"
}

case "${1:-}" in
up)
	down
	bridge_up
	for i in $(seq "$2"); do netns_up "$i"; done
	for i in $(seq "$2"); do start "$i" & done
	wait
	;;
down) down ;;
kill) kill_node "$2" ;;
stop) stop_node "$2" ;;
start) start "$2" ;;
cut) ip link set "$(node "$2")h" down ;;
heal) ip link set "$(node "$2")h" up ;;
host) echo "unix://$(sock "$2")" ;;
addr) addr "$2" ;;
*)
	sed -n '2,20p' "$0" >&2
	exit 2
	;;
esac
