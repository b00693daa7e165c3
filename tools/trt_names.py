"""The names TensorRT's Python bindings define, per version, taken from the bindings wheels
on PyPI (they install anywhere: the libraries they need are not in them), written to
tests/fixtures/trt_names.json so that a test can check every name our TensorRT runtime
uses against TensorRT 10 and 11 without downloading anything.

The wheels carry no .pyi stubs: the names are the identifier-shaped strings of the binding
module's read-only data (pybind11 keeps every class, method, property and enum value name
there as a C string), plus the top-level names of the package's __init__.py. The linker
merges a string that ends another one into it (INT8 is the tail of UINT8), so a name counts
as present when it is one of these strings or the end of one.

    python tools/trt_names.py                       # download the default wheels with pip
    python tools/trt_names.py some_bindings.whl...  # or read wheels already here
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import re
import struct
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "trt_names.json"
# The newest of each major line on PyPI for CPython 3.11, x86-64 Linux.
DEFAULT_WHEELS = ("tensorrt-cu12-bindings==10.16.1.11", "tensorrt-cu13-bindings==11.4.0.106")
IDENT = re.compile(rb"(?<![\x20-\x7e])([A-Za-z_][A-Za-z0-9_]*)\x00")
# C++ type names of the type-info records (N8nvinfer17ITensorE, St6vectorImSaImEE, ...), not Python names.
MANGLED = re.compile(r"(?=[FNPSZK]).*?[A-Za-z]\d+[a-z_]")


def rodata(elf: bytes) -> bytes:
    """The .rodata section of a 64-bit little-endian ELF file."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize)
        return name, offset, size

    _, str_off, _ = section(shstrndx)
    for i in range(shnum):
        name, offset, size = section(i)
        end = elf.index(b"\0", str_off + name)
        if elf[str_off + name:end] == b".rodata":
            return elf[offset:offset + size]
    raise ValueError("no .rodata section")


def names_of_wheel(wheel: Path) -> tuple[str, set[str]]:
    """(version, names) of one tensorrt bindings wheel."""
    with zipfile.ZipFile(wheel) as z:
        files = z.namelist()
        so = next(f for f in files if re.fullmatch(r"tensorrt[^/]*/tensorrt[^/]*\.so", f))
        init = next(f for f in files if re.fullmatch(r"tensorrt[^/]*/__init__\.py", f))
        data = rodata(z.read(so))
        source = z.read(init).decode()
    names = {name for m in IDENT.finditer(data) if not MANGLED.match(name := m.group(1).decode())}
    version = ""
    for node in ast.parse(source).body:
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for t in node.targets if isinstance(t, ast.Name)]
            if any(t.id == "__version__" for t in targets) and isinstance(node.value, ast.Constant):
                version = str(node.value.value)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        names.update(t.id for t in targets)
    if not version:
        raise ValueError(f"{wheel.name}: no __version__ in {init}")
    return version, names


def download(specs: list[str], folder: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.11",
           "--platform", "manylinux_2_28_x86_64", "-d", str(folder), *specs]
    subprocess.run(cmd, check=True)
    return sorted(folder.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheels", nargs="*", type=Path, help="bindings wheels (default: download %s)"
                        % ", ".join(DEFAULT_WHEELS))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = args.wheels or download(list(DEFAULT_WHEELS), Path(tmp))
        found = {}
        sources = []
        for wheel in wheels:
            version, names = names_of_wheel(wheel)
            found[version] = names
            sources.append({"version": version, "wheel": wheel.name,
                            "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()})
    common = set.intersection(*found.values())
    doc = {
        "about": "Names in TensorRT's Python bindings (tools/trt_names.py): a name is present when it is "
                 "listed for that version or is the end of a listed name (the linker merges string tails).",
        "wheels": sources,
        "common": sorted(common),
        "only": {version: sorted(names - common) for version, names in sorted(found.items())},
    }
    args.out.write_text(json.dumps(doc, indent=0) + "\n")
    print(f"wrote {args.out}: {len(common)} names in all, "
          + ", ".join(f"{v}: {len(n - common)} of its own" for v, n in sorted(found.items())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
