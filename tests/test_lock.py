"""The lock (constraints.txt, and the Triton server's tools/triton/constraints.txt) agrees
with the ranges it was resolved from, and is what this venv holds when `make` installed it.

pyproject.toml keeps ranges for other environments; the lock pins what the suite passed
with. A range moved past the lock, or a dependency added without a pin, fails here with the
fix: `make lock`.
"""
from __future__ import annotations

import os
import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
PIN = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>[^ ;]+) ; (?P<marker>.+)$")


def read_lock(path: Path) -> dict[str, tuple[str, Marker]]:
    pins: dict[str, tuple[str, Marker]] = {}
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        match = PIN.match(line)
        assert match, f"{path.name}: not 'name==version ; marker': {line!r}"
        name = canonicalize_name(match["name"])
        assert name not in pins, f"{path.name}: {name} pinned twice"
        pins[name] = (match["version"], Marker(match["marker"]))
    return pins


def _pyproject_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    wanted = list(project["dependencies"]) + [r for extra in ("demo", "test", "triton") for r in extras[extra]]
    return [Requirement(r) for r in wanted if not r.startswith("facestream")]


@pytest.mark.parametrize("lock, requirements", [
    ("constraints.txt", None),
    ("tools/triton/constraints.txt", "tools/triton/requirements.txt"),
])
def test_every_requirement_is_pinned_within_its_range(lock: str, requirements: str | None) -> None:
    pins = read_lock(ROOT / lock)
    if requirements is None:
        wanted = _pyproject_requirements()
    else:
        lines = [line.split("#")[0].strip() for line in (ROOT / requirements).read_text().splitlines()]
        wanted = [Requirement(line) for line in lines if line]
    assert wanted
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} is not in {lock}: run `make lock`"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{lock} pins {name}=={version}, outside {req}: " \
                                                                  "run `make lock`"
    markers = {str(marker) for _, marker in pins.values()}
    assert len(markers) == 1, f"{lock}: every pin holds for the one platform it was resolved on"


def test_make_and_check_install_install_from_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK \?= constraints\.txt$", makefile, re.M)
    assert "pip install --quiet $(PIP_LOCK)" in makefile and "-c $(LOCK)" in makefile
    assert "LOCK=$(LOCK) tools/check_install.sh" in makefile
    assert '"${lock_args[@]}" "$wheel"' in (ROOT / "tools" / "check_install.sh").read_text()


@pytest.mark.skipif(not os.environ.get("FACESTREAM_LOCK"), reason="this venv was not installed from a lock by make")
def test_this_venv_holds_the_locks_versions() -> None:
    pins = read_lock(ROOT / os.environ["FACESTREAM_LOCK"])
    mismatched = []
    for name, (version, marker) in pins.items():
        if not marker.evaluate() or name in ("pip", "setuptools"):
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            mismatched.append(f"{name} missing (locked {version})")
            continue
        if Version(installed) != Version(version):
            mismatched.append(f"{name} {installed} (locked {version})")
    assert not mismatched, "the venv differs from the lock: " + ", ".join(mismatched)
