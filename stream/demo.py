"""`facestream demo`: build the demo media from installed packages, swap, show the result."""
from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np

from stream.config import Config
from stream.demo_media import astronaut, make_demo_clip
from stream.errors import SinkError
from stream.pipeline import JobResult, SwapJob

SHEET_ROWS = 4


def _frames_at(path: Path, indices: list[int]) -> dict[int, np.ndarray]:
    wanted = set(indices)
    out: dict[int, np.ndarray] = {}
    with av.open(str(path)) as container:
        for i, frame in enumerate(container.decode(video=0)):
            if i in wanted:
                out[i] = frame.to_ndarray(format="bgr24")
            if len(out) == len(wanted):
                break
    return out


def contact_sheet(before: Path, after: Path, sheet: Path, frames: int, rows: int = SHEET_ROWS) -> None:
    """Before/after pairs at evenly spaced frames, side by side, one pair a row."""
    indices = [int(round(i * (frames - 1) / max(rows - 1, 1))) for i in range(rows)]
    a, b = _frames_at(before, indices), _frames_at(after, indices)
    tiles = []
    for i in indices:
        if i not in a or i not in b:
            continue
        pair = []
        for img, label in ((a[i], f"before  #{i}"), (b[i], f"after  #{i}")):
            small = cv2.resize(img, (640, 360), interpolation=cv2.INTER_AREA)
            cv2.putText(small, label, (12, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (0, 0, 0), 4, cv2.LINE_AA)
            cv2.putText(small, label, (12, 30), cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 2, cv2.LINE_AA)
            pair.append(small)
        tiles.append(np.hstack(pair))
    if not cv2.imwrite(str(sheet), np.vstack(tiles)):
        raise SinkError(f"contact sheet {str(sheet)!r} cannot be written")


def run_demo(config: Config, out_dir: Path, seconds: float, args: argparse.Namespace,
             run_swap: Callable[[SwapJob, str, str, argparse.Namespace], JobResult],
             summarise: Callable[[JobResult, argparse.Namespace], Any]) -> int:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SinkError(f"demo folder {str(out_dir)!r} cannot be created: {exc.strerror}") from exc
    out_dir = out_dir.resolve()
    target = out_dir / "demo_target.mp4"
    source = out_dir / "source_astronaut.png"
    swapped = out_dir / "demo_swapped.mp4"
    sheet = out_dir / "demo_contact_sheet.png"
    print(f"building the demo clip ({seconds:g} s, 1280x720, 30 fps, six faces) ...")
    frames = make_demo_clip(target, seconds)
    if not cv2.imwrite(str(source), astronaut()):
        raise SinkError(f"{str(source)!r} cannot be written")
    job = SwapJob(config, [str(source)])
    job.open()
    print(f"swapping the astronaut into {frames} frames ...")
    result = run_swap(job, str(target), str(swapped), args)
    summarise(result, args)
    contact_sheet(target, swapped, sheet, frames)
    print("demo files:")
    print(f"  target clip    {target}")
    print(f"  source face    {source}")
    print(f"  swapped video  {swapped}")
    print(f"  contact sheet  {sheet}")
    return 0
