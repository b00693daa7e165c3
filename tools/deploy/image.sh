#!/usr/bin/env bash
# `make image`: the CPU image, localhost/facestream:<version> and :latest, built with no
# container registry and no package index: the base from Debian's mirror (base.sh), the
# wheels from this machine's pip (wheelhouse.sh), then `podman build -f deploy/Containerfile`.
# Prints how long each step took and the image's size. Podman's settings: those `make
# image-deps` installs (deploy/containers.conf as a drop-in).
set -euo pipefail
cd "$(dirname "$0")/../.."
IMAGE=${IMAGE:-localhost/facestream}
PY=${PYTHON:-.venv/bin/python}
version=$("$PY" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
context=build/image-context
took() { echo "image: $1 took $(($(date +%s) - $2)) s"; }

t=$(date +%s)
tools/deploy/base.sh
took "the base" "$t"

t=$(date +%s)
PYTHON=$PY tools/deploy/wheelhouse.sh "$context/wheels"
took "the wheelhouse" "$t"

old=$(podman image inspect "$IMAGE:latest" --format '{{.Id}}' 2>/dev/null || true)
t=$(date +%s)
podman build --quiet --file deploy/Containerfile --build-arg "VERSION=$version" \
	--tag "$IMAGE:$version" --tag "$IMAGE:latest" "$context" >/dev/null
took "podman build" "$t"
rm -rf "$context"
# The image the tags named before goes, unless the build reused it or a container uses it
# (the build's cached layers stay: `podman image prune` removes those).
new=$(podman image inspect "$IMAGE:latest" --format '{{.Id}}')
if [ -n "$old" ] && [ "$old" != "$new" ]; then podman rmi "$old" >/dev/null 2>&1 || true; fi
size=$(podman image inspect "$IMAGE:$version" --format '{{.Size}}')
echo "image: $IMAGE:$version and $IMAGE:latest, $((size / 1000000)) MB"
echo "run it: podman run --rm $IMAGE:latest doctor"
