"""OpenCV's CPU dispatch: which instruction sets its optimised code may use here, and the
levels it can be narrowed to.

OpenCV compiles its hot loops several times (SSE4.1, AVX2, AVX-512, NEON ...) and picks one
at run time by the CPU; x86 builds also call Intel's IPP, which dispatches on its own. The
picked code may round differently. Both are narrowed from the environment, read when cv2
is imported: `OPENCV_CPU_DISABLE` (a comma-separated list of OpenCV's feature names) and
`OPENCV_IPP` (`avx2`, `sse42`, or `disabled`).

`cv2.setUseOptimized(False)` is not a level here: OpenCV keeps the IPP switch per thread,
so it turns IPP off in the calling thread only, and the pipeline's stage threads keep it.
The process-wide equivalent is the last level below (the baseline only, IPP off), which
gives the same pixels.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class DispatchLevel:
    """One way to run OpenCV: the features turned off, and IPP's level."""

    name: str
    disabled: tuple[str, ...] = ()  # OpenCV feature names for OPENCV_CPU_DISABLE
    ipp: str | None = None  # OPENCV_IPP: None (IPP's own choice), "avx2", "sse42" or "disabled"

    def environ(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """`base` (this process's environment by default) with this level selected."""
        env = dict(os.environ if base is None else base)
        env.pop("OPENCV_CPU_DISABLE", None)
        env.pop("OPENCV_IPP", None)
        if self.disabled:
            env["OPENCV_CPU_DISABLE"] = ",".join(self.disabled)
        if self.ipp:
            env["OPENCV_IPP"] = self.ipp
        return env

    def describe(self) -> str:
        parts = [f"OPENCV_CPU_DISABLE={','.join(self.disabled)}"] if self.disabled else []
        parts += [f"OPENCV_IPP={self.ipp}"] if self.ipp else []
        return " ".join(parts) or "(nothing narrowed)"


def dispatched_features(features_line: str) -> list[str]:
    """The features OpenCV dispatches to on this CPU, lowest first, from
    `cv2.getCPUFeaturesLine()` ('SSE SSE2 SSE3 *SSE4.1 ... *AVX2? ...': a star marks a
    dispatched feature, a question mark one that is present but turned off)."""
    return [t[1:].rstrip("?") for t in features_line.split() if t.startswith("*")]


def levels(features_line: str, has_ipp: bool) -> list[DispatchLevel]:
    """The levels to try on a CPU with these features: everything; without AVX-512; without
    AVX2 and above (IPP narrowed alike); IPP off; the baseline only with IPP off. Each only
    where it narrows something on this CPU and build."""
    dispatched = dispatched_features(features_line)
    ipp_off = "disabled" if has_ipp else None
    avx512 = next((i for i, f in enumerate(dispatched) if f.startswith("AVX512")), None)
    avx2 = dispatched.index("AVX2") if "AVX2" in dispatched else None
    candidates = [DispatchLevel("all dispatched")]
    if avx512 is not None:
        candidates.append(DispatchLevel("no AVX-512", tuple(dispatched[avx512:]), "avx2" if has_ipp else None))
    if avx2 is not None:
        candidates.append(DispatchLevel("no AVX2 or above", tuple(dispatched[avx2:]), "sse42" if has_ipp else None))
    if has_ipp:
        candidates.append(DispatchLevel("IPP off", (), ipp_off))
    if dispatched:
        candidates.append(DispatchLevel("baseline only, IPP off", tuple(dispatched), ipp_off))
    found: list[DispatchLevel] = []
    for level in candidates:
        if all((level.disabled, level.ipp) != (other.disabled, other.ipp) for other in found):
            found.append(level)
    return found


def has_ipp() -> bool:
    """Whether this cv2 was built with IPP (x86 wheels are; ARM ones are not), on or off."""
    import cv2

    return cv2.ipp.getIppVersion().lower().startswith("ipp")


def current_levels() -> list[DispatchLevel]:
    """The levels this CPU and this cv2 can select, whatever this process was started with."""
    import cv2

    return levels(cv2.getCPUFeaturesLine(), has_ipp())
