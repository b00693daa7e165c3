"""INT8 and OpenVINO against today's path (ONNX Runtime, float), model by model, on this CPU.

For each model it times the float file and its INT8 twin (`<stem>_int8.onnx`, written by
`facestream models quantize`) on ONNX Runtime and on OpenVINO (where installed), alternating
the four in each round so a noisy machine drifts all of them alike, and prints ms a run
(median) and each one's speed against ONNX Runtime float. The `auto` column is what
`--precision auto` (with `--runtime auto`) runs for that model on this machine: the INT8 file
only where its report passed its budget, on the runtime its report measured faster.

    python tools/bench_precision.py --build DIR      # the cost-equivalent set, quantised, then timed
    python tools/bench_precision.py --models-dir DIR # the files already there
    python tools/bench_precision.py --models-dir DIR --only inswapper_128.onnx --rounds 7

`--build` writes the cost-equivalent stand-ins (tools/cost_models.py: the real models'
multiply-accumulates in real layers, random weights) and quantises each with `facestream
models quantize`: within budget where it passes, else again with `--no-budget` (the speed
is what a real file of that architecture would run at; random weights say little about
drift), and says which.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

# file -> catalog name, in the order the table lists them
MODELS = {
    "inswapper_128.onnx": "inswapper_128",
    "det_10g.onnx": "scrfd_10g",
    "w600k_r50.onnx": "arcface_w600k_r50",
    "2dfan4.onnx": "2dfan4",
    "simswap_256.onnx": "simswap_256",
}
DYNAMIC = {"det_10g.onnx": 640}  # the size a dynamic spatial axis is timed at


def _feeds(runtime) -> dict[str, np.ndarray]:  # noqa: ANN001 - any InferenceRuntime
    rng = np.random.default_rng(0)
    size = DYNAMIC.get(runtime.path.name.replace("_int8", ""), 1)
    feeds = {}
    for spec in runtime.inputs:
        shape = [d if d is not None else (1 if i == 0 else size) for i, d in enumerate(spec.shape)]
        dtype = np.float64 if "double" in spec.dtype else np.float32
        value = rng.random(shape).astype(dtype)
        if spec.name == "source":
            value /= np.linalg.norm(value)
        feeds[spec.name] = value
    return feeds


def _runtimes(kinds: list[str], threads: int):  # -> dict[str, callable]
    from engines.backends.base import RuntimeOptions
    from engines.backends.registry import RUNTIMES

    out = {}
    for kind in kinds:
        if kind not in RUNTIMES:
            print(f"note: runtime {kind} is not available here", file=sys.stderr)
            continue
        options = RuntimeOptions(kind=kind, intra_threads=threads, providers="cpu") if kind == "onnxruntime" \
            else RuntimeOptions(kind=kind, intra_threads=threads, device="CPU")
        out[kind] = (lambda path, k=kind, o=options: RUNTIMES[k](path, o, None))
    return out


def time_model(folder: Path, file: str, makers: dict, rounds: int) -> dict[tuple[str, str], float]:
    """Median ms a run of (runtime, precision) for one model, the four alternating each round."""
    from engines.errors import EngineError
    from engines.int8 import int8_path

    paths = {"fp32": folder / file, "int8": int8_path(folder / file)}
    opened = {}
    for kind, make in makers.items():
        for precision, path in paths.items():
            if not path.is_file():
                continue
            try:
                rt = make(path)
                rt.open()
            except EngineError as exc:
                print(f"  {file} {precision} on {kind}: {exc}", file=sys.stderr)
                continue
            feeds = _feeds(rt)
            rt.run(feeds)  # warm-up: the first run plans and allocates
            opened[(kind, precision)] = (rt, feeds)
    times: dict[tuple[str, str], list[float]] = {key: [] for key in opened}
    for _ in range(rounds):
        for key, (rt, feeds) in opened.items():
            t = time.perf_counter()
            rt.run(feeds)
            times[key].append((time.perf_counter() - t) * 1000.0)
    for rt, _ in opened.values():
        rt.close()
    return {key: statistics.median(v) for key, v in times.items()}


def auto_choice(folder: Path, file: str, measured: dict[tuple[str, str], float]) -> tuple[str, str, str] | None:
    """What --runtime auto --precision auto runs for this model here (engines.quantize.choose),
    and a mark: '*' where the INT8 file is unchecked (--no-budget: a stand-in's random weights)
    and the figure is what auto would run were it within budget."""
    from engines.backends.base import RuntimeOptions
    from engines.int8 import int8_path, read_report
    from engines.quantize.choose import auto_runtime_choice, faster_runtime

    kind, precision = auto_runtime_choice(folder / file, RuntimeOptions(kind="auto"))
    mark = ""
    report = read_report(int8_path(folder / file))
    if precision == "fp32" and report is not None and not report.checked:
        kind, precision, mark = faster_runtime(int8_path(folder / file)), "int8", "*"
    return (kind, precision, mark) if (kind, precision) in measured else None


def build(folder: Path, files: list[str]) -> None:
    from stream.cli.main import main as facestream
    from tools.cost_models import build_all

    missing = [f for f in files if not (folder / f).is_file()]
    if missing:
        print(f"building the cost-equivalent {', '.join(missing)} in {folder}", flush=True)
        build_all(folder, missing)
    for file in files:
        name = MODELS[file]
        if facestream(["models", "quantize", name, "--models-dir", str(folder)]) != 0:
            print(f"{name}: over budget on its random weights; written unchecked for the speed figures", flush=True)
            facestream(["models", "quantize", name, "--models-dir", str(folder), "--no-budget"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--models-dir", type=Path, help="the float files and their INT8 twins")
    where.add_argument("--build", type=Path, metavar="DIR",
                       help="write the cost-equivalent set into DIR and quantise it first")
    ap.add_argument("--only", action="append", choices=list(MODELS), help="this model only (repeatable)")
    ap.add_argument("--runtimes", default="onnxruntime,openvino", help="comma-separated (default both)")
    ap.add_argument("--threads", type=int, default=0, help="threads a model (default: the machine's cores)")
    ap.add_argument("--rounds", type=int, default=5, help="timed runs of each (median; default 5)")
    args = ap.parse_args(argv)
    from engines.cpu_features import cpu_features

    folder = args.build or args.models_dir
    files = args.only or list(MODELS)
    if args.build:
        build(folder, files)
    files = [f for f in files if (folder / f).is_file()]
    makers = _runtimes(args.runtimes.split(","), args.threads)
    cpu = cpu_features()
    print(f"\n{cpu.line()}; {args.threads or 'all'} threads; median of {args.rounds} runs, alternated")
    cols = [(k, p) for k in makers for p in ("fp32", "int8")]
    head = " | ".join(f"{k} {p}" for k, p in cols)
    print("(auto: what --runtime auto --precision auto runs; * an unchecked INT8 file, what auto would run "
          "were it within budget)")
    print(f"| model | {head} | auto |")
    print("|---" * (len(cols) + 2) + "|")
    for file in files:
        measured = time_model(folder, file, makers, args.rounds)
        base = measured.get(("onnxruntime", "fp32"))
        cells = []
        for key in cols:
            ms = measured.get(key)
            cells.append("-" if ms is None else f"{ms:,.0f} ms" + (f" ({base / ms:.1f}x)" if base else ""))
        auto = auto_choice(folder, file, measured)
        auto_cell = "-"
        if auto:
            kind, precision, mark = auto
            ratio = f" ({base / measured[(kind, precision)]:.1f}x)" if base else ""
            auto_cell = f"{kind} {precision}{mark}{ratio}"
        print(f"| {file.removesuffix('.onnx')} | {' | '.join(cells)} | {auto_cell} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
