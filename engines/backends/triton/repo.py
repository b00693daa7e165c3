"""A Triton Inference Server model repository for our ONNX model files.

One folder per model, named by its catalog name (what `TritonRuntime` asks the server
for), each with a `config.pbtxt` and version `1`:

- `onnxruntime` (production): `1/model.onnx`, served by Triton's ONNX Runtime backend on
  GPUs (or CPUs);
- `tensorrt` (production): `1/model.plan`, which must be built on the serving GPU; the
  ONNX file is kept beside it as `model.onnx` and `build_plans.sh` holds the `trtexec`
  command for each model;
- `python`: `1/model.py` runs `1/model.onnx` through ONNX Runtime on the CPU, one batch per
  `execute()` (all the requests the server's dynamic batcher gathered, concatenated), so a
  repository the bundled tritonserver can serve.

Input and output names, types and dimensions are read from the ONNX file. A model whose
inputs and outputs all have a dynamic first axis gets `max_batch_size` and dynamic
batching; one with a fixed first axis is served unbatched (`max_batch_size: 0`).

INT8: `pick_files` serves a model's `<stem>_int8.onnx` (a QDQ file) under the float
model's name when asked (`int8`), or where its report `<stem>_int8.json`
(engines.int8) says it was checked and passed its drift budget (`auto`). Its
config carries the parameter `precision: int8`. The tensorrt backend gets the file's
symmetric copy (TensorRT quantises symmetrically only: engines.backends.trt.symmetric) and
`trtexec --int8 --fp16` (explicit quantisation; the
container's TensorRT 10 still has both flags).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from engines.backends.base import TensorSpec
from engines.backends.onnx_io import OnnxReadError, read_onnx
from engines.errors import EngineError

BACKENDS = ("onnxruntime", "tensorrt", "python")
PRECISIONS = ("auto", "fp32", "int8")
KINDS = ("gpu", "cpu")
QUEUE_DELAY_US = 2000  # how long the batcher may hold a request waiting for company

# Element types (as TensorSpec names them) -> the data types of Triton's model config.
CONFIG_TYPES = {"tensor(float)": "TYPE_FP32", "tensor(uint8)": "TYPE_UINT8", "tensor(int8)": "TYPE_INT8",
                "tensor(uint16)": "TYPE_UINT16", "tensor(int16)": "TYPE_INT16", "tensor(int32)": "TYPE_INT32",
                "tensor(int64)": "TYPE_INT64", "tensor(string)": "TYPE_STRING", "tensor(bool)": "TYPE_BOOL",
                "tensor(float16)": "TYPE_FP16", "tensor(double)": "TYPE_FP64", "tensor(uint32)": "TYPE_UINT32",
                "tensor(uint64)": "TYPE_UINT64", "tensor(bfloat16)": "TYPE_BF16"}


class RepositoryError(EngineError):
    """A model file that cannot be put in a repository (one line, names the file)."""


def dims(tensor: TensorSpec) -> tuple[int, ...]:
    """A tensor's dimensions as Triton writes them: -1 for a dynamic axis."""
    return tuple(-1 if d is None else d for d in tensor.shape)


@dataclass(frozen=True)
class ModelSpec:
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    quantized: bool = False  # a QDQ (INT8) file

    @property
    def batched(self) -> bool:
        """Every input and output has a dynamic first axis: Triton may batch it."""
        return all(t.shape and t.shape[0] is None for t in self.inputs + self.outputs)


def read_spec(path: Path) -> ModelSpec:
    """The graph inputs (initialisers left out) and outputs of the ONNX file at `path`."""
    try:
        graph = read_onnx(path)
    except OnnxReadError as exc:
        if exc.cause == "FileNotFoundError":
            raise RepositoryError(f"model file {path}: not found") from None
        if not exc.cause:  # it loaded: a graph with no inputs
            raise RepositoryError(f"model file {path}: the graph has no inputs or no outputs") from None
        raise RepositoryError(f"model file {path}: not a readable ONNX model ({exc.cause})") from exc
    for t in graph.inputs + graph.outputs:
        if t.dtype not in CONFIG_TYPES:
            raise RepositoryError(f"model file {path}: tensor {t.name!r} has element type {t.dtype}, "
                                  f"which Triton does not serve")
    if not graph.outputs:
        raise RepositoryError(f"model file {path}: the graph has no inputs or no outputs")
    return ModelSpec(graph.inputs, graph.outputs, graph.quantized)


