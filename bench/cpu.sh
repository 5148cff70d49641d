#!/usr/bin/env bash
# bench/cpu.sh: Caddy's CPU per request on a `dynamic dicer app=web 8080`
# route against the same three instances written statically, for a base
# commit's Caddy, this checkout's, and the floor: Caddy with a dynamic
# source that only hands out three fixed upstreams (bench/floorcaddy, as
# Caddy's own `dynamic a` does from its cache), what any dynamic source
# costs in Caddy. All in one run. `make load-base BASE=<commit>` calls it.
#
# Usage: bench/cpu.sh [BASE]
#   BASE  the commit to compare with (default e790bcf, the head before the
#         identity records, per-instance metrics and in-flight counting)
# Environment:
#   PAIRS (default 16)    static/dynamic pairs per side (about 9 min for
#                         the three sides)
#   LOAD (default rate)   rate: bench/cpuload sends RATE requests a second
#                         to each of the two sites under load, at the same
#                         moments, well below what a Caddy serves, so that
#                         each request is served alone and its CPU does not
#                         depend on how many the scheduler happened to
#                         batch; wrk: wrk keeps each site saturated (the
#                         figure then moves by several % between runs)
#   RATE (default 2000)   requests a second to each site, LOAD=rate
#   DURATION              of each half: 5s (rate), 2s (wrk)
#   CONNECTIONS (16), THREADS (1) wrk's -c and -t, LOAD=wrk
#   SIDES ("floor base head") any of them, e.g. "head" alone for a
#                         feature the base lacks; and "roll": this
#                         checkout's Caddy with a progressive rollout
#                         (R4f) in progress on its dynamic route
#                         (`dynamic dicer app=roll 8080`, lb_policy
#                         dicer_weighted: two instances of v1, one of v2
#                         started after Caddy, the rollout held at its
#                         first step, 50%, so every request is counted),
#                         to compare with "head" under
#                         POLICY=dicer_weighted in the same run:
#                         SIDES="head roll" POLICY=dicer_weighted; the
#                         last line is then roll's pooled ratio over head's
#   CONTROL=1             the dynamic site is the static one again, on
#                         every side: what the harness reads for two equal
#                         sites (1.00 within the spread)
#   GOMAXPROCS (1)        every Caddy's; with more, the runtime's idle
#                         threads spinning for work add CPU time that
#                         depends on the machine's load more than on the
#                         request
#   POLICY (round_robin)  the dynamic route's lb_policy (the static
#                         route's is round_robin), e.g. dicer_weighted
#                         (the floor keeps round_robin)
#   EXTRA, STATIC_EXTRA   a Caddyfile line added to the dynamic and the
#                         static route's reverse_proxy block, e.g.
#                         `header_down X-Served {dicer.upstream.name}`
#                         against `header_down X-Served
#                         {http.reverse_proxy.upstream.hostport}`
#   PROFILE=1             a CPU profile of each run from Caddy's admin
#                         endpoint (/debug/pprof/profile) while wrk runs;
#                         kept, for go tool pprof (LOAD=wrk)
#   GLOBAL                a global option for every Caddy's static and
#                         dynamic sites, e.g. `metrics` (Caddy's HTTP
#                         metrics, which also turn on the per-instance
#                         ones, R13b)
#   KEEP=1                keeps the logs and Caddyfiles (the directory is
#                         printed)
#
# The base's and this checkout's Caddys are built with xcaddy as `make
# build` does: this checkout's is bin/caddy (make rebuilds it when a
# source changed), the base's bin/caddy-<commit> (built once, from a git
# worktree of BASE); the floor is bin/caddy-floor (go build). Each runs
# twice (A and B), each with its own admin port and storage, in front of
# one test daemon (bin/dicer-testd) whose three instances listen on
# 127.0.0.31-33:8080, so that `make load` running at the same time does
# not collide.
#
# Each run reads a Caddy process's CPU time (the sum of its threads'
# /proc/<pid>/task/*/schedstat) before and after the load and divides by
# the requests answered. A pair is two halves: A's static site under load
# while B's dynamic site is, then A's dynamic while B's static; its figure
# is the dynamic runs' mean CPU per request over the static runs'. With
# two CPUs or more, every Caddy is pinned to the last CPU and wrk and the
# daemon to the others (taskset): the two Caddys of a half share one CPU
# and whatever else the machine does to it, so that static and dynamic
# are measured at the same moment under the same conditions (a request's
# CPU on a shared machine moves with the load by more than the difference
# sought). Sides take turns within each pair, in a rotating order.
# Printed: each pair, and per side the median of the pairs with their
# quartiles and the pooled ratio (the mean over all pairs).
# Loopback only; ports 8960-8963, 8970-8973 and 8980-8983, admin
# 2960-2961, 2970-2971 and 2980-2981.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

