#!/usr/bin/env bash
# Builds the real-app test image from Debian packages, pulling nothing, and
# prints its reference on the last line of stdout:
#
#   caddy-dicer-realapps-base:<hash>  debootstrap --variant=minbase of this
#       machine's Debian suite with the packages listed in ./packages, from
#       the mirror apt uses here, then `docker import`; <hash> covers the
#       package list, the suite and the architecture.
#   caddy-dicer-realapps:<hash>  that base plus ./rootfs (the apps' scripts
#       and nginx.conf), built with ./Dockerfile; <hash> covers every file
#       of this folder and the base.
#
# Each image is built once per content: an image with its tag already on
# the Engine is reused, so reruns and CI runs after the first take seconds.
# Needs root and debootstrap (apt-get install debootstrap) for the base.
# Concurrent runs take turns through a lock file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lock=${TMPDIR:-/tmp}/caddy-dicer-realapps-build.lock

exec 9>"$lock"
flock 9

suite=${REALAPPS_SUITE:-$(. /etc/os-release && echo "${VERSION_CODENAME:-}")}
[ -n "$suite" ] || { echo "build.sh: cannot tell this machine's Debian suite; set REALAPPS_SUITE" >&2; exit 1; }
arch=$(dpkg --print-architecture 2>/dev/null || uname -m)

# The mirror apt uses here: the first URIs: of a deb822 source, else the
# first deb line of sources.list.
mirror=${REALAPPS_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }')
fi
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1 == "deb" && $0 !~ /security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }')
fi
mirror=${mirror:-http://deb.debian.org/debian}

packages=$(grep -v '^#' "$here/packages" | grep -v '^[[:space:]]*$' | sort | paste -sd, -)
base_hash=$(printf '%s\n' "$packages" "$suite" "$arch" | sha256sum | cut -c1-12)
base=caddy-dicer-realapps-base:$base_hash

if docker image inspect "$base" >/dev/null 2>&1; then
	echo "build.sh: reusing $base" >&2
else
	command -v debootstrap >/dev/null || { echo "build.sh: $base is missing and debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
	[ "$(id -u)" = 0 ] || { echo "build.sh: $base is missing and debootstrap needs root" >&2; exit 1; }
	work=$(mktemp -d "${TMPDIR:-/tmp}/caddy-dicer-realapps.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	start=$(date +%s)
	echo "build.sh: debootstrap $suite ($arch) from $mirror with $packages" >&2
	# The downloaded packages are kept for the next build.
	debs=${REALAPPS_DEB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/caddy-dicer/realapps-debs}
	mkdir -p "$debs"
	if ! debootstrap --variant=minbase --cache-dir="$debs" --include="$packages" "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
		tail -n 30 "$work/debootstrap.log" >&2
		echo "build.sh: debootstrap failed (its log above)" >&2
		exit 1
	fi
	# What an image does not need: package caches, lists, documentation.
	rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"* \
		"$work/root/usr/share/doc" "$work/root/usr/share/man" "$work/root/usr/share/info" "$work/root/usr/share/locale"
	tar --numeric-owner -C "$work/root" -c . | docker import \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		--change 'LABEL caddy-dicer.test.image=realapps-base' \
		--message "debootstrap --variant=minbase $suite with $packages" - "$base" >/dev/null
	rm -rf "$work"
	trap - EXIT
	echo "build.sh: built $base in $(($(date +%s) - start))s" >&2
fi

image_hash=$( (cd "$here" && find . -type f -print0 | sort -z | xargs -0 stat -c '%n %a' && find . -type f -print0 | sort -z | xargs -0 cat && echo "$base") | sha256sum | cut -c1-12)
ref=caddy-dicer-realapps:$image_hash
if docker image inspect "$ref" >/dev/null 2>&1; then
	echo "build.sh: reusing $ref" >&2
else
	DOCKER_BUILDKIT=0 docker build --quiet --build-arg "BASE=$base" --tag "$ref" "$here" >&2
	echo "build.sh: built $ref" >&2
fi
echo "$ref"
