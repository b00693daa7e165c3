"""ONNX Runtime behind the runtime protocol: named inputs in, named outputs out.

Providers are chosen by name or `auto` among those installed, best first (TensorRT EP,
CUDA, DirectML, CoreML, OpenVINO, CPU). CPU thread counts follow the machine; on a GPU
the caller may bind device buffers (issue 3 follows up with IO binding).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engines.errors import EngineError, ModelNotFound

log = logging.getLogger(__name__)

# Best first: what `auto` picks among the installed providers.
PROVIDER_ORDER = (
    "TensorrtExecutionProvider",
    "CUDAExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
    "OpenVINOExecutionProvider",
    "CPUExecutionProvider",
)
SHORT_NAMES = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "directml": "DmlExecutionProvider",
    "coreml": "CoreMLExecutionProvider",
    "openvino": "OpenVINOExecutionProvider",
    "cpu": "CPUExecutionProvider",
}


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a model: its name, shape (None for a dynamic axis), type."""

    name: str
    shape: tuple[int | None, ...]
    dtype: str


@dataclass
class OrtOptions:
    """How a session is made: providers, threads and provider options."""

    providers: str | list[str] = "auto"  # "auto", a short name ("cuda"), or a list of names
    intra_threads: int = 0  # 0: the machine's core count
    device_id: int = 0
    gpu_mem_limit: int | None = None  # bytes, for CUDA / TensorRT
    trt_cache_dir: str | None = None  # TensorRT EP engine cache
    trt_fp16: bool = False
    extra: dict[str, dict[str, Any]] = field(default_factory=dict)


def available_providers() -> list[str]:
    import onnxruntime as ort

    return list(ort.get_available_providers())


def choose_providers(wanted: str | list[str], installed: list[str]) -> list[str]:
    """The provider list to hand to ONNX Runtime; ValueError naming what is missing."""
    if wanted == "auto":
        chosen = [p for p in PROVIDER_ORDER if p in installed]
    else:
        names = [wanted] if isinstance(wanted, str) else list(wanted)
        chosen = []
        for name in names:
            full = SHORT_NAMES.get(name.lower(), name)
            if full not in installed:
                raise ValueError(f"ONNX Runtime provider {name!r} is not installed; "
                                 f"installed: {', '.join(installed)}")
            chosen.append(full)
    if "CPUExecutionProvider" in installed and "CPUExecutionProvider" not in chosen:
        chosen.append("CPUExecutionProvider")  # the fallback for ops a device lacks
    return chosen


class OrtRuntime:
    """One ONNX model file in an ONNX Runtime session; `run` maps named inputs to outputs."""

    def __init__(self, path: str | os.PathLike[str], options: OrtOptions | None = None) -> None:
        self.path = Path(path)
        self.options = options or OrtOptions()
        self.session: Any = None
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.providers: list[str] = []
        self.calls = 0

    def open(self) -> None:
        """Create the session; a missing or non-ONNX file is a one-line EngineError."""
        if self.session is not None:
            return
        if not self.path.is_file():
            raise ModelNotFound(f"model file {str(self.path)!r} does not exist")
        import onnxruntime as ort

        opts = self.options
        so = ort.SessionOptions()
        so.intra_op_num_threads = opts.intra_threads or (os.cpu_count() or 1)
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        providers = choose_providers(opts.providers, available_providers())
        provider_options = [self._provider_options(p) for p in providers]
        try:
            self.session = ort.InferenceSession(str(self.path), sess_options=so, providers=providers,
                                                provider_options=provider_options)
        except Exception as exc:  # ORT raises its own exception types for bad files
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise EngineError(f"model file {str(self.path)!r} is not a loadable ONNX model ({text})") from exc
        self.providers = list(self.session.get_providers())
        self.inputs = [TensorSpec(i.name, _shape(i.shape), i.type) for i in self.session.get_inputs()]
        self.outputs = [TensorSpec(o.name, _shape(o.shape), o.type) for o in self.session.get_outputs()]
        log.debug("%s on %s", self.path.name, ", ".join(self.providers))

    def _provider_options(self, provider: str) -> dict[str, Any]:
        opts = self.options
        out: dict[str, Any] = dict(opts.extra.get(provider, {}))
        if provider in ("CUDAExecutionProvider", "TensorrtExecutionProvider"):
            out.setdefault("device_id", opts.device_id)
        if provider == "CUDAExecutionProvider" and opts.gpu_mem_limit:
            out.setdefault("gpu_mem_limit", int(opts.gpu_mem_limit))
        if provider == "TensorrtExecutionProvider":
            if opts.trt_cache_dir:
                out.setdefault("trt_engine_cache_enable", True)
                out.setdefault("trt_engine_cache_path", opts.trt_cache_dir)
            out.setdefault("trt_fp16_enable", bool(opts.trt_fp16))
        return out

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some)."""
        if self.session is None:
            self.open()
        names = outputs or [o.name for o in self.outputs]
        self.calls += 1
        values = self.session.run(names, feeds)
        return dict(zip(names, values))

    def close(self) -> None:
        self.session = None


def _shape(shape: Any) -> tuple[int | None, ...]:
    return tuple(d if isinstance(d, int) else None for d in shape)
