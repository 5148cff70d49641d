#!/usr/bin/env bash
# Runs the Compose files of docs/migrating.md, read from the page itself
# at each run (a file changed on the page is a file tested): every
# `<!-- labels: after NAME -->` file as it is, and every `before NAME`
# one under our Caddy with `labels caddy-dicer caddy-docker-proxy
# traefik` (R2f: the other proxy's image cannot be pulled here, and the
# point is that ours reads its labels). For each: up, with each app's
# image replaced by the demo app (internal/dockertest/helloserver,
# answering "hello from NAME" on the port its labels name) and a Caddy
# service added (an override file: the page's own lines are not
# touched); then a request for the first host and path of each routed
# service of the "after" file, through that Caddy, must reach the
# service; a `refused` file's services must get 503; down, nothing of
# the project left. Needs the images of `make image`; `make
# test-compose` builds them and runs this.
set -euo pipefail
cd "$(dirname "$0")/.."
page=docs/migrating.md
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
else
	compose=(docker-compose)
fi
image=${IMAGE:-caddy-dicer:local}
demo=${DEMO_IMAGE:-caddy-dicer-demo:local}
work=$(mktemp -d)
project=""
c() { "${compose[@]}" -p "$project" -f "$work/compose.yaml" -f "$work/override.yaml" "$@"; }
down() {
	[[ -n $project ]] && c down --volumes --remove-orphans >/dev/null 2>&1 || true
}
cleanup() {
	down
	rm -rf "$work"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	c ps >&2 || true
	c logs --tail 30 caddy >&2 || true
	exit 1
}

# block KIND NAME: the Compose file under `<!-- labels: KIND NAME ... -->`.
block() {
	awk -v kind="$1" -v name="$2" '
		$0 ~ "^<!-- labels: " kind " " name "( |-->)" { mark = 1; next }
		mark && /^```yaml$/ { on = 1; mark = 0; next }
		on && /^```$/ { exit }
		on { print }
	' "$page"
}
# services FILE: the names of its services (two-space keys under services:).
services() { awk '/^[a-z]/ { in_s = ($0 == "services:") } in_s && /^  [A-Za-z0-9_.-]+:$/ { sub(/^  /, ""); sub(/:$/, ""); print }' "$1"; }
# networks FILE: the keys of its top-level networks:.
networks() { awk '/^[a-z]/ { in_n = ($0 == "networks:") } in_n && /^  [A-Za-z0-9_.-]+:/ { sub(/^  /, ""); sub(/:.*$/, ""); print }' "$1"; }
# label FILE SERVICE KEY: the service's label, quotes dropped.
label() {
	awk -v svc="$2" -v key="$3" '
		/^  [^ ]/ { in_svc = ($0 == "  " svc ":") }
		in_svc && /^    [^ ]/ { in_l = ($0 == "    labels:") }
		in_svc && in_l && index($0, "      " key ": ") == 1 { v = substr($0, length(key) + 9); gsub(/^"|"$/, "", v); print v; exit }
	' "$1"
}

# A free port on loopback, for Caddy's published port.
for _ in $(seq 50); do
	port=$((20000 + RANDOM % 20000))
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done

# body HOST PATH: what Caddy answers, with its status: "200 hello from x".
body() {
	curl -s -m 5 -o "$work/body" -w '%{http_code}' -H "Host: $1" "http://127.0.0.1:$port$2" || true
	echo " $(cat "$work/body" 2>/dev/null)"
	rm -f "$work/body"
}
answers() { [[ $(body "$1" "$2") == "$3"* ]]; }
# await WHAT SECONDS COMMAND...: run COMMAND until it succeeds, within SECONDS.
await() {
	local what=$1 deadline=$((SECONDS + $2))
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || fail "$what: not within the deadline; last answer: $(body "${@:2:2}")"
		sleep 0.2
	done
}

