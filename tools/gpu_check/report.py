"""The GPU check's short printed table, made from its JSON report."""
from __future__ import annotations

from typing import Any


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _copies(sec: dict[str, Any]) -> list[str]:
    lines = [f"  {'MiB':>7} {'memory':<9} {'H2D GB/s':>9} {'D2H GB/s':>9}  exact"]
    for r in sec["rows"]:
        lines.append(f"  {_fmt(r['size_mib'], 2):>7} {r['memory']:<9} {_fmt(r['h2d_gbps']):>9} "
                     f"{_fmt(r['d2h_gbps']):>9}  {'yes' if r['round_trip_exact'] else 'NO'}")
    ratio = sec["pinned_over_pageable"]
    lines.append(f"  pinned / pageable at {_fmt(ratio['size_mib'])} MiB: H2D x{_fmt(ratio['h2d'])}, "
                 f"D2H x{_fmt(ratio['d2h'])}")
    return lines


def _ring(sec: dict[str, Any]) -> list[str]:
    h, w, _ = sec["frame_shape"]
    return [
        f"  {w}x{h} frames ({_fmt(sec['frame_mib'])} MiB), {sec['slots']} slots ({sec['allocator']}), "
        f"{sec['frames']} frames; "
        f"up {_fmt(sec['upload_ms'], 3)} ms, work {_fmt(sec['work_ms'], 3)} ms, down {_fmt(sec['download_ms'], 3)} ms",
        f"  serial {_fmt(sec['serial_fps'], 1)} fps, overlapped {_fmt(sec['overlapped_fps'], 1)} fps: "
        f"x{_fmt(sec['ratio'])} (ideal x{_fmt(sec['ideal_ratio'])}); checked {sec['checked_frames']} frames, "
        f"{sec['mismatched_frames']} wrong",
    ]


def _models(sec: dict[str, Any]) -> list[str]:
    batches = sorted({int(b) for m in sec["models"].values() for b in m["batches"]})
    head = "".join(f"{'b' + str(b):>9}" for b in batches)
    lines = [f"  p50 ms of run()          {head}  max|diff| vs ORT CPU"]
    for name, m in sec["models"].items():
        for precision in ("fp32", "fp16"):
            one = m[precision]
            if not one["ok"]:
                lines.append(f"  {name:<18} {precision}  failed: {one.get('error', '?')}")
                continue
            cells = "".join(f"{_fmt(one['latency'][str(b)]['p50_ms'], 3) if str(b) in one['latency'] else '':>9}"
                            for b in batches)
            lines.append(f"  {name:<18} {precision} {cells}  {one['max_abs_diff']:.2e}")
    return lines


def _pipeline(sec: dict[str, Any]) -> list[str]:
    clip, mem = sec["clip"], sec["peak_memory"]
    stages = "  ".join(f"{k} {_fmt(v['p50_ms'], 1)}/{_fmt(v['p95_ms'], 1)}" for k, v in sec["stages"].items())
    return [
        f"  {clip['width']}x{clip['height']}, {clip['frames']} frames, {sec['runtime']} {sec['precision']}, "
        f"{sec['faces_swapped']} faces swapped in {sec['frames_with_faces']} frames",
        f"  pipeline {_fmt(sec['pipeline_fps'], 1)} fps, engine alone {_fmt(sec['engine_alone_fps'], 1)} fps: "
        f"ratio {_fmt(sec['ratio'])} (goal >= {sec['goal']}: {'met' if sec['meets_goal'] else 'NOT met'}); "
        f"slowest stage {sec['slowest_stage']}",
        f"  stage p50/p95 ms: {stages}",
        f"  peak device memory: torch {_fmt(mem['torch_max_allocated_mib'], 1)} MiB, cupy pool "
        f"{_fmt(mem['cupy_pool_total_mib'], 1)} MiB, device used {_fmt(mem['device_used_peak_mib'], 1)} MiB",
    ]


def _live(sec: dict[str, Any]) -> list[str]:
    clip, lat = sec["clip"], sec["latency_ms"]
    return [
        f"  one face live, {clip['width']}x{clip['height']} at {clip['fps']} fps, masks {sec['masks']} "
        f"(areas {sec['areas']}), {sec['models']} models on {sec['runtime']} {sec['precision']}; "
        f"{sec['faces_swapped']} faces swapped, mask models run {sec['mask_model_runs']} times",
        f"  in {_fmt(sec['fps_in'], 1)} fps, out {_fmt(sec['fps_out'], 1)} fps, drops {sec['drops']} of "
        f"{sec['frames_in']}; latency p50 {_fmt(lat['p50_ms'], 0)} ms p95 {_fmt(lat['p95_ms'], 0)} ms "
        f"(bound {_fmt(sec['p95_bound_ms'], 0)}); the live bench's targets: "
        f"{'met' if sec['meets_targets'] else 'NOT met'}"
        + (f"; {_fmt(sec['swaps_per_s_a_face'], 1)} swaps/s a face, carried between"
           if sec.get("swaps_per_s_a_face") is not None else ""),
    ]


def _int8(sec: dict[str, Any]) -> list[str]:
    lines = [f"  {sec['models_kind']} on {sec['runtime']}; files by {sec['quantizer']}",
             f"  {'model':<20} {'fp16 p50 ms':>12} {'int8 p50 ms':>12} {'x':>6}  drift (worst output): PSNR dB, cosine"]
    for name, m in sec["models"].items():
        if not m["ok"]:
            lines.append(f"  {name:<20} failed: {m.get('error', '?')}")
            continue
        worst = min(m["drift"].values(), key=lambda d: d["psnr_db"])
        lines.append(f"  {name:<20} {_fmt(m['fp16']['p50_ms'], 3):>12} {_fmt(m['int8']['p50_ms'], 3):>12} "
                     f"{_fmt(m['speedup']):>6}  {_fmt(worst['psnr_db'], 1)}, {worst['cosine']:.4f}")
    return lines


SHOW = {"copies": _copies, "ring": _ring, "models": _models, "pipeline": _pipeline, "live": _live, "int8": _int8}


def table(report: dict[str, Any]) -> str:
    """A few lines per section; a failed section shows its error."""
    device = report["machine"].get("device", {})
    where = device.get("gpu") or ("numpy stand-in (dry run)" if device.get("stand_in") else device.get("error"))
    runtime = report.get("runtime", {})
    lines = [f"gpu_check{' (dry run)' if report['dry_run'] else ''}: device {where}; "
             f"models on {runtime.get('kind')} ({runtime.get('device', '?')})"]
    for name, sec in report["sections"].items():
        lines.append(f"{name} ({sec['seconds']} s)")
        if not sec["ok"]:
            lines.append(f"  FAILED: {sec['error']}")
            continue
        try:
            lines.extend(SHOW[name](sec))
        except (KeyError, TypeError, ValueError) as exc:  # a table bug must not hide the JSON
            lines.append(f"  (cannot show: {exc!r}; see the JSON)")
    return "\n".join(lines)
