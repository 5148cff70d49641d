#!/usr/bin/env bash
# bench/sidebyside.sh: run the same benchmarks on this checkout and on a
# base commit, alternately, in one run, and print a benchstat table (base
# is the old column, this checkout the new). `make bench-base BASE=<commit>`
# calls it.
#
# Usage: bench/sidebyside.sh BASE [BENCH_REGEXP]
#   BASE          the commit to compare with, e.g. the parent of the
#                 first commit that touched identity.go:
#                 $(git log --format=%h -- identity.go | tail -1)^
#   BENCH_REGEXP  go test -bench's pattern; default the request path
#                 benchmarks: ^(BenchmarkGetUpstreams|BenchmarkRequestPath)$
# Environment: COUNT (default 6) runs of each side, alternating;
#   BENCHTIME (default go's 1s); KEEP=1 keeps the base worktree and the
#   raw results (their directory is printed).
#
# The base gets this checkout's bench_identity_test.go when it has none
# (the file compiles against the code before R13), and a no-op
# benchObserved when its tests lack one. Both sides are compiled once
# (go test -c) and run from their package directory.
set -euo pipefail

base=${1:?usage: bench/sidebyside.sh BASE [BENCH_REGEXP]}
pattern=${2:-'^(BenchmarkGetUpstreams|BenchmarkRequestPath)$'}
count=${COUNT:-6}
benchtime=${BENCHTIME:-1s}

root=$(git rev-parse --show-toplevel)
base_rev=$(git -C "$root" rev-parse --verify "$base^{commit}")
work=$(mktemp -d "${TMPDIR:-/tmp}/caddy-dicer-sidebyside.XXXXXX")
cleanup() {
	git -C "$root" worktree remove --force "$work/base" 2>/dev/null || true
	if [[ ${KEEP:-} == 1 ]]; then
		echo "kept: $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT

git -C "$root" worktree add --quiet --detach "$work/base" "$base_rev"
if [[ ! -e $work/base/bench_identity_test.go ]]; then
	cp "$root/bench_identity_test.go" "$work/base/"
fi
if ! grep -qs 'func benchObserved' "$work"/base/*_test.go; then
	printf 'package caddydicer\n\nfunc benchObserved(*upstreamSource) {}\n' >"$work/base/zz_sidebyside_test.go"
fi

echo "compiling: base $(git -C "$root" log -1 --format='%h %s' "$base_rev" | cut -c1-72)" >&2
(cd "$work/base" && go test -c -o "$work/base.test" .)
echo "compiling: head $(git -C "$root" log -1 --format='%h' HEAD)$(git -C "$root" diff --quiet HEAD -- . || echo ' + uncommitted changes')" >&2
(cd "$root" && go test -c -o "$work/head.test" .)

run() { # side dir: one round of one side, appended to $work/side.txt
	(cd "$2" && "$work/$1.test" -test.run '^$' -test.bench "$pattern" -test.benchmem \
		-test.count 1 -test.benchtime "$benchtime") >>"$work/$1.txt"
}
for i in $(seq 1 "$count"); do
	echo "round $i of $count (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	run base "$work/base"
	run head "$root"
done

if ! (cd "$work" && go run golang.org/x/perf/cmd/benchstat@latest base=base.txt head=head.txt); then
	echo "benchstat unavailable; the raw results:" >&2
	echo "== base $base_rev"; grep '^Benchmark' "$work/base.txt"
	echo "== head"; grep '^Benchmark' "$work/head.txt"
fi
