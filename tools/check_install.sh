#!/usr/bin/env bash
# A normal (non-editable) install, used as a user would: build the wheel, install it into a
# fresh virtual environment, and run every command from a folder away from the checkout
# (so nothing can be imported from the source tree). CI runs this beside the test suite.
#   tools/check_install.sh            (uses .venv/bin/python of `make install` to build media)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}
MEDIA_PY=${MEDIA_PY:-$ROOT/.venv/bin/python}
# The lock's versions (as `make` installs them); LOCK= installs from the wheel's own ranges.
LOCK=${LOCK-constraints.txt}
lock_args=()
if [ -n "$LOCK" ]; then case $LOCK in /*) lock_args=(-c "$LOCK") ;; *) lock_args=(-c "$ROOT/$LOCK") ;; esac; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
step() { echo "check_install: $*"; }

step "building the wheel"
"$PY" -m pip wheel -q --no-deps . -w "$work/dist" 2>&1 | grep -v "^WARNING: Location" || true
wheel=$(ls "$work"/dist/facestream-*.whl)
"$PY" -c 'import sys, zipfile; sys.exit(0 if "stream/presets/fast.yaml" in zipfile.ZipFile(sys.argv[1]).namelist() else "the presets are not in the wheel")' "$wheel"
step "installing $(basename "$wheel") into a fresh venv"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "${lock_args[@]}" "$wheel" 2>&1 | grep -v "^WARNING: Location" || true
fs="$work/venv/bin/facestream"
cd "$work"

step "media: a 2 s clip of six faces and the astronaut (made with the checkout's venv)"
"$MEDIA_PY" - <<'PY'
import cv2
from stream.media.demo_clips import astronaut, make_demo_clip
make_demo_clip("clip.mp4", seconds=2.0, size=(640, 360))
cv2.imwrite("face.png", astronaut())
PY
# A stand-in ArcFace file (the real one cannot be downloaded here), for triton-repo.
mkdir -p "$work/models"
(cd "$ROOT" && "$MEDIA_PY" -c 'import sys; from tools.synth.face_models import make_arcface; make_arcface(sys.argv[1])' \
    "$work/models/w600k_r50.onnx")

step "facestream --help, serve --help, models, doctor"
"$fs" --help > /dev/null
"$fs" serve --help > /dev/null
"$fs" models > /dev/null
"$fs" doctor > doctor.txt || { cat doctor.txt; echo "doctor did not exit 0"; exit 1; }
grep -q "^Plan for the default run" doctor.txt && grep -q "CUDA device" doctor.txt || { cat doctor.txt; exit 1; }
step "triton-repo --backend python: the server to run is one that ships (NVIDIA's container)"
"$fs" triton-repo repo --backend python --models-dir models > triton.txt
grep -q "nvcr.io/nvidia/tritonserver" triton.txt && ! grep -q "env.py" triton.txt && [ -s repo/arcface_w600k_r50/config.pbtxt ] \
    || { cat triton.txt; echo "triton-repo did not point at the container"; exit 1; }
step "models quantize: an INT8 file and its report beside the stand-in ArcFace (calibrated on the astronaut)"
"$fs" models quantize arcface_w600k_r50 --models-dir models --calibrate face.png > quantize.txt \
    || { cat quantize.txt; echo "models quantize failed"; exit 1; }
[ -s models/w600k_r50_int8.onnx ] && [ -s models/w600k_r50_int8.json ] && grep -q "within budget" quantize.txt \
    || { cat quantize.txt; echo "models quantize wrote no checked file"; exit 1; }
step "swap --config fast"
"$fs" swap --config fast --source face.png --input clip.mp4 --output fast.mp4 -q
step "swap --config quality"
"$fs" swap --config quality --source face.png --input clip.mp4 --output quality.mp4 -q
step "live (the clip as a camera, to a file)"
"$fs" live --source face.png --input clip.mp4 --output live.mp4 --duration 3 -q
for f in fast.mp4 quality.mp4 live.mp4; do [ -s "$f" ] || { echo "$f was not written"; exit 1; }; done

step "demo without the demo extra: one line saying how to get it"
if "$fs" demo --out-dir demo --seconds 1 -q 2> err.txt; then echo "demo ran without its extra"; exit 1; fi
[ "$(grep -c . err.txt)" -eq 1 ] && grep -q "facestream\[demo\]" err.txt || { cat err.txt; exit 1; }
step "serve without --source or the demo extra: one line"
if timeout 60 "$fs" serve --port 0 2> err.txt; then echo "serve ran without a face"; exit 1; fi
[ "$(grep -c . err.txt)" -eq 1 ] && grep -q -- "--source PHOTO" err.txt || { cat err.txt; exit 1; }
step "demo with the extra"
"$work/venv/bin/python" -m pip install -q "${lock_args[@]}" "${wheel}[demo]" 2>&1 | grep -v "^WARNING: Location" || true
"$fs" demo --out-dir demo --seconds 1 -q > /dev/null
[ -s demo/demo_swapped.mp4 ] && [ -s demo/demo_contact_sheet.png ] || { echo "the demo wrote no files"; exit 1; }
step "all commands ran from the wheel"
