#!/usr/bin/env bash
# The CPU image's base, made here instead of pulled: Debian bookworm's minimal root file
# system (debootstrap --variant=minbase from Debian's apt mirror), imported into podman under
# the name the Containerfile's FROM names, so `podman build` needs no container registry.
# Skipped when podman already holds an image of that name. Needs root (debootstrap chroots).
set -euo pipefail
BASE=${BASE:-docker.io/library/debian:bookworm-slim}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if podman image exists "$BASE"; then
	echo "base image: $BASE (present)"
	exit 0
fi
start=$SECONDS
root=$(mktemp -d "${TMPDIR:-/tmp}/facestream-base.XXXXXX")
trap 'rm -rf "$root"' EXIT
debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || {
	tail -20 "$root.log" >&2
	echo "facestream: error: debootstrap of bookworm from $MIRROR failed (log above)" >&2
	exit 1
}
rm -f "$root.log"
# Slim as debian:bookworm-slim is: no downloaded packages, package lists, docs, manuals or
# translations, and dpkg told to leave them out of what the image's apt-get installs later.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
	"$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
cat > "$root/etc/dpkg/dpkg.cfg.d/slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
CFG
tar -C "$root" -c . | podman import --quiet --change 'CMD ["bash"]' - "$BASE" >/dev/null
echo "base image: $BASE (bootstrapped in $((SECONDS - start)) s)"
