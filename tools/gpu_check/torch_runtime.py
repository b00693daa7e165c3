"""An ONNX model run by PyTorch (converted with onnx2torch), behind our inference-runtime
protocol (engines.backends.base.InferenceRuntime): the GPU check's runtime on a CUDA machine that
has PyTorch but neither TensorRT nor onnxruntime-gpu.

It lives in tools/ because it is a measuring aid, not a runtime we ship: the check registers
it in `engines.backends.registry.RUNTIMES` under "torch" for the length of a run.

Options come from `RuntimeOptions`: `device_id`, and `extra["torch"]`:
- `device`: "cuda" (default when PyTorch sees a GPU) or "cpu";
- `fp16`: compute in float16 (weights and activations), with the graph's float32 inputs
  and outputs kept float32 at the boundary, as an fp16 export with `keep_io_types` does.

On CUDA each runtime has a stream of its own: inputs go up from host memory (without a
staging copy when it is pinned, e.g. a buffer from `host_buffer` with the pipeline's pinned
allocator), the module runs, outputs come back into fresh pinned host tensors (PyTorch's
caching host allocator reuses their memory once the caller drops them), and `run` returns
once the stream is done.
"""
from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from engines.backends.base import HostAllocator, HostBuffers, RuntimeOptions, TensorSpec, open_expecting
from engines.errors import EngineError, ModelNotFound

log = logging.getLogger(__name__)

# ONNX element types to the type strings ONNX Runtime reports (the models check these).
ONNX_TYPES = {1: "tensor(float)", 2: "tensor(uint8)", 3: "tensor(int8)", 6: "tensor(int32)",
              7: "tensor(int64)", 9: "tensor(bool)", 10: "tensor(float16)", 11: "tensor(double)"}
_NUMPY_OF: dict[Any, np.dtype] = {}  # torch dtype -> numpy dtype, filled once torch is imported
INSTALL_HINT = "the torch runtime needs PyTorch and onnx2torch (pip install torch onnx2torch)"


def torch_available() -> bool:
    """Whether PyTorch and onnx2torch import (the check falls back to ONNX Runtime otherwise)."""
    try:
        import onnx2torch  # noqa: F401
        import torch  # noqa: F401
    except Exception:  # an absent or broken install both mean "not here"
        return False
    return True


