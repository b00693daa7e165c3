"""Static INT8 quantisation of one model file, checked against its float original.

ONNX Runtime's own tooling (`onnxruntime.quantization`, no other dependency) writes a QDQ
file: unsigned 8-bit activations and signed 8-bit per-channel weights (U8S8), the pairing
that reaches the VNNI and AMX kernels of ONNX Runtime and OpenVINO on x86 (S8S8 misses
them). Activation ranges come from the calibration inputs (min/max). The first compute
layer and the last before each output (a detector's score, box and keypoint heads, with the
ops after them) stay in float from the start; when the held-out drift is over the family's
budget, a sensitivity pass measures how much signal-to-quantisation-noise each compute layer
loses on its own (its output's SQNR against its input's, both against the float model) and
moves the worst tenth back to float, up to `rounds` times. A file still over budget is not
written.

The float file's initializers that no node reads (inswapper's `emap`, which the pipeline
reads as the graph's last initializer) are carried over, in place at the end.
"""
from __future__ import annotations

import contextlib
import hashlib
import inspect
import logging
import math
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import numpy as np

from engines.backends.base import RuntimeOptions
from engines.errors import EngineError, ModelNotFound
from engines.int8 import QuantReport, int8_path, report_path, write_report
from engines.quantize.budgets import budget_words, verdict
from engines.quantize.families import Family, Item, Outputs, make_family
from engines.quantize.samples import SampleSet

log = logging.getLogger(__name__)

COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
SENSITIVE_SHARE = 0.1  # the share of compute layers moved back to float by one sensitivity pass


@dataclass
class QuantizeOptions:
    """How `quantize_model` works (the CLI's flags)."""

    budget: bool = True  # False: --no-budget (written whatever the drift, marked unchecked)
    rounds: int = 3  # sensitivity passes at most
    threads: int = 0  # ONNX Runtime threads for the speed figures (0: the machine's cores)
    speed_runs: int = 3  # timed runs of each file (median), after one warm-up
    runtimes: tuple[str, ...] = ("onnxruntime", "openvino")  # timed where installed
    detect_size: int = 640


@dataclass
class Outcome:
    """One model's result: the file written (None when refused), its report, one line."""

    written: Path | None
    report: QuantReport
    line: str


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _load(path: Path):  # -> onnx.ModelProto
    import onnx

    try:
        return onnx.load(str(path))
    except Exception as exc:  # protobuf's DecodeError and friends: one line for the user
        raise EngineError(f"model file {str(path)!r} is not a readable ONNX model ({type(exc).__name__})") from exc


def prepare(src: Path, work: Path) -> tuple[Path, list[str], list]:
    """The float model ready to quantise, in `work`: every node named (the exclusion lists
    name nodes; exports often leave names empty), its compute nodes in graph order, and the
    initializers no node reads (to carry over)."""
    import onnx

    model = _load(src)
    used = {name for node in model.graph.node for name in node.input}
    unused = [init for init in model.graph.initializer if init.name not in used]
    taken = {n.name for n in model.graph.node if n.name}
    for i, node in enumerate(model.graph.node):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
    compute = [n.name for n in model.graph.node if n.op_type in COMPUTE_OPS]
    out = work / "float.onnx"
    onnx.save(model, str(out))
    return out, compute, unused


def edge_layers(model_path: Path) -> list[str]:
    """The compute layers kept in float from the start: the first one the input reaches, and
    the last before each output (a detector's score, box and keypoint heads; a swapper's
    output convolution)."""
    import onnx

    graph = onnx.load(str(model_path), load_external_data=False).graph
    producer = {o: n for n in graph.node for o in n.output}
    compute = [n for n in graph.node if n.op_type in COMPUTE_OPS]
    kept = [compute[0].name] if compute else []
    for output in graph.output:
        todo, seen = [output.name], set()
        while todo:
            node = producer.get(todo.pop())
            if node is None or node.name in seen:
                continue
            seen.add(node.name)
            if node.name not in kept:
                kept.append(node.name)  # the ops after the last layer too (a head's sigmoid, reshapes)
            if node.op_type not in COMPUTE_OPS:
                todo.extend(node.input)
    return kept


def _as_reader(feeds: Sequence[dict[str, np.ndarray]]):  # -> CalibrationDataReader
    """ONNX Runtime's calibration reader over a list of feeds."""
    from onnxruntime.quantization import CalibrationDataReader

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(list(feeds))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    return Reader()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """ONNX Runtime's quantisation tooling logs advice on the root logger and its sessions warn
    about unused initializers (emap): neither is news to a user of this command."""
    import onnxruntime as ort

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    ort.set_default_logger_severity(3)
    try:
        yield
    finally:
        root.setLevel(level)
        ort.set_default_logger_severity(2)


