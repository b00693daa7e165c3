"""Which runtime the check puts the models on, made through our registry.

- "torch": tools.gpu_check.torch_runtime.TorchRuntime (onnx2torch), on CUDA in a real run,
  on the CPU in a dry run where PyTorch is installed;
- "onnxruntime": engines.backends.ort.OrtRuntime on the CPU: the dry run's stand-in when
  PyTorch is missing, and always the reference the outputs are compared with.

fp16 on the torch runtime is a float16 module behind float32 I/O; on the ONNX Runtime
stand-in it is the model converted once with onnxruntime's float16 converter
(`keep_io_types=True`), written beside the original.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from engines.backends.base import HostAllocator, InferenceRuntime, RuntimeOptions
from engines.backends.registry import RUNTIMES, runtime_factory
from tools.gpu_check.torch_runtime import TorchRuntime, torch_available

PRECISIONS = ("fp32", "fp16")


def register_torch() -> None:
    """Put the torch runtime in the registry (for this process only; engines never knows it)."""
    RUNTIMES.setdefault("torch", TorchRuntime)


def choose_kind(wanted: str) -> str:
    """"torch" or "onnxruntime" for `wanted` ("auto": torch when it is installed)."""
    if wanted == "auto":
        return "torch" if torch_available() else "onnxruntime"
    if wanted not in ("torch", "onnxruntime"):
        raise ValueError(f"runtime must be auto, torch or onnxruntime, got {wanted!r}")
    return wanted


def options_for(kind: str, precision: str, dry_run: bool, device_id: int = 0) -> RuntimeOptions:
    """RuntimeOptions for `kind` at `precision` (ONNX Runtime: the CPU provider)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if kind == "torch":
        register_torch()
        return RuntimeOptions(kind="torch", device_id=device_id,
                              extra={"torch": {"fp16": precision == "fp16", "device": "cpu" if dry_run else "cuda"}})
    return RuntimeOptions(kind="onnxruntime", providers="cpu")


def fp16_copy(path: Path) -> Path:
    """A float16 version of an ONNX file with float32 inputs and outputs, made once beside it."""
    out = path.with_name(f"{path.stem}.fp16{path.suffix}")
    if out.is_file() and out.stat().st_mtime >= path.stat().st_mtime:
        return out
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = convert_float_to_float16(onnx.load(str(path)), keep_io_types=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    onnx.save(model, str(tmp))
    tmp.replace(out)
    return out


def make_runtime(path: Path, kind: str, precision: str, dry_run: bool,
                 allocator: HostAllocator | None = None, device_id: int = 0) -> InferenceRuntime:
    """A runtime of `kind` for `path` at `precision`, made by our registry's factory."""
    options = options_for(kind, precision, dry_run, device_id)
    if kind == "onnxruntime" and precision == "fp16":
        path = fp16_copy(path)
    return runtime_factory(options, allocator)(path)


def describe(kind: str, dry_run: bool) -> dict[str, Any]:
    """What the models run on, for the report."""
    if kind == "torch":
        import torch

        device = "cpu" if dry_run else f"cuda ({torch.cuda.get_device_name(0)})"
        return {"kind": "torch", "via": "onnx2torch", "device": device, "stand_in": dry_run}
    return {"kind": "onnxruntime", "device": "cpu", "stand_in": True,
            "note": "ONNX Runtime on the CPU stands in for the torch runtime (PyTorch is not installed)"}