base=${1:-e790bcf}
pairs=${PAIRS:-16}
load=${LOAD:-rate}
case $load in
rate) duration=${DURATION:-5s} ;;
wrk) duration=${DURATION:-2s} ;;
*) echo "LOAD: rate or wrk, not $load" >&2 && exit 2 ;;
esac
rate=${RATE:-2000}
connections=${CONNECTIONS:-16}
threads=${THREADS:-1}
extra=${EXTRA:-}
global=${GLOBAL:-}
static_extra=${STATIC_EXTRA:-}
policy=${POLICY:-round_robin}
read -r -a sides <<<"${SIDES:-floor base head}"
gomaxprocs=${GOMAXPROCS:-1}
module=github.com/caddy-dicer/caddy-dicer
caddy_version=$(sed -n 's/^CADDY_VERSION ?= //p' Makefile)
xcaddy_version=$(sed -n 's/^XCADDY_VERSION ?= //p' Makefile)
command -v wrk >/dev/null || { echo "wrk not found: apt-get install wrk" >&2; exit 1; }

base_rev=$(git rev-parse --verify "$base^{commit}")
base_bin=bin/caddy-${base_rev:0:12}
dir=$(mktemp -d "${TMPDIR:-/tmp}/caddy-dicer-cpu.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	git worktree remove --force "$dir/base" 2>/dev/null || true
	if [[ ${KEEP:-} == 1 || -n ${PROFILE:-} ]]; then echo "kept: $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

# build_base builds the base's Caddy once; later runs reuse it.
build_base() {
	[[ -x $base_bin ]] && return
	echo "building $base_bin (xcaddy, once)" >&2
	git worktree add --quiet --detach "$dir/base" "$base_rev"
	(cd "$dir/base" && go run "github.com/caddyserver/xcaddy/cmd/xcaddy@$xcaddy_version" build "$caddy_version" \
		--with "$module@v0.0.0-00010101000000-000000000000=$dir/base" --output "$root/$base_bin") >"$dir/build.log" 2>&1 ||
		{ tail -20 "$dir/build.log" >&2; exit 1; }
}
[[ " ${sides[*]} " != *" base "* ]] || build_base
make --no-print-directory bin/caddy bin/dicer-testd >&2
[[ $load != rate ]] || go build -o bin/cpuload ./bench/cpuload
[[ " ${sides[*]} " != *" floor "* ]] || go build -o bin/caddy-floor ./bench/floorcaddy

# on_caddy_cpu and on_load_cpus prefix a command to run it on those CPUs
# (taskset, which then is the command: its pid is the command's), or are
# empty on a machine with one CPU.
ncpu=$(nproc)
caddy_cpus=$((ncpu - 1)) load_cpus=0-$((ncpu > 1 ? ncpu - 2 : 0))
on_caddy_cpu=() on_load_cpus=()
if ((ncpu > 1)) && command -v taskset >/dev/null; then
	on_caddy_cpu=(taskset -c "$caddy_cpus") on_load_cpus=(taskset -c "$load_cpus")
fi

# roll_label holds the roll side's rollout at its first step: a window
# never holds a million requests, and the step waits a day for them.
roll_label='50%,100% every 24h settle 0s min 1000000 wait 24h then stop'
roll_instances=
if [[ " ${sides[*]} " == *" roll "* ]]; then
	for i in 1 2; do
		roll_instances+=$(printf ',\n  {"name": "roll-%d", "labels": {"app": "roll", "caddy.host": "cpu.localhost", "caddy.version": "v1", "caddy.rollout": "%s"}, "ip": "127.0.0.3%d", "port": 8080}' \
			"$i" "$roll_label" $((i + 3)))
	done
fi
cat >"$dir/instances.json" <<EOF
[
  {"name": "web-1", "labels": {"app": "web", "caddy.host": "cpu.localhost"}, "ip": "127.0.0.31", "port": 8080},
  {"name": "web-2", "labels": {"app": "web", "caddy.host": "cpu.localhost"}, "ip": "127.0.0.32", "port": 8080},
  {"name": "web-3", "labels": {"app": "web", "caddy.host": "cpu.localhost"}, "ip": "127.0.0.33", "port": 8080}$(printf '%b' "$roll_instances")
]
EOF
export DICER_SOCKET="$dir/dicer.sock"
"${on_load_cpus[@]}" bin/dicer-testd -socket "$DICER_SOCKET" -instances "$dir/instances.json" >"$dir/daemon.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S $DICER_SOCKET ]] && break; sleep 0.1; done

# dynamic_route SIDE prints the reverse_proxy block of the side's dynamic
# site.
dynamic_route() {
	if [[ ${CONTROL:-} == 1 ]]; then
		printf '\treverse_proxy 127.0.0.31:8080 127.0.0.32:8080 127.0.0.33:8080 {\n\t\tlb_policy round_robin\n\t\t%s\n\t}\n' "$static_extra"
	elif [[ $1 == roll.* ]]; then
		printf '\treverse_proxy {\n\t\tdynamic dicer app=roll 8080 {\n\t\t\taddress unix:%s\n\t\t}\n\t\tlb_policy dicer_weighted\n\t\t%s\n\t}\n' "$DICER_SOCKET" "$extra"
	elif [[ $1 == floor.* ]]; then
		printf '\treverse_proxy {\n\t\tdynamic fixed 127.0.0.31:8080 127.0.0.32:8080 127.0.0.33:8080\n\t\tlb_policy round_robin\n\t\t%s\n\t}\n' "$extra"
	else
		printf '\treverse_proxy {\n\t\tdynamic dicer app=web 8080 {\n\t\t\taddress unix:%s\n\t\t}\n\t\tlb_policy %s\n\t\t%s\n\t}\n' "$DICER_SOCKET" "$policy" "$extra"
	fi
}

# caddyfile SIDE ADMIN STATIC DYNAMIC writes the side's Caddyfile.
caddyfile() {
	cat >"$dir/$1.Caddyfile" <<EOF
{
	admin 127.0.0.1:$2
	auto_https off
	$global
	storage file_system $dir/$1.storage
	log {
		level ERROR
	}
}

:$3 {
	reverse_proxy 127.0.0.31:8080 127.0.0.32:8080 127.0.0.33:8080 {
		lb_policy round_robin
		$static_extra
	}
}

:$4 {
$(dynamic_route "$1")
}
EOF
}

declare -A caddy_pid port admin
# start SIDE BINARY ADMIN STATIC DYNAMIC runs a Caddy and waits for both sites.
start() {
	caddyfile "$1" "$3" "$4" "$5"
	mkdir -p "$dir/$1.home"
	GOMAXPROCS=$gomaxprocs XDG_DATA_HOME=$dir/$1.home XDG_CONFIG_HOME=$dir/$1.home \
		"${on_caddy_cpu[@]}" "$2" run --config "$dir/$1.Caddyfile" --adapter caddyfile >"$dir/$1.log" 2>&1 &
	caddy_pid[$1]=$! admin[$1]=$3
	pids+=($!)
	port[$1.static]=$4 port[$1.dynamic]=$5
	for p in "$4" "$5"; do
		for _ in $(seq 100); do curl -sf -o /dev/null -H 'Host: cpu.localhost' "http://127.0.0.1:$p/" && break; sleep 0.1; done
		curl -sf -o /dev/null -H 'Host: cpu.localhost' "http://127.0.0.1:$p/" ||
			{ echo "$1 Caddy does not answer on :$p; its log:" >&2; tail -20 "$dir/$1.log" >&2; exit 1; }
	done
}
# Two Caddys per side, A and B, so that a static and a dynamic run go at
# the same time (see the loop below).
for side in "${sides[@]}"; do
	case $side in
	floor) start floor.a bin/caddy-floor 2960 8960 8961 && start floor.b bin/caddy-floor 2961 8962 8963 ;;
	base) start base.a "$base_bin" 2970 8970 8971 && start base.b "$base_bin" 2971 8972 8973 ;;
	head) start head.a bin/caddy 2980 8980 8981 && start head.b bin/caddy 2981 8982 8983 ;;
	roll) start roll.a bin/caddy 2990 8990 8991 && start roll.b bin/caddy 2991 8992 8993 ;;
	*) echo "SIDES: floor, base, head and roll, not $side" >&2 && exit 2 ;;
	esac
