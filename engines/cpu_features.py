"""What this CPU offers for INT8 inference, read from the kernel's flags.

ONNX Runtime and OpenVINO run a U8S8 (unsigned activations, signed weights) INT8 model fast
only on CPUs with 8-bit dot-product instructions: VNNI (AVX-512 VNNI, or AVX-VNNI on recent
laptop cores) or AMX on x86, the dot-product extension on 64-bit Arm. Elsewhere an INT8 file
is slower or barely faster than its float original, so `--precision auto` picks one only
where `int8_fast()` says so.
"""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# Kernel flag -> what we call it; the first group is x86, the second 64-bit Arm.
INT8_FLAGS = {
    "avx512_vnni": "AVX-512 VNNI",
    "avx_vnni": "AVX-VNNI",
    "amx_int8": "AMX-INT8",
    "asimddp": "Arm dot product",
    "i8mm": "Arm int8 matrix multiply",
}


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU's model name and its INT8 instructions (names from INT8_FLAGS)."""

    model: str
    int8: tuple[str, ...]

    @property
    def int8_fast(self) -> bool:
        return bool(self.int8)

    def line(self) -> str:
        found = ", ".join(self.int8) if self.int8 else "none (no VNNI, AMX or Arm dot product)"
        return f"{self.model}: INT8 instructions {found}"


def parse_cpuinfo(text: str) -> CpuFeatures:
    """The model name and INT8 flags in /proc/cpuinfo's text (its first processor's)."""
    model, flags = "", set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key in ("model name", "cpu model", "hardware") and not model:
            model = value.strip()
        elif key in ("flags", "features") and not flags:
            flags = set(value.split())
    found = tuple(name for flag, name in INT8_FLAGS.items() if flag in flags)
    return CpuFeatures(model or platform.processor() or platform.machine() or "unknown CPU", found)


@functools.cache
def cpu_features() -> CpuFeatures:
    """This machine's CPU (cached: the flags do not change while a process runs). Where
    /proc/cpuinfo is missing (macOS, Windows), no INT8 instructions are assumed."""
    try:
        text = CPUINFO.read_text(errors="replace")
    except OSError:
        text = ""
    return parse_cpuinfo(text)
