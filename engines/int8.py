"""A model file's INT8 twin: its name, and the JSON report written beside it (every wing that
loads model files reads it, so it is part of the engines' vocabulary).

`inswapper_128.onnx` -> `inswapper_128_int8.onnx` and `inswapper_128_int8.json`. The report
holds every drift figure against the float original (on held-out inputs), the family's
budget and whether the file passed it, what was kept in float, the calibration used, and
the speed of both files on the machine that wrote it. A file written with `--no-budget` is
marked unchecked: `--precision auto` never picks it.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

INT8_SUFFIX = "_int8"
REPORT_VERSION = 1


def int8_path(float_path: str | os.PathLike[str]) -> Path:
    """Where the INT8 twin of a float model file lives: beside it, `<stem>_int8.onnx`."""
    path = Path(float_path)
    return path.with_name(f"{path.stem}{INT8_SUFFIX}{path.suffix or '.onnx'}")


def report_path(int8_file: str | os.PathLike[str]) -> Path:
    """The JSON report beside an INT8 file."""
    return Path(int8_file).with_suffix(".json")


def is_int8_name(path: str | os.PathLike[str]) -> bool:
    return Path(path).stem.endswith(INT8_SUFFIX)


@dataclass
class QuantReport:
    """What `facestream models quantize` found for one model (see the module doc)."""

    model: str  # catalog name
    kind: str  # the catalog kind (swapper, detector, ...): which budget applies
    source: str  # the float file's name
    source_size: int  # bytes: a float file replaced since is noticed (the report is then stale)
    source_sha256: str
    checked: bool  # False: written with --no-budget, never picked by `auto`
    passed: bool  # within every limit of the family's budget (False when unchecked)
    failed: str = ""  # the first limit missed, in words, when not passed
    budget: dict[str, str] = field(default_factory=dict)  # measure -> its limit, in words
    measures: dict[str, float] = field(default_factory=dict)  # measure -> value (held-out inputs)
    kept_float: list[str] = field(default_factory=list)  # nodes left in float
    sensitivity_rounds: int = 0  # passes that moved the worst nodes back to float
    calibration: dict[str, Any] = field(default_factory=dict)  # source, inputs, held-out inputs
    speed: dict[str, Any] = field(default_factory=dict)  # cpu, threads, per runtime: fp32_ms, int8_ms
    written: str = ""  # ISO date
    version: int = REPORT_VERSION

    @property
    def usable(self) -> bool:
        """Checked and within budget: what `--precision auto` may pick."""
        return self.checked and self.passed

    def speedup(self, runtime: str = "onnxruntime") -> float | None:
        one = self.speed.get(runtime) or {}
        fp32, int8 = one.get("fp32_ms"), one.get("int8_ms")
        return fp32 / int8 if fp32 and int8 else None

    def status(self) -> str:
        """One phrase for listings: 'checked: within budget', 'unchecked (--no-budget)', ..."""
        if not self.checked:
            return "unchecked (--no-budget): never picked by auto"
        return "within budget" if self.passed else f"over budget ({self.failed})"


def write_report(report: QuantReport, path: str | os.PathLike[str]) -> None:
    """Write the report as JSON, whole or not at all."""
    from engines.atomic_write import user_file_mode, write_atomically

    text = json.dumps(asdict(report), indent=2, sort_keys=True) + "\n"
    write_atomically(path, text.encode("utf-8"), user_file_mode())


def read_report(path: str | os.PathLike[str]) -> QuantReport | None:
    """The report at `path` (or beside the INT8 file `path`), None when there is none or it
    cannot be read as one (a report we cannot read is treated as no report: nothing is picked)."""
    p = Path(path)
    if p.suffix != ".json":
        p = report_path(p)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        known = QuantReport.__dataclass_fields__
        return QuantReport(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None


def fresh_report(int8_file: str | os.PathLike[str], float_file: str | os.PathLike[str]) -> QuantReport | None:
    """The INT8 file's report when the file exists and the report still describes the float
    file beside it (same size); None otherwise."""
    q, f = Path(int8_file), Path(float_file)
    if not q.is_file():
        return None
    report = read_report(q)
    if report is None:
        return None
    try:
        if f.stat().st_size != report.source_size:
            return None
    except OSError:
        return None
    return report