def int8_usable(int8: Path, float_file: Path) -> bool:
    """Whether INT8 file `int8` may be served by `auto`: its report (beside it) is fresh for
    `float_file`, checked, and within its family's drift budget."""
    from engines.int8 import fresh_report

    report = fresh_report(int8, float_file)
    return report is not None and report.usable


def pick_files(models: dict[str, Path], precision: str = "auto") -> dict[str, Path]:
    """The file to serve for each model (catalog name -> its float file): `fp32` the float
    files; `int8` the INT8 file where there is one; `auto` the INT8 file where it passed its
    budget. The name stays the float model's, so clients need no change."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}")
    if precision == "fp32":
        return dict(models)
    from engines.int8 import int8_path

    chosen = {}
    for name, path in models.items():
        int8 = int8_path(path)
        use = int8.is_file() and (precision == "int8" or int8_usable(int8, Path(path)))
        chosen[name] = int8 if use else Path(path)
    return chosen


def _tensors(kind: str, tensors: tuple[TensorSpec, ...], batched: bool) -> str:
    rows = []
    for t in tensors:
        shape = dims(t)[1:] if batched else dims(t)
        rows.append(f'  {{\n    name: "{t.name}"\n    data_type: {CONFIG_TYPES[t.dtype]}\n'
                    f'    dims: [ {", ".join(str(d) for d in shape)} ]\n  }}')
    return f"{kind} [\n" + ",\n".join(rows) + "\n]\n"


def render_config(name: str, spec: ModelSpec, backend: str, max_batch: int, instances: int, kind: str,
                  queue_delay_us: int = QUEUE_DELAY_US) -> str:
    """The `config.pbtxt` text of one model."""
    batched = spec.batched
    lines = [f'name: "{name}"']
    lines.append('platform: "tensorrt_plan"' if backend == "tensorrt" else f'backend: "{backend}"')
    lines.append(f"max_batch_size: {max_batch if batched else 0}")
    text = "\n".join(lines) + "\n" + _tensors("input", spec.inputs, batched) + _tensors("output", spec.outputs, batched)
    if batched:
        text += f"dynamic_batching {{\n  max_queue_delay_microseconds: {queue_delay_us}\n}}\n"
    if spec.quantized:  # what is served, for whoever reads the repository (backends ignore it)
        text += 'parameters {\n  key: "precision"\n  value {\n    string_value: "int8"\n  }\n}\n'
    group_kind = "KIND_CPU" if backend == "python" or kind == "cpu" else "KIND_GPU"
    text += f"instance_group [\n  {{\n    count: {instances}\n    kind: {group_kind}\n  }}\n]\n"
    return text


def _place(src: Path, dst: Path, link: bool) -> Path:
    if link:
        dst.symlink_to(src.resolve())
    else:
        shutil.copyfile(src, dst)
    return dst


def _symmetric_copy(src: Path, dst: Path) -> Path:
    """The INT8 file `src` as TensorRT's parser takes it (symmetric, zero points 0), at `dst`."""
    import onnx

    from engines.backends.trt.symmetric import make_symmetric

    model = onnx.load(str(src))
    make_symmetric(model, str(src))
    dst.write_bytes(model.SerializeToString())
    return dst


DYNAMIC_SIDE = 640  # what a dynamic image axis is built for: our detector's input (models.detect_size)


def _trtexec_line(name: str, spec: ModelSpec, max_batch: int) -> str:
    flags = "--int8 --fp16" if spec.quantized else "--fp16"  # Q/DQ: explicit quantisation, float layers fp16
    cmd = f"trtexec --onnx={name}/model.onnx --saveEngine={name}/1/model.plan {flags}"
    dynamic = any(-1 in (dims(t)[1:] if spec.batched else dims(t)) for t in spec.inputs)
    if not spec.batched and not dynamic:
        return cmd

    def shapes(batch: int) -> str:
        shape = (lambda t: (batch, *dims(t)[1:])) if spec.batched else dims
        return ",".join(f"{t.name}:{'x'.join(str(DYNAMIC_SIDE if d == -1 else d) for d in shape(t))}"
                        for t in spec.inputs)

    note = (f"# {name}: its dynamic axes are built for {DYNAMIC_SIDE} (models.detect_size); edit the shapes "
            f"below for another size\n" if dynamic else "")
    top = max_batch if spec.batched else 1
    return f"{note}{cmd} --minShapes={shapes(1)} --optShapes={shapes(top)} --maxShapes={shapes(top)}"