class TorchRuntime:
    """One ONNX model file converted to a torch.fx module; `run` maps named inputs to outputs."""

    def __init__(self, path: str | os.PathLike[str], options: RuntimeOptions | None = None,
                 allocator: HostAllocator | None = None) -> None:
        self.path = Path(path)
        self.options = options or RuntimeOptions()
        self.allocator = allocator
        extra = self.options.extra.get("torch", {})
        self.fp16 = bool(extra.get("fp16", False))
        self.device_kind: str = extra.get("device", "auto")
        self.inputs: list[TensorSpec] = []
        self.outputs: list[TensorSpec] = []
        self.calls = 0
        self.notes: list[str] = []  # what the converter warned about (kept for the report)
        self.device: Any = None  # torch.device once open
        self._module: Any = None
        self._stream: Any = None
        self._host = HostBuffers(allocator)

    @property
    def is_open(self) -> bool:
        return self._module is not None

    @property
    def precision(self) -> str:
        return "fp16" if self.fp16 else "fp32"

    def open(self) -> None:
        """Convert the model and move it to the device; a one-line EngineError when it cannot."""
        if self._module is not None:
            return
        if not self.path.is_file():
            raise ModelNotFound(f"model file {str(self.path)!r} does not exist")
        try:
            import onnx
            import torch
            from onnx2torch import convert
        except ImportError as exc:
            raise EngineError(f"{INSTALL_HINT} ({exc})") from exc
        if not _NUMPY_OF:
            _NUMPY_OF.update({getattr(torch, t): np.dtype(t) for t in
                              ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")})
        try:
            model = onnx.load(str(self.path))
        except Exception as exc:  # protobuf's errors are of several types
            raise EngineError(f"model file {str(self.path)!r} is not a loadable ONNX model ({_first_line(exc)})") \
                from exc
        graph_inits = {i.name for i in model.graph.initializer}
        self.inputs = [_spec(v) for v in model.graph.input if v.name not in graph_inits]
        self.outputs = [_spec(v) for v in model.graph.output]
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                module = convert(model)
        except Exception as exc:  # an operator onnx2torch lacks, most often
            raise EngineError(f"model file {str(self.path)!r}: onnx2torch cannot convert it "
                              f"({_first_line(exc)})") from exc
        self.notes = sorted({_first_line(w.message) for w in caught})
        self.device = self._choose_device(torch)
        module = module.eval().to(self.device)
        if self.fp16:
            module = module.half()  # floating weights and buffers; integer shapes stay as they are
        self._module = module
        if self.device.type == "cuda":
            self._stream = torch.cuda.Stream(device=self.device)
        log.debug("%s on torch %s (%s)", self.path.name, self.device, self.precision)

    def _choose_device(self, torch: Any) -> Any:
        wanted = self.device_kind
        if wanted == "auto":
            wanted = "cuda" if torch.cuda.is_available() else "cpu"
        if wanted == "cuda":
            if not torch.cuda.is_available():
                raise EngineError(f"model file {str(self.path)!r}: the torch runtime was asked for CUDA, "
                                  "but PyTorch sees no GPU")
            return torch.device("cuda", self.options.device_id)
        if wanted != "cpu":
            raise EngineError(f"torch runtime: device must be 'cuda', 'cpu' or 'auto', got {wanted!r}")
        return torch.device("cpu")

    def open_expecting(self, what: str) -> None:
        """`open()`, with a load failure saying which kind of model file was expected."""
        open_expecting(self, what)

    def run(self, feeds: dict[str, np.ndarray], outputs: list[str] | None = None) -> dict[str, np.ndarray]:
        """Named inputs in, named outputs out (all outputs unless `outputs` names some)."""
        return self._execute(feeds, outputs or [o.name for o in self.outputs], {})

    def run_into(self, feeds: dict[str, np.ndarray], outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Named inputs in, each named output written into the given host array (the swap
        stage's pinned output slots: the device->host copy lands there), or returned in an
        array of its own where the given one does not fit (shape, type, layout)."""
        return self._execute(feeds, list(outputs), outputs)

    def _execute(self, feeds: dict[str, np.ndarray], names: list[str],
                 into: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._module is None:
            self.open()
        import torch

        missing = [i.name for i in self.inputs if i.name not in feeds]
        if missing:
            raise EngineError(f"model file {str(self.path)!r}: no value for input(s) {', '.join(missing)}")
        unknown = [n for n in names if n not in {o.name for o in self.outputs}]
        if unknown:
            raise EngineError(f"model file {str(self.path)!r}: no output(s) named {', '.join(unknown)}")
        self.calls += 1
        with torch.inference_mode():
            if self._stream is None:
                args = [self._cast_in(torch, torch.from_numpy(np.ascontiguousarray(feeds[i.name])))
                        for i in self.inputs]
                result = self._outputs(self._module(*args))
                return {spec.name: self._land(torch, self._to_graph_type(torch, spec, value), into.get(spec.name))
                        for spec, value in zip(self.outputs, result) if spec.name in names}
            with torch.cuda.stream(self._stream):
                args = [self._upload(torch, feeds[i.name]) for i in self.inputs]
                result = self._outputs(self._module(*args))
                hosts = {spec.name: self._land(torch, self._to_graph_type(torch, spec, value), into.get(spec.name))
                         for spec, value in zip(self.outputs, result) if spec.name in names}
            self._stream.synchronize()
        return {name: hosts[name] for name in names}

    @staticmethod
    def _land(torch: Any, value: Any, out: np.ndarray | None) -> np.ndarray:
        """`value` in host memory: written into `out` when it fits, else a fresh array (pinned,
        on CUDA; a copy on the CPU, where the module may hand back a view of its own weights).
        On CUDA the copy is queued on the current stream: read it once the stream is done."""
        fits = (out is not None and tuple(out.shape) == tuple(value.shape) and out.flags.c_contiguous
                and out.flags.writeable and out.dtype == _NUMPY_OF.get(value.dtype))
        if fits:
            assert out is not None
            torch.from_numpy(out).copy_(value, non_blocking=value.is_cuda)
            return out
        if value.is_cuda:
            host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            host.copy_(value, non_blocking=True)
            return host.numpy()
        return value.numpy().copy()

    def _upload(self, torch: Any, array: np.ndarray) -> Any:
        # Pinned memory (our allocator's) goes up by DMA without a staging copy; a pageable
        # array is staged by the driver, which is correct, only slower.
        host = torch.from_numpy(np.ascontiguousarray(array))
        return self._cast_in(torch, host.to(self.device, non_blocking=True))

    def _cast_in(self, torch: Any, tensor: Any) -> Any:
        return tensor.half() if self.fp16 and tensor.is_floating_point() else tensor

    def _outputs(self, result: Any) -> list[Any]:
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        if len(values) != len(self.outputs):  # onnx2torch returns one value per producing node
            raise EngineError(f"model file {str(self.path)!r}: the converted module returned {len(values)} "
                              f"values for {len(self.outputs)} graph outputs")
        return values

    @staticmethod
    def _to_graph_type(torch: Any, spec: TensorSpec, value: Any) -> Any:
        """The value in the graph's declared output type (fp16 compute keeps float32 I/O)."""
        if spec.dtype == "tensor(float)" and value.dtype != torch.float32:
            return value.float()
        if spec.dtype == "tensor(float16)" and value.dtype != torch.float16:
            return value.half()
        return value

    def host_buffer(self, name: str, shape: tuple[int, ...], dtype: np.dtype | type = np.float32) -> np.ndarray:
        """A reusable host array for input `name` (pinned with the pipeline's pinned allocator),
        kept for the next call of the same shape and type."""
        return self._host.get(name, shape, dtype)

    def close(self) -> None:
        """Drop the module (its device memory returns to PyTorch's cache) and the host buffers."""
        self._module = None
        self._stream = None
        self._host.clear()


def _spec(value: Any) -> TensorSpec:
    kind = value.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in kind.shape.dim)
    return TensorSpec(value.name, dims, ONNX_TYPES.get(kind.elem_type, f"tensor(onnx type {kind.elem_type})"))


def _first_line(exc: object) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
