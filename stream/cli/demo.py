"""`facestream demo`: build the demo media from installed packages, swap, show the result."""
from __future__ import annotations

import tempfile
from pathlib import Path

import av
import cv2
import numpy as np

from stream.cli.swap_command import run_swap, summarise
from stream.config import Config
from stream.errors import SinkError
from stream.job.report import Written
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import astronaut, make_demo_clip

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


def run_demo(config: Config, out_dir: Path, seconds: float, quiet: bool = False,
             stats_json: str | None = None, written: Written | None = None) -> int:
    """Build the demo clip and source face into `out_dir`, swap, write the contact sheet."""
    astronaut()  # the demo extra missing is said before any file is made
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
    for note in job.notes:  # the engine, and on a GPU the VRAM plan
        print(f"note: {note}")
    job.notes.clear()
    print(f"swapping the astronaut into {frames} frames ...")
    result = run_swap(job, str(target), str(swapped), quiet=quiet, written=written)
    summarise(result, quiet, stats_json)
    contact_sheet(target, swapped, sheet, frames)
    print("demo files:")
    print(f"  target clip    {target}")
    print(f"  source face    {source}")
    print(f"  swapped video  {swapped}")
    print(f"  contact sheet  {sheet}")
    return 0


def demo_face() -> str:
    """scikit-image's astronaut as a photo file (the face offered when none is given)."""
    picture = astronaut()  # DemoUnavailable without the demo extra, whatever an earlier run left
    path = Path(tempfile.gettempdir()) / "facestream-astronaut.png"
    if not path.is_file():
        cv2.imwrite(str(path), picture)
    return str(path)
