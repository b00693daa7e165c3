"""Which file of a model a run loads (`--precision`, `models.precision`), and on which runtime
(`--runtime auto`, the default).

Precision:
- `fp32`: the float file as found.
- `fp16`: the float file, with TensorRT building half-precision engines (a GPU's choice; the
  CPU runtimes gain nothing from it and refuse it).
- `int8`: each model's INT8 twin (`<stem>_int8.onnx`) where there is one, checked or not;
  the others stay in float. TensorRT builds an INT8 engine from it.
- `auto`: on the CPU runtimes (ONNX Runtime's CPU provider, OpenVINO), an INT8 twin whose
  report is fresh and within its family's budget, on a CPU with INT8 instructions (VNNI, AMX,
  Arm dot product); otherwise the float file. On a GPU runtime it leaves the choice to the
  VRAM plan (FP16 engines on TensorRT), as before. A Triton server serves what its repository
  holds (`facestream triton-repo --precision`): the client's files are not swapped.

Runtime `auto`: ONNX Runtime where it has a GPU provider (CUDA, TensorRT EP, as before);
on the CPU, for each model, the runtime its INT8 report measured faster on this CPU model for
the file chosen (OpenVINO where installed and faster), else ONNX Runtime.

Both choices are made per file, where a model class asks the factory for its runtime, so
every model kind and every runtime goes through them the same way.
"""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from engines.backends.base import HostAllocator, InferenceRuntime, RuntimeOptions
from engines.backends.registry import AUTO, RuntimeFactory, runtime_factory
from engines.int8 import QuantReport, fresh_report, int8_path, is_int8_name, read_report

PRECISIONS = ("auto", "fp32", "fp16", "int8")
CPU_RUNTIMES = ("onnxruntime", "openvino")


