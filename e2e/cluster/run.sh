#!/usr/bin/env bash
# run.sh: make test-cluster. Runs the e2e/cluster suite (a three-node
# swarm on this machine) and, whatever happens (failure, SIGINT, SIGTERM,
# a killed test binary), tears down what it made: the swarm this suite
# made on this Engine (only one whose manager node carries the suite's
# label), the extra Engines, their namespaces, veths, bridge and data roots.
set -uo pipefail
cd "$(dirname "$0")"
bin=

cleanup() {
	trap - EXIT INT TERM
	if [ "$(docker node inspect self --format '{{index .Spec.Labels "caddy-dicer-cluster"}}' 2>/dev/null)" = 1 ]; then
		docker service ls -q --filter label=caddy-dicer.test.run | xargs -r docker service rm >/dev/null 2>&1
		docker swarm leave --force >/dev/null 2>&1
	fi
	./nodes.sh down
	rm -rf "$bin"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bin=$(mktemp -d /tmp/cdt-cluster-test.XXXXXX)
go vet -tags e2e . || exit 1
go test -tags e2e -c -o "$bin/cluster.test" . || exit 1
# The test binary itself, not go test, gets the signals: it tears down
# before it exits, and this script checks after it.
CADDY_DICER_CLUSTER=1 "$bin/cluster.test" -test.v -test.count=1 -test.timeout=15m "$@" &
child=$!
trap 'kill -TERM $child 2>/dev/null; wait $child; exit 130' INT
trap 'kill -TERM $child 2>/dev/null; wait $child; exit 143' TERM
wait $child
