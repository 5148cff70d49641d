#!/usr/bin/env bash
# Tests the Docker-only quick start with the docker-compose at hand (v1 or
# v2): up, requests routed by host, one service scaled to 2 (both answer,
# no reload), down, nothing left behind. Needs the images of `make image`;
# `make test-compose` builds them and runs this.
set -euo pipefail
cd "$(dirname "$0")"
if docker compose version >/dev/null 2>&1; then
	compose=(docker compose)
else
	compose=(docker-compose)
fi
project="caddydicertest$$"
c() { "${compose[@]}" -p "$project" -f compose.yaml "$@"; }

# A free port on loopback, for Caddy's published port.
for _ in $(seq 50); do
	port=$((20000 + RANDOM % 20000))
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break
done
export HTTP_PORT=$port

fail() {
	echo "FAIL: $*" >&2
	c ps >&2 || true
	c logs --tail 30 caddy >&2 || true
	exit 1
}
down() {
	c down --volumes --remove-orphans >/dev/null 2>&1 || true
}
trap down EXIT

# body HOST: what Caddy answers for HOST, with its status: "200 hello from x".
body() {
	curl -s -m 5 -o /tmp/"$project".body -w '%{http_code}' -H "Host: $1" "http://127.0.0.1:$port/" || true
	echo " $(cat /tmp/"$project".body 2>/dev/null)"
	rm -f /tmp/"$project".body
}
# await WHAT SECONDS COMMAND...: run COMMAND until it succeeds, within SECONDS.
await() {
	local what=$1 deadline=$((SECONDS + $2))
	shift 2
	until "$@"; do
		((SECONDS < deadline)) || fail "$what: not within the deadline"
		sleep 0.2
	done
}
answers() { [[ $(body "$1") == "$2"* ]]; }

c up -d
await "shop.localhost routed" 60 answers shop.localhost "200 hello from"
await "blog.localhost routed" 30 answers blog.localhost "200 hello from"
[[ $(body nobody.localhost) == "503"* ]] || fail "nobody.localhost: $(body nobody.localhost), want 503"
echo "ok: shop and blog routed by host, an unknown host 503"

c up -d --scale shop=2
two_shops() {
	local seen=()
	for _ in $(seq 20); do seen+=("$(body shop.localhost)"); done
	[[ $(printf '%s\n' "${seen[@]}" | grep '^200 hello from' | sort -u | wc -l) -eq 2 ]]
}
await "shop scaled to 2, both answering" 60 two_shops
restarts=$(docker inspect -f '{{.RestartCount}}' "$(c ps -q caddy)")
echo "ok: shop scaled to 2, both answer (caddy restarts: $restarts)"

c down --volumes --remove-orphans
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project"; docker network ls -q --filter "label=com.docker.compose.project=$project")
[[ -z $left ]] || fail "left behind after down: $left"
echo "ok: down, nothing left"