def write_repository(folder: str | os.PathLike[str], models: dict[str, Path], backend: str = "onnxruntime",
                     max_batch: int = 8, instances: int = 1, kind: str = "gpu", link: bool = False,
                     queue_delay_us: int = QUEUE_DELAY_US) -> list[Path]:
    """Write a model repository for `models` (catalog name -> ONNX file) into `folder`.

    Each named model's folder is replaced; other folders are left alone. `link` symlinks
    the ONNX files instead of copying them. `queue_delay_us`: how long the dynamic batcher
    may hold a request waiting for others to batch with. Returns the files written. Raises
    RepositoryError for an unreadable model file, ValueError for a bad argument."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown Triton backend {backend!r}; known: {', '.join(BACKENDS)}")
    if kind not in KINDS:
        raise ValueError(f"unknown instance kind {kind!r}; known: {', '.join(KINDS)}")
    if max_batch < 1 or instances < 1:
        raise ValueError(f"max_batch and instances must be at least 1 (got {max_batch}, {instances})")
    if queue_delay_us < 0:
        raise ValueError(f"queue_delay_us cannot be negative (got {queue_delay_us})")
    specs = {name: read_spec(Path(path)) for name, path in models.items()}  # every file read before writing
    root = Path(folder)
    written: list[Path] = []
    plans: list[str] = []
    for name, path in models.items():
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"model name {name!r} cannot be a repository folder")
        spec = specs[name]
        model_dir = root / name
        if model_dir.exists() or model_dir.is_symlink():
            shutil.rmtree(model_dir)
        version = model_dir / "1"
        version.mkdir(parents=True)
        config = model_dir / "config.pbtxt"
        config.write_text(render_config(name, spec, backend, max_batch, instances, kind, queue_delay_us))
        written.append(config)
        if backend == "tensorrt":
            if spec.quantized:
                written.append(_symmetric_copy(Path(path), model_dir / "model.onnx"))
            else:
                written.append(_place(Path(path), model_dir / "model.onnx", link))
            plans.append(_trtexec_line(name, spec, max_batch))
            continue
        written.append(_place(Path(path), version / "model.onnx", link))
        if backend == "python":
            script = version / "model.py"
            script.write_text(PYTHON_MODEL)
            written.append(script)
    if plans:
        script = root / "build_plans.sh"
        script.write_text("#!/bin/sh\n# Build each model's TensorRT plan on the GPU that will serve it "
                          "(plans are specific to the GPU and TensorRT version).\nset -e\ncd \"$(dirname \"$0\")\"\n"
                          + "\n".join(plans) + "\n")
        script.chmod(0o755)
        written.append(script)
    return written


# The Python backend's model: the ONNX file beside it through ONNX Runtime on the CPU. The
# requests of one execute() are concatenated along the batch axis (grouped by their shapes
# past it) and run as one call, so the server's dynamic batching becomes real batching.
PYTHON_MODEL = '''"""Written by `facestream triton-repo --backend python`: runs model.onnx through ONNX Runtime."""
import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        options = ort.SessionOptions()
        threads = config.get("parameters", {}).get("intra_op_threads", {}).get("string_value", "0")
        options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(os.path.join(folder, "model.onnx"), options,
                                            providers=["CPUExecutionProvider"])
        self.inputs = [t["name"] for t in config["input"]]
        self.outputs = [t["name"] for t in config["output"]]
        self.batched = config.get("max_batch_size", 0) > 0

    def execute(self, requests):
        feeds = [{name: pb_utils.get_input_tensor_by_name(r, name).as_numpy() for name in self.inputs}
                 for r in requests]
        responses = [None] * len(requests)
        groups = {}
        for i, feed in enumerate(feeds):
            key = tuple((a.shape[1:] if self.batched else a.shape, a.dtype.str) for a in feed.values())
            groups.setdefault(key if self.batched else i, []).append(i)
        for members in groups.values():
            try:
                if len(members) == 1:
                    batch = feeds[members[0]]
                else:
                    batch = {name: np.concatenate([feeds[i][name] for i in members]) for name in self.inputs}
                results = self.session.run(self.outputs, batch)
                sizes = [len(feeds[i][self.inputs[0]]) for i in members]
                cuts = np.cumsum(sizes)[:-1]
                parts = [np.split(out, cuts) if len(members) > 1 else [out] for out in results]
                for j, i in enumerate(members):
                    tensors = [pb_utils.Tensor(name, np.ascontiguousarray(part[j]))
                               for name, part in zip(self.outputs, parts)]
                    responses[i] = pb_utils.InferenceResponse(output_tensors=tensors)
            except Exception as exc:
                for i in members:
                    responses[i] = pb_utils.InferenceResponse(
                        error=pb_utils.TritonError(f"{type(exc).__name__}: {exc}"))
        return responses
'''