def check_precision(precision: str, options: RuntimeOptions) -> None:
    """ValueError, one line, for an unknown precision or one the runtime cannot honour."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if precision == "fp16" and not on_gpu(options):
        raise ValueError(f"precision fp16 is for GPU runtimes (--runtime tensorrt, or ONNX Runtime on CUDA); "
                         f"runtime {options.kind} on the CPU runs fp32 or int8")


def on_gpu(options: RuntimeOptions) -> bool:
    """Whether the models run on an NVIDIA GPU (TensorRT, Triton's server, ONNX Runtime's CUDA
    or TensorRT provider first; `auto` is ONNX Runtime there)."""
    if options.kind in ("tensorrt", "triton"):
        return True
    if options.kind not in ("onnxruntime", AUTO):
        return False
    from engines.backends.ort import runs_on_cuda

    return runs_on_cuda(options.providers)


def resolved_kind(options: RuntimeOptions) -> str:
    """The runtime kind, with `auto` settled where it needs no model file: ONNX Runtime on a GPU."""
    return "onnxruntime" if options.kind == AUTO and on_gpu(options) else options.kind


def int8_by_default(options: RuntimeOptions) -> tuple[bool, str]:
    """Whether `auto` takes checked INT8 files on this machine and runtime, and why (or why not)."""
    from engines.cpu_features import cpu_features

    if options.kind == "triton":
        return False, "the Triton server serves its repository's files"
    if on_gpu(options):
        return False, "a GPU runtime: the VRAM plan chooses"
    if options.kind == "openvino" and options.device.split(".")[0] in ("GPU", "NPU"):
        return True, f"OpenVINO on {options.device}"
    cpu = cpu_features()
    if not cpu.int8_fast:
        return False, f"this CPU has no INT8 instructions ({cpu.model})"
    return True, f"{', '.join(cpu.int8)} on this CPU"


def _report_for(path: Path) -> QuantReport | None:
    """The INT8 report that speaks of this file (its own, or its INT8 twin's), when fresh."""
    if is_int8_name(path):
        return read_report(path)
    return fresh_report(int8_path(path), path)


def faster_runtime(path: str | os.PathLike[str], installed: tuple[str, ...] | None = None) -> str:
    """The CPU runtime the file's INT8 report measured faster for this file's precision on this
    CPU model; ONNX Runtime where there is no such figure."""
    from engines.cpu_features import cpu_features

    path = Path(path)
    report = _report_for(path)
    if report is None or report.speed.get("cpu") != cpu_features().model:
        return "onnxruntime"
    key = "int8_ms" if is_int8_name(path) else "fp32_ms"
    kinds = installed if installed is not None else tuple(k for k in CPU_RUNTIMES if _installed(k))
    timed = {k: report.speed[k][key] for k in kinds
             if isinstance(report.speed.get(k), dict) and report.speed[k].get(key)}
    return min(timed, key=lambda k: timed[k]) if timed else "onnxruntime"


def _installed(kind: str) -> bool:
    import importlib.util

    module = {"onnxruntime": "onnxruntime", "openvino": "openvino"}[kind]
    return importlib.util.find_spec(module) is not None


class ChoosingFactory:
    """A runtime factory that loads each model's file for the precision asked, on the runtime
    asked (or, for `auto`, the one measured faster here). `chosen` lists the files swapped for
    their INT8 twins and `runs_on` where each file went; `notes` says so for the run's note."""

    def __init__(self, options: RuntimeOptions, allocator: HostAllocator | None = None,
                 precision: str = "auto") -> None:
        check_precision(precision, options)
        self.options = options
        self.allocator = allocator
        self.precision = precision
        self.kind = resolved_kind(options)
        self.int8, self.why = (True, "asked for") if precision == "int8" else \
            int8_by_default(options) if precision == "auto" else (False, precision)
        self.chosen: dict[str, str] = {}  # float file name -> INT8 file name
        self.kept: dict[str, str] = {}  # float file name -> why it stays (only what could have been swapped)
        self.runs_on: dict[str, str] = {}  # file name -> runtime kind
        self._factories: dict[str, RuntimeFactory] = {}
        if self.kind != AUTO:
            self._factory(self.kind)  # an unknown kind is one line now, not when a model first opens

    def pick(self, path: str | os.PathLike[str]) -> Path:
        """The file to load for the float file `path`."""
        path = Path(path)
        if not self.int8 or is_int8_name(path):
            return path
        twin = int8_path(path)
        if self.precision == "int8":
            if twin.is_file():
                report = read_report(twin)
                self.chosen[path.name] = twin.name + ("" if report and report.checked else " (unchecked)")
                return twin
            self.kept[path.name] = "no INT8 file"
            return path
        report = fresh_report(twin, path)
        if report is None:
            if twin.is_file():
                self.kept[path.name] = "its INT8 report is missing or stale"
            return path
        if not report.usable:
            self.kept[path.name] = f"its INT8 file is {report.status()}"
            return path
        self.chosen[path.name] = twin.name
        return twin

    def runtime_kind(self, path: Path) -> str:
        return faster_runtime(path) if self.kind == AUTO else self.kind

    def _factory(self, kind: str) -> RuntimeFactory:
        if kind not in self._factories:
            options = self.options if kind == self.options.kind else replace(self.options, kind=kind)
            if kind == "openvino" and self.options.kind == AUTO:
                options = replace(options, device="CPU")  # auto chose it for this CPU's figures
            self._factories[kind] = runtime_factory(options, self.allocator)
        return self._factories[kind]

    def __call__(self, path: str | os.PathLike[str]) -> InferenceRuntime:
        chosen = self.pick(path)
        kind = self.runtime_kind(chosen)
        self.runs_on[chosen.name] = kind
        return self._factory(kind)(chosen)

    @property
    def notes(self) -> list[str]:
        """The inner factories' notes (Triton: which models run locally), then this one's."""
        inner = [n for f in self._factories.values() for n in getattr(f, "notes", ())]
        own = self.note()
        return [*inner, *([own] if own else [])]

    def note(self) -> str:
        """'precision int8: inswapper_128_int8.onnx, det_10g_int8.onnx (AVX-512 VNNI on this CPU); ...'"""
        parts = []
        if self.chosen:
            parts.append(f"precision int8: {', '.join(self.chosen.values())} ({self.why})")
        if self.kept:
            parts.append("float: " + ", ".join(f"{k} ({v})" for k, v in self.kept.items()))
        if self.precision == "int8" and not self.chosen:
            parts.append("precision int8: no INT8 file found (`facestream models quantize NAME` writes one)")
        if self.kind == AUTO and any(k != "onnxruntime" for k in self.runs_on.values()):
            parts.append("runtime auto: " + ", ".join(f"{f} on {k}" for f, k in self.runs_on.items()))
        return "; ".join(parts)


def auto_runtime_choice(float_path: Path, options: RuntimeOptions) -> tuple[str, str]:
    """(runtime kind, precision) that `--runtime auto --precision auto` runs for this model here."""
    factory = ChoosingFactory(options, None, "auto")
    chosen = factory.pick(float_path)
    return factory.runtime_kind(chosen), "int8" if is_int8_name(chosen) else "fp32"

