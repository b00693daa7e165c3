"""`facestream benchmark`: how fast this machine runs a job, on the built-in clips or the
user's own, and whether that is real time."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

import cv2

from stream.cli.parser import CliError, config_from_args
from stream.cli.swap_command import job_for
from stream.job.benchmark import measure, verdict
from stream.media.demo_clips import astronaut, make_demo_clip, make_single_face_clip
from stream.runtime.metrics import format_cadence

# Built-in clips: name -> (label, size, faces).
CLIPS = {
    "720p-1": ("720p, one face", (1280, 720), 1),
    "720p-6": ("720p, six faces", (1280, 720), 6),
    "1080p-1": ("1080p, one face", (1920, 1080), 1),
    "1080p-6": ("1080p, six faces", (1920, 1080), 6),
}
DEFAULT_CLIPS = "720p-1,720p-6"
STAGES = ("decode", "analyse", "swap", "composite", "encode")


def clip_names(text: str) -> list[str]:
    """`--clips` as a list of built-in names ("all": every one); a CliError naming a bad one."""
    if text.strip() == "all":
        return list(CLIPS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    for n in names:
        if n not in CLIPS:
            raise CliError(f"--clips {n!r} is not a built-in clip (choose from {', '.join(CLIPS)}, or all)")
    if not names:
        raise CliError("--clips names no clip")
    return names


def machine() -> str:
    """This machine in a line: the CPU's name, its cores, the OS and Python."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, OpenCV {cv2.__version__}")


def format_clip(s: dict[str, Any]) -> str:
    w, h = s["size"]
    fps = s["fps"]
    ratio = f" ({fps['ratio']:.2f}x)" if fps["ratio"] else ""
    lines = [f"{s['clip']} ({w}x{h}, {s['frames']} frames, {s['faces_swapped']} faces swapped)",
             f"  fps          staged {fps['staged']:.1f}, serial {fps['serial']:.1f}{ratio}",
             f"  {'stage':<12} {'p50 ms':>8} {'p95 ms':>8}   (staged, median run)"]
    for name in STAGES:
        if name in s["stages"]:
            st = s["stages"][name]
            lines.append(f"  {name:<12} {st['p50_ms']:>8.1f} {st['p95_ms']:>8.1f}")
    lat = s["latency"]
    lines.append(f"  {'latency':<12} {lat['p50_ms']:>8.1f} {lat['p95_ms']:>8.1f}   (capture to sink)")
    lines.append(f"  peak RSS     {s['peak_rss_mb']:.0f} MB")
    if "cadence" in s:
        cad = s["cadence"]
        lines.append(f"  cadence      swap every {cad['swap_every']}: "
                     f"{format_cadence(cad['swapper'], cad['swaps_per_s_a_face'])} ({cad['swaps']} swaps)")
    lines.append(f"  {verdict(s)}")
    return "\n".join(lines)


def markdown(summaries: list[dict[str, Any]], header: dict[str, Any]) -> str:
    """The table of docs/performance.md: one row per clip, the machine and the date above it."""
    lines = [f"Measured {header['date']} with `{header['command']}` on {header['machine']}; "
             f"preset {header['preset']}, engine {header['engine']}.", "",
             "| clip | staged fps | serial fps | analyse p50/p95 ms | swap p50/p95 ms | composite p50/p95 ms "
             "| latency p50/p95 ms | peak RSS | real time |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in summaries:
        cells = [s["clip"], f"{s['fps']['staged']:.1f}", f"{s['fps']['serial']:.1f}"]
        for name in ("analyse", "swap", "composite"):
            st = s["stages"].get(name, {"p50_ms": 0.0, "p95_ms": 0.0})
            cells.append(f"{st['p50_ms']:.1f} / {st['p95_ms']:.1f}")
        cells.append(f"{s['latency']['p50_ms']:.0f} / {s['latency']['p95_ms']:.0f}")
        cells.append(f"{s['peak_rss_mb']:.0f} MB")
        spare = s["spare_ms"]
        cells.append(f"yes, {spare:.1f} ms to spare" if s["real_time"] else f"no, {-spare:.1f} ms over")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_benchmark(args: argparse.Namespace) -> int:
    if args.seconds <= 0:
        raise CliError(f"--seconds must be above 0, got {args.seconds:g}")
    if args.repeat < 1:
        raise CliError(f"--repeat must be 1 or more, got {args.repeat}")
    if args.fps is not None and args.fps <= 0:
        raise CliError(f"--fps must be above 0, got {args.fps:g}")
    if args.serial:
        raise CliError("--serial: the benchmark runs every clip both ways, staged and serial")
    args.json = args.json or args.stats_json
    names = [] if args.input else clip_names(args.clips)
    if args.input and not Path(args.input).is_file():
        raise CliError(f"input {args.input!r} does not exist")
    config = config_from_args(args)
    summaries: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="facestream-benchmark-") as tmp:
        sources = list(args.source)
        if not sources:
            sources = [str(Path(tmp) / "source.png")]
            cv2.imwrite(sources[0], astronaut())
        job = job_for(config, sources)
        job.open()
        for note in job.notes:
            print(f"note: {note}")
        job.notes.clear()
        header = {"date": datetime.date.today().isoformat(), "machine": machine(),
                  "preset": args.config or "default", "engine": job.models.name,
                  "command": "facestream " + " ".join(args.argv)}
        print(f"{header['date']}, {header['machine']}")
        print(f"preset {header['preset']}, engine {header['engine']}, "
              f"{args.repeat} run(s) of each mode a clip, staged and serial alternating")
        clips = [(args.input, Path(args.input).name)] if args.input else []
        for name in names:
            label, size, faces = CLIPS[name]
            path = str(Path(tmp) / f"{name}.mp4")
            print(f"building the {label} clip ({args.seconds:g} s) ...", flush=True)
            if faces == 1:
                make_single_face_clip(path, args.seconds, size=size)
            else:
                make_demo_clip(path, args.seconds, size=size)
            clips.append((path, label))
        for path, label in clips:
            def said(mode: str, rep: dict[str, Any]) -> None:
                if not args.quiet:
                    print(f"  {mode:<7} {rep['fps']:.1f} fps", flush=True)

            print(f"\n{label} ...", flush=True)
            result = measure(job, label, path, args.repeat, args.fps, on_run=said)
            summary = result.summary()
            summaries.append(summary)
            print(format_clip(summary))
    if args.markdown:
        print()
        print(markdown(summaries, header))
    if args.json:
        Path(args.json).write_text(json.dumps({**header, "clips": summaries}, indent=2))
        print(f"figures written to {args.json}")
    return 0