def quantize_file(prepared: Path, dst: Path, feeds: Sequence[dict[str, np.ndarray]], keep_float: Sequence[str],
                  unused: Sequence = (), cache: Path | None = None) -> None:
    """Write the QDQ INT8 file `dst` from the prepared float file (see the module doc)."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    kwargs = {}
    if cache is not None and "calibration_cache_path" in inspect.signature(quantize_static).parameters:
        kwargs["calibration_cache_path"] = str(cache)  # the ranges measured once, for every pass
    with _quiet():
        quantize_static(str(prepared), str(dst), _as_reader(feeds), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        nodes_to_exclude=list(keep_float), calibrate_method=CalibrationMethod.MinMax,
                        extra_options={"ActivationSymmetric": False, "WeightSymmetric": True}, **kwargs)
    if unused:
        model = onnx.load(str(dst))
        have = {i.name for i in model.graph.initializer}
        missing = [init for init in unused if init.name not in have]
        if missing:
            model.graph.initializer.extend(missing)  # at the end, in their order: emap stays last
            onnx.save(model, str(dst))


def _session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads or (os.cpu_count() or 1)
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def run_all(path: Path, items: Sequence[Item], threads: int) -> list[Outputs]:
    session = _session(path, threads)
    names = [o.name for o in session.get_outputs()]
    return [dict(zip(names, session.run(names, item.feeds))) for item in items]


def sensitive_nodes(prepared: Path, qdq: Path, compute: Sequence[str], feeds: Sequence[dict[str, np.ndarray]],
                    kept: Sequence[str], work: Path, count: int) -> list[str]:
    """The `count` quantised compute nodes that lose the most signal-to-noise on their own."""
    import onnx
    from onnxruntime.quantization import qdq_loss_debug as dbg

    aug_f, aug_q = work / "float_aug.onnx", work / "qdq_aug.onnx"
    dbg.modify_model_output_intermediate_tensors(str(prepared), str(aug_f))
    dbg.modify_model_output_intermediate_tensors(str(qdq), str(aug_q))
    with _quiet():
        float_acts = dbg.collect_activations(str(aug_f), _as_reader(feeds))
        qdq_acts = dbg.collect_activations(str(aug_q), _as_reader(feeds))
    errors = dbg.compute_activation_error(dbg.create_activation_matching(qdq_acts, float_acts))
    sqnr = {name: e["xmodel_err"] for name, e in errors.items() if "xmodel_err" in e}
    graph = onnx.load(str(prepared), load_external_data=False).graph
    loss: list[tuple[float, str]] = []
    for node in graph.node:
        if node.name not in compute or node.name in kept or not node.output:
            continue
        out = sqnr.get(node.output[0])
        if out is None or not math.isfinite(out):
            continue
        before = sqnr.get(node.input[0], out)
        loss.append(((before if math.isfinite(before) else out) - out, node.name))
    for p in (aug_f, aug_q):
        p.unlink(missing_ok=True)
    loss.sort(reverse=True)
    return [name for _, name in loss[:count]]


def time_runtime(kind: str, path: Path, feeds: dict[str, np.ndarray], threads: int, runs: int) -> float | None:
    """Median ms of `runs` runs of `path` on runtime `kind`'s CPU device (after one warm-up);
    None where that runtime is not installed."""
    from engines.backends.registry import RUNTIMES

    if kind not in RUNTIMES:
        return None
    try:
        # On the CPU, whatever else the machine has: the report's figures are this CPU's
        # (what `--runtime auto` compares), not an iGPU's or a CUDA card's.
        options = RuntimeOptions(kind=kind, intra_threads=threads, providers="cpu", device="CPU")
        runtime = RUNTIMES[kind](path, options, None)
        runtime.open()
    except EngineError as exc:
        log.info("%s: not timed on %s (%s)", path.name, kind, exc)
        return None
    try:
        runtime.run(feeds)
        times = []
        for _ in range(max(1, runs)):
            t = time.perf_counter()
            runtime.run(feeds)
            times.append((time.perf_counter() - t) * 1000.0)
        return statistics.median(times)
    finally:
        runtime.close()


def quantize_model(name: str, kind: str, src: Path, samples: SampleSet, options: QuantizeOptions | None = None,
                   *, arcface: object = None, converter: object = None, calibration_source: str = "",
                   say: Callable[[str], None] = lambda text: None) -> Outcome:
    """Quantise the float file `src` of catalog model `name` (kind `kind`); see the module doc.

    `arcface`: an opened ArcFaceEmbedder (identity measure, swapper sources), `converter`: the
    swapper's embedding-converter runtime, both optional. `say` gets progress lines.
    """
    from engines.backends.ort import OrtRuntime
    from engines.cpu_features import cpu_features

    options = options or QuantizeOptions()
    if not src.is_file():
        raise ModelNotFound(f"model file {str(src)!r} does not exist")
    runtime = OrtRuntime(src, RuntimeOptions(intra_threads=options.threads))
    family: Family = make_family(name, kind, runtime, detect_size=options.detect_size,
                                 arcface=arcface, converter=converter)  # type: ignore[arg-type]
    calib_items = family.items(samples.calibration, samples.calibration_frames)
    held_items = family.items(samples.held_out, samples.held_out_frames)
    runtime.close()
    if not calib_items or not held_items:
        raise EngineError(f"{name}: no calibration inputs could be made")
    dst = int8_path(src)
    with tempfile.TemporaryDirectory(prefix=".quantize-", dir=src.parent) as tmp:
        work = Path(tmp)
        prepared, compute, unused = prepare(src, work)
        kept = edge_layers(prepared)
        say(f"{name}: {len(calib_items)} calibration inputs, {len(held_items)} held out; "
            f"running the float model on them")
        ref = run_all(prepared, held_items, options.threads)
        qdq = work / dst.name
        cache = work / "ranges.json"
        rounds = 0
        while True:
            quantize_file(prepared, qdq, [i.feeds for i in calib_items], kept, unused, cache)
            measures = family.measure(held_items, ref, run_all(qdq, held_items, options.threads))
            miss = verdict(kind, measures)
            if not miss or not options.budget or rounds >= options.rounds:
                break
            rounds += 1
            count = max(1, int(len(compute) * SENSITIVE_SHARE))
            worst = sensitive_nodes(prepared, qdq, compute, [i.feeds for i in calib_items[:2]], kept, work, count)
            if not worst:
                break
            say(f"{name}: {miss}; sensitivity pass {rounds}: {len(worst)} layers back to float")
            kept += worst
        speed: dict[str, object] = {"cpu": cpu_features().model, "int8_instructions": list(cpu_features().int8),
                                    "threads": options.threads or (os.cpu_count() or 1)}
        passed = not miss
        if passed or not options.budget:
            for kind_name in options.runtimes:
                fp32 = time_runtime(kind_name, prepared, held_items[0].feeds, options.threads, options.speed_runs)
                int8 = time_runtime(kind_name, qdq, held_items[0].feeds, options.threads, options.speed_runs)
                if fp32 is not None and int8 is not None:
                    speed[kind_name] = {"fp32_ms": round(fp32, 2), "int8_ms": round(int8, 2)}
        report = QuantReport(
            model=name, kind=kind, source=src.name, source_size=src.stat().st_size,
            source_sha256=file_sha256(src), checked=options.budget, passed=passed and options.budget,
            failed=miss, budget=budget_words(kind),
            measures={k: round(float(v), 6) for k, v in measures.items()},
            kept_float=kept, sensitivity_rounds=rounds,
            calibration={"source": calibration_source, "inputs": len(calib_items), "held_out": len(held_items),
                         "held_out_are": samples.held_out_faces, "faces_found": samples.faces_found,
                         "method": "min/max, U8 activations, S8 per-channel weights, QDQ"},
            speed=speed, written=date.today().isoformat())
        if not passed and options.budget:
            return Outcome(None, report, f"{name}: refused, over the {kind} budget: {miss}; "
                                         f"the float file stays in use")
        os.replace(qdq, dst)
        write_report(report, report_path(dst))
    ort_speed = report.speedup("onnxruntime")
    figures = ", ".join(f"{k} {v:.4g}" for k, v in report.measures.items() if k in budget_words(kind))
    line = (f"{name}: wrote {dst.name} ({'within budget' if options.budget else 'UNCHECKED (--no-budget)'}"
            f"{': ' + figures if figures else ''}"
            f"{f'; {ort_speed:.2f}x float on ONNX Runtime' if ort_speed else ''}"
            f"{'; over budget: ' + miss if miss else ''})")
    return Outcome(dst, report, line)