done
# The roll side's new version, beside the old one its Caddys already
# route: each (a storage of its own) begins a rollout and holds it at 50%.
if [[ -n $roll_instances ]]; then
	bin/dicer-testd run --socket "$DICER_SOCKET" --name roll-3 --ip 127.0.0.36 --label app=roll --label caddy.host=cpu.localhost \
		--label caddy.version=v2 --label "caddy.rollout=$roll_label" >/dev/null
	for c in roll.a roll.b; do
		for _ in $(seq 100); do curl -sf "http://127.0.0.1:${admin[$c]}/dicer/rollouts" | grep -Eq '"verdict": *"rolling"' && break; sleep 0.1; done
		curl -sf "http://127.0.0.1:${admin[$c]}/dicer/rollouts" | grep -Eq '"verdict": *"rolling"' ||
			{ echo "$c Caddy shows no rollout in progress: $(curl -s "http://127.0.0.1:${admin[$c]}/dicer/rollouts"); its instances: $(curl -s "http://127.0.0.1:${admin[$c]}/dicer/instances" | head -c 3000)" >&2; exit 1; }
	done
fi

# cpu PID: the CPU time of the process's threads, in nanoseconds, from
# their schedstat (exact, where utime+stime counts clock ticks). Caddy's
# threads live as long as it does, so none is missed between two reads.
cpu() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ns += $1} END {printf "%.0f\n", ns}'; }