# run KIND NAME AFTER: up the KIND file of NAME, routed as the labels of
# the AFTER file say (its own for an after), down.
run() {
	local kind=$1 name=$2 after=$3 sets=""
	block "$kind" "$name" >"$work/compose.yaml"
	[[ -s $work/compose.yaml ]] || fail "$page: no $kind $name file"
	[[ $kind == after ]] || sets="
			labels caddy-dicer caddy-docker-proxy traefik"
	printf '{\n\tpersist_config off\n}\n:80 {\n\treverse_proxy {\n\t\tdynamic docker {%s\n\t\t}\n\t}\n}\n' "$sets" >"$work/Caddyfile"
	local nets svc p
	nets=$(networks "$work/compose.yaml" | tr '\n' ' ')
	{
		echo "services:"
		echo "  caddy:"
		echo "    image: $image"
		echo "    ports: [\"127.0.0.1:$port:80\"]"
		echo "    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\", \"$work/Caddyfile:/etc/caddy/Caddyfile:ro\"]"
		echo "    networks: [default$(for n in $nets; do printf ', %s' "$n"; done)]"
		for svc in $(services "$work/compose.yaml"); do
			p=$(label "$after" "$svc" caddy.port)
			echo "  $svc:"
			echo "    image: $demo"
			echo "    environment: {PORT: \"${p:-8080}\", NAME: \"$svc\"}"
		done
	} >"$work/override.yaml"
	project="caddydicermigrating$$$kind$name"
	project=${project//-/}
	c up -d --quiet-pull >/dev/null 2>&1 || { c up -d; fail "$kind $name: up"; }
	local routed=0 host path
	for svc in $(services "$after"); do
		host=$(label "$after" "$svc" caddy.host)
		[[ -n $host ]] || continue
		host=${host%%,*}
		path=$(label "$after" "$svc" caddy.path)
		path=${path%%,*}
		await "$kind $name: $svc at $host${path:-/}" 30 answers "$host" "${path}/migrating" "200 hello from $svc"
		routed=$((routed + 1))
	done
	((routed > 0)) || fail "$kind $name: no service of $after is routed"
	echo "ok: $kind $name: $routed service(s) routed through Caddy"
	c down --volumes --remove-orphans >/dev/null 2>&1
	nothing_left "$kind $name"
}

# nothing_left WHAT: no container or network of the project is left
# after its down (a network the file names, `name: frontend`, included).
nothing_left() {
	local left
	left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; docker network ls -q --filter "label=com.docker.compose.project=$project")
	[[ -z $left ]] || fail "$1: left behind after down: $left"
	project=""
}

# refused NAME: up the refused file of NAME under our Caddy reading the
# other proxies' labels; once Caddy's log has warned about each service,
# naming the label the page's mark names, its host answers 503 (not
# routed); down.
refused() {
	local name=$1 why
	why=$(sed -n "s/^<!-- labels: refused $name \([^ ]*\) -->\$/\1/p" "$page")
	block refused "$name" >"$work/compose.yaml"
	printf '{\n\tpersist_config off\n}\n:80 {\n\treverse_proxy {\n\t\tdynamic docker {\n\t\t\tlabels caddy-dicer caddy-docker-proxy traefik\n\t\t}\n\t}\n}\n' >"$work/Caddyfile"
	local svc host hosts=()
	{
		echo "services:"
		echo "  caddy:"
		echo "    image: $image"
		echo "    ports: [\"127.0.0.1:$port:80\"]"
		echo "    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\", \"$work/Caddyfile:/etc/caddy/Caddyfile:ro\"]"
		for svc in $(services "$work/compose.yaml"); do
			echo "  $svc:"
			echo "    image: $demo"
			echo "    environment: {PORT: \"8080\", NAME: \"$svc\"}"
		done
	} >"$work/override.yaml"
	for svc in $(services "$work/compose.yaml"); do
		host=$(label "$work/compose.yaml" "$svc" caddy)
		[[ -n $host ]] || host=$(label "$work/compose.yaml" "$svc" "traefik.http.routers.$svc.rule" | sed -n 's/^Host(`\([^`]*\)`).*/\1/p')
		[[ -n $host ]] || fail "refused $name: $svc: no host found in its labels"
		hosts+=("$host")
	done
	project="caddydicermigratingrefused$$$name"
	project=${project//-/}
	c up -d --quiet-pull >/dev/null 2>&1 || { c up -d; fail "refused $name: up"; }
	warned() { c logs caddy 2>&1 | grep -F '(R2f)' | grep -qF "$why"; }
	await "refused $name: Caddy warns about $why" 30 warned
	for host in "${hosts[@]}"; do
		[[ $(body "$host" /) == "503"* ]] || fail "refused $name: $host answers $(body "$host" /), want 503"
	done
	c down --volumes --remove-orphans >/dev/null 2>&1
	nothing_left "refused $name"
	echo "ok: refused $name: ${hosts[*]} not routed (503), warned about $why"
}

# Every mark of the page is run; a kind this script does not know fails.
declare -A after_of
while read -r kind name _; do
	case $kind in
	before | after | refused) ;;
	*) fail "$page: a mark of kind $kind: teach docs/migrating_compose.sh to run it" ;;
	esac
	[[ $kind == after ]] && after_of[$name]=1
done < <(sed -n 's/^<!-- labels: \([a-z]*\) \([^ ]*\).*-->$/\1 \2/p' "$page")
marks=0
while read -r kind name _; do
	marks=$((marks + 1))
	case $kind in
	after)
		block after "$name" >"$work/$name.after.yaml"
		run after "$name" "$work/$name.after.yaml"
		;;
	before)
		[[ -n ${after_of[$name]:-} ]] || fail "$page: before $name has no after"
		block after "$name" >"$work/$name.after.yaml"
		if [[ $name == sablier ]]; then
			# Sablier routes nothing by labels: its before file has no
			# host; its after one is run.
			echo "skip: before sablier (no routing labels; Sablier's middleware is the site's)"
			continue
		fi
		run before "$name" "$work/$name.after.yaml"
		;;
	refused)
		refused "$name"
		;;
	esac
done < <(sed -n 's/^<!-- labels: \([a-z]*\) \([^ ]*\).*-->$/\1 \2/p' "$page")
((marks >= 7)) || fail "$page: $marks marked Compose files, want the page's 7 or more"
echo "ok: the $marks Compose files of $page"
