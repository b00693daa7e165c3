"""Every TensorRT name the runtime uses exists in the real bindings of TensorRT 10 and 11.

The names come from the bindings wheels on PyPI, extracted once by tools/trt_names.py into
tests/fixtures/trt_names.json (nothing is downloaded here). Three checks meet:
- the names the runtime's source touches (read with ast) are the ones it declares
  (engines.backends.trt.env.TRT_NAMES, TRT_NAMES_10);
- the declared names exist in both versions (TRT_NAMES_10 in 10.x only: the data shows
  11.x lost them, which is why the runtime forks there);
- the stand-in `tensorrt` defines no name the real one lacks, so a test passing on the
  stand-in cannot rest on an invented call.
"""
from __future__ import annotations

import ast
import json
import struct
import zipfile
from pathlib import Path

import pytest

from engines.backends.trt.env import TRT_NAMES, TRT_NAMES_10
from tests.fixtures.fake_cupy import FakeCupy
from tests.fixtures.fake_tensorrt import V10, V11, FakeTensorRT
from tools.trt_names import names_of_wheel, rodata

ROOT = Path(__file__).resolve().parent.parent
DATA = json.loads((ROOT / "tests" / "fixtures" / "trt_names.json").read_text())
SOURCES = sorted((ROOT / "engines" / "backends" / "trt").glob("*.py"))
# Variables (and self attributes) that hold TensorRT objects in the runtime's source.
TRT_OBJECTS = {"trt", "builder", "network", "parser", "config", "shapes", "runtime", "engine", "context", "severity"}


def names(version: str) -> set[str]:
    return set(DATA["common"]) | set(DATA["only"][version])


def present(name: str, version: str) -> bool:
    """In the bindings: listed, or the tail of a listed string (the linker shares string tails)."""
    have = names(version)
    return name in have or any(s.endswith(name) for s in have)


def _root(node: ast.expr) -> str | None:
    """The variable an attribute chain starts from (`config` in config.get_timing_cache().serialize)."""
    while True:
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "self":
                return node.attr.lstrip("_")
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Name):
            return node.id
        else:
            return None


def used_names() -> set[str]:
    """TensorRT names in the runtime's source: attributes reached from a TensorRT object, and
    the methods of a class that derives from one of TensorRT's (the logger's `log`)."""
    found: set[str] = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and _root(node.value) in TRT_OBJECTS:
                if not (node.attr.startswith("__") and node.attr != "__version__"):
                    found.add(node.attr)
            if isinstance(node, ast.ClassDef) and any(_root(b) == "trt" for b in node.bases):
                found.update(f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name in ("log",))
    return found


def test_the_names_data_covers_both_versions_and_tells_them_apart() -> None:
    assert sorted(w["version"] for w in DATA["wheels"]) == [V10, V11]
    assert all(len(w["sha256"]) == 64 and w["wheel"].endswith(".whl") for w in DATA["wheels"])
    for name in ("FP16", "EXPLICIT_BATCH", "platform_has_fast_fp16"):  # removed in 11 (release notes)
        assert present(name, V10) and not present(name, V11), name
    assert present("execute_async_v3", V11) and not present("execute_async_v9", V11)


def test_the_runtime_declares_exactly_the_names_its_source_uses() -> None:
    used = used_names()
    assert used - (TRT_NAMES | TRT_NAMES_10) == set(), "declare these in engines/backends/trt/env.py"
    assert (TRT_NAMES | TRT_NAMES_10) - used == set(), "declared but not used"


@pytest.mark.parametrize("version", [V10, V11])
def test_every_name_the_runtime_uses_exists_in_the_bindings(version: str) -> None:
    wanted = TRT_NAMES | (TRT_NAMES_10 if version.startswith("10.") else set())
    assert sorted(n for n in wanted if not present(n, version)) == []
    if version.startswith("11."):
        assert not any(present(n, version) for n in TRT_NAMES_10)  # hence the fork in trt_build


@pytest.mark.parametrize("version", [V10, V11])
def test_the_stand_in_defines_only_real_names(version: str) -> None:
    fake = FakeTensorRT(version, FakeCupy())
    defined = {n for n in vars(fake.module) if not n.startswith("_")} | {"__version__"}
    for cls in fake.classes():
        defined |= {n for n in vars(cls) if not n.startswith("_")}
    assert sorted(n for n in defined if not present(n, version)) == []
    assert ("FP16" in vars(fake.module.BuilderFlag)) == version.startswith("10.")


def _elf(strings: list[bytes]) -> bytes:
    """A minimal 64-bit ELF file whose .rodata holds these NUL-terminated strings."""
    shstr = b"\0.rodata\0.shstrtab\0"
    ro = b"\x01\x02" + b"".join(s + b"\0" for s in strings)
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    data_off = 64
    shoff = data_off + len(ro) + len(shstr)
    struct.pack_into("<Q", header, 0x28, shoff)
    struct.pack_into("<HHH", header, 0x3A, 64, 3, 2)

    def section(name: int, offset: int, size: int) -> bytes:
        return struct.pack("<IIQQQQ", name, 1, 0, 0, offset, size) + bytes(24)

    sections = bytes(64) + section(1, data_off, len(ro)) + section(9, data_off + len(ro), len(shstr))
    return bytes(header) + ro + shstr + sections


def test_the_tool_reads_names_from_a_bindings_wheel(tmp_path: Path) -> None:
    wheel = tmp_path / "tensorrt_cu12_bindings-10.0.0-cp311-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("tensorrt_bindings/tensorrt.so", _elf([b"execute_async_v3", b"UINT8", b"N8nvinfer17ITensorE",
                                                          b"a docstring, not a name"]))
        z.writestr("tensorrt_bindings/__init__.py", "from .tensorrt import *\n__version__ = '10.0.0'\n"
                                                    "def common_enter(this):\n    return this\n")
    version, found = names_of_wheel(wheel)
    assert version == "10.0.0"
    assert found == {"execute_async_v3", "UINT8", "common_enter", "__version__"}
    with pytest.raises(ValueError, match="not a 64-bit"):
        rodata(b"MZ not an ELF file at all")