# measure SIDE KIND: one wrk run; prints "requests cpu_us_per_request req/s".
measure() {
	local pid=${caddy_pid[$1]} before after out requests prof=
	if [[ -n ${PROFILE:-} ]]; then
		curl -s -o "$dir/$1.$2.${i:-0}.pprof" "http://127.0.0.1:${admin[$1]}/debug/pprof/profile?seconds=$((${duration%s} - 1))" &
		prof=$!
	fi
	before=$(cpu "$pid")
	out=$("${on_load_cpus[@]}" wrk -t"$threads" -c"$connections" -d"$duration" -H 'Host: cpu.localhost' "http://127.0.0.1:${port[$1.$2]}/")
	after=$(cpu "$pid")
	[[ -z $prof ]] || wait "$prof"
	if grep -q Non-2xx <<<"$out"; then echo "$1 $2: non-2xx answers" >&2; exit 1; fi
	requests=$(awk '/requests in/ {print $1}' <<<"$out")
	awk -v r="$requests" -v ns=$((after - before)) -v rps="$(awk '/Requests\/sec/ {print $2}' <<<"$out")" \
		'BEGIN {printf "%d %.3f %.0f\n", r, ns / 1e3 / r, rps}'
}

# Warm up: connections, the pools, the cache-cold paths.
for caddy in "${!caddy_pid[@]}"; do
	for kind in static dynamic; do "${on_load_cpus[@]}" wrk -t1 -c4 -d1s -H 'Host: cpu.localhost' "http://127.0.0.1:${port[$caddy.$kind]}/" >/dev/null; done
done

# half SIDE STATIC DYNAMIC: wrk on Caddy STATIC's static site and Caddy
# DYNAMIC's dynamic site at the same time; prints their two measures.
half() {
	if [[ $load == rate ]]; then
		half_rate "$@"
		return
	fi
	measure "$1.$2" static >"$dir/static.out" &
	local s=$!
	measure "$1.$3" dynamic >"$dir/dynamic.out"
	wait "$s"
	echo "$(cat "$dir/static.out") $(cat "$dir/dynamic.out")"
}

# half_rate SIDE STATIC DYNAMIC is half for LOAD=rate: one cpuload sends
# RATE requests a second to Caddy STATIC's static site and as many to
# Caddy DYNAMIC's dynamic site, at the same moments, the two URLs in turns
# first; the same three figures per site.
half_rate() {
	local ps=${caddy_pid[$1.$2]} pd=${caddy_pid[$1.$3]} s0 d0 s1 d1 out ns fs nd fd
	local urls=("http://127.0.0.1:${port[$1.$2.static]}/" "http://127.0.0.1:${port[$1.$3.dynamic]}/")
	[[ $3 == a ]] || urls=("${urls[1]}" "${urls[0]}")
	s0=$(cpu "$ps") d0=$(cpu "$pd")
	out=$("${on_load_cpus[@]}" bin/cpuload -host cpu.localhost -rate "$rate" -conns 8 -duration "$duration" "${urls[@]}")
	s1=$(cpu "$ps") d1=$(cpu "$pd")
	read -r ns fs nd fd <<<"$(echo $out)"
	[[ $3 == a ]] || { read -r ns fs nd fd <<<"$nd $fd $ns $fs"; }
	if ((fs + fd > 0)); then echo "$1: $fs static and $fd dynamic requests failed" >&2; exit 1; fi
	awk -v ns="$ns" -v nd="$nd" -v cs=$((s1 - s0)) -v cd=$((d1 - d0)) -v d="${duration%s}" \
		'BEGIN {printf "%d %.3f %.0f %d %.3f %.0f\n", ns, cs / 1e3 / ns, ns / d, nd, cd / 1e3 / nd, nd / d}'
}

