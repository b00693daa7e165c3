#!/usr/bin/env bash
# The wheels the CPU image installs, made on this machine so the image's pip never reaches an
# index: every runtime dependency of the project (no extras) at the lock's versions
# (constraints.txt), as wheels for CPython 3.11 on Linux x86_64, which Debian bookworm's python3
# is too. The dependencies are cached under ~/.cache/facestream/wheelhouse/<key> (key: a hash
# of the lock and of pyproject.toml's dependency list), so only a new lock fetches again; the
# project's own wheel is built fresh each time.
#   tools/deploy/wheelhouse.sh OUT_DIR    fills OUT_DIR with the wheels (hard links into the cache)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: tools/deploy/wheelhouse.sh OUT_DIR}
PY=${PYTHON:-.venv/bin/python}
LOCK=${LOCK:-constraints.txt}
cache_root=${FACESTREAM_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/facestream/wheelhouse}

key=$("$PY" - "$LOCK" <<'PY'
import hashlib, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
digest = hashlib.sha256(open(sys.argv[1], "rb").read() + "\n".join(deps).encode()).hexdigest()
print(digest[:16])
PY
)
cache="$cache_root/$key"
start=$SECONDS
if [ -f "$cache/.complete" ]; then
	echo "wheelhouse: $cache (cached)"
else
	rm -rf "$cache.tmp"
	mkdir -p "$cache.tmp"
	# pip wheel of the project resolves its runtime dependencies under the lock and leaves a
	# wheel of each (downloaded, or built from an sdist); the project's own wheel is dropped.
	"$PY" -m pip wheel --quiet -c "$LOCK" --build-constraint "$LOCK" --wheel-dir "$cache.tmp" . \
		2>&1 | grep -v "^WARNING: Location" || true
	rm -f "$cache.tmp"/facestream-*.whl
	[ -n "$(ls "$cache.tmp"/*.whl 2>/dev/null)" ] || {
		echo "facestream: error: pip wheel left no wheels in $cache.tmp" >&2
		exit 1
	}
	touch "$cache.tmp/.complete"
	rm -rf "$cache"
	mv "$cache.tmp" "$cache"
	echo "wheelhouse: $cache ($(ls "$cache"/*.whl | wc -l) wheels, built in $((SECONDS - start)) s)"
fi
rm -rf "$out"
mkdir -p "$out"
cp -l "$cache"/*.whl "$out"/ 2>/dev/null || cp "$cache"/*.whl "$out"/
# A fixed timestamp in the wheel (SOURCE_DATE_EPOCH: 1980, zip's earliest): the same sources
# give the same bytes, so podman's layer cache keeps the image's venv until the code changes.
SOURCE_DATE_EPOCH=315532800 "$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$out" . 2>&1 | grep -v "^WARNING: Location" || true
ls "$out"/facestream-*.whl >/dev/null
echo "wheelhouse: $out ($(du -sh "$out" | cut -f1), project wheel built; $((SECONDS - start)) s in all)"