echo "floor: Caddy's own dynamic path (bench/floorcaddy: dynamic fixed)"
echo "base $(git log -1 --format='%h %s' "$base_rev" | cut -c1-70)"
echo "head $(git log -1 --format='%h' HEAD)$(git diff --quiet HEAD -- . || echo ' + uncommitted changes')"
[[ $policy == round_robin ]] || echo "dynamic route: lb_policy $policy"
[[ -z $roll_instances ]] || echo "roll: head with a rollout in progress on its dynamic route (app=roll, lb_policy dicer_weighted, v2 at 50%, held)$([[ $policy == dicer_weighted ]] || echo "; head's dynamic route has lb_policy $policy: compare with POLICY=dicer_weighted")"
[[ -z $extra ]] || echo "dynamic route adds: $extra"
[[ -z $static_extra ]] || echo "static route adds: $static_extra"
[[ ${CONTROL:-} != 1 ]] || echo "CONTROL: the dynamic site is the static one again"
if [[ $load == rate ]]; then echo -n "cpuload $rate requests/s to each site, 8 connections, $duration"; else echo -n "wrk -t$threads -c$connections -d$duration"; fi
echo ", $pairs pairs per side, Caddy GOMAXPROCS=$gomaxprocs$( ((ncpu > 1)) && echo ", Caddys on CPU $caddy_cpus, wrk and the daemon on $load_cpus")"
printf '%-5s %-4s %14s %14s %9s %9s\n' side pair "static us/req" "dynamic us/req" "cpu ratio" "rps ratio"
for i in $(seq 1 "$pairs"); do
	order=()
	for k in "${!sides[@]}"; do order+=("${sides[$(((i + k) % ${#sides[@]}))]}"); done
	for side in "${order[@]}"; do
		echo "pair $i, $side (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
		read -r _ sa_us sa_rps _ db_us db_rps <<<"$(half "$side" a b)"
		read -r _ sb_us sb_rps _ da_us da_rps <<<"$(half "$side" b a)"
		awk -v side="$side" -v i="$i" -v su="$sa_us $sb_us" -v du="$da_us $db_us" -v sr="$sa_rps $sb_rps" -v dr="$da_rps $db_rps" \
			'function sum(x,   v) {split(x, v, " "); return v[1] + v[2]}
			BEGIN {printf "%-5s %-4s %14.2f %14.2f %9.3f %9.3f\n", side, i, sum(su) / 2, sum(du) / 2, sum(du) / sum(su), sum(dr) / sum(sr)}' |
			tee -a "$dir/pairs.txt"
	done
done
echo "median over $pairs pairs (cpu: dynamic/static CPU per request, with the quartiles and range of the pairs; pooled: mean dynamic over mean static; rps: dynamic/static throughput):"
for side in "${sides[@]}"; do
	awk -v side="$side" '$1 == side {c[++n] = $5; r[n] = $6; su += $3; du += $4}
		function median(a, n,   i, j, t) {
			for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) {t = a[j]; a[j] = a[j-1]; a[j-1] = t}
			return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
		}
		END {m = median(c, n); q1 = c[int((n + 3) / 4)]; q3 = c[n + 1 - int((n + 3) / 4)]
			printf "%-5s cpu %.3f (quartiles %.3f-%.3f, pairs %.3f-%.3f, pooled %.3f)  rps %.3f\n", side, m, q1, q3, c[1], c[n], du / su, median(r, n)}' "$dir/pairs.txt"
done
if [[ -n $roll_instances && " ${sides[*]} " == *" head "* ]]; then
	awk '$1 == "head" {hs += $3; hd += $4; n++} $1 == "roll" {rs += $3; rd += $4}
		END {printf "rollout in progress: roll/head pooled cpu ratio %.3f (dynamic us/req %.2f against %.2f; static %.2f against %.2f)\n", (rd / rs) / (hd / hs), rd / n, hd / n, rs / n, hs / n}' "$dir/pairs.txt"
fi
