"""`facestream serve` as a service: many WHIP sessions in turn, and what each leaves behind.

Starts `facestream serve` as a process on a free loopback port, then publishes to it N
times in turn as OBS would (a WHIP publisher, an aiortc peer sending a face clip and taking
the swapped video back), each for `--seconds`, then DELETE. After each session it reads
the server's resident memory, threads and open file descriptors from /proc, and at the end
prints one row per session and the growth: after the last session against after the fifth
(the issue's measure: within 10%), and per session.

    python tools/serve_soak.py                       # 30 sessions of 3 s
    python tools/serve_soak.py --sessions 20 --env MALLOC_ARENA_MAX=2
    python tools/serve_soak.py --json soak.json

Linux only (/proc).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402

from stream.media.demo_clips import astronaut, pan_zoom_frames  # noqa: E402
from stream.server.client import PacedTrack  # noqa: E402
from stream.server.whip_client import whip_publish  # noqa: E402


def proc_figures(pid: int) -> dict[str, float]:
    """Resident memory (MB), threads and open descriptors of process `pid`."""
    rss_kb = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return {"rss_mb": rss_kb / 1024, "threads": len(os.listdir(f"/proc/{pid}/task")),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def start_server(photo: Path, env: dict[str, str], extra: list[str]) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "stream.cli", "serve", "--source", str(photo), "--port", "0",
                             "--quiet", *extra], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("serving "):
            return proc, line.split()[1]
    proc.kill()
    raise SystemExit(f"serve_soak: the server did not start (exit {proc.wait()})")


async def one_session(url: str, pictures: list[Any], seconds: float) -> dict[str, Any]:
    call = await whip_publish(f"{url}whip", PacedTrack(pictures), ice_addresses=["127.0.0.1"])
    track = await asyncio.wait_for(call.remote, 30)
    got, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        await asyncio.wait_for(track.recv(), 30)
        got += 1
    status = await call.delete()
    await call.pc.close()
    return {"frames_back": got, "delete": status}


async def soak(url: str, pid: int, sessions: int, seconds: float, settle: float) -> list[dict[str, Any]]:
    pictures = list(pan_zoom_frames(astronaut(), 12, size=(640, 480)))
    rows = [{"session": 0, **proc_figures(pid)}]
    for n in range(1, sessions + 1):
        t0 = time.monotonic()
        result = await one_session(url, pictures, seconds)
        await asyncio.sleep(settle)
        rows.append({"session": n, "wall_s": round(time.monotonic() - t0, 2), **result, **proc_figures(pid)})
        print(f"  session {n:3d}: {result['frames_back']:4d} frames back, DELETE {result['delete']}, "
              f"RSS {rows[-1]['rss_mb']:7.1f} MB, threads {rows[-1]['threads']:3d}, fds {rows[-1]['fds']:3d}",
              flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=30)
    ap.add_argument("--seconds", type=float, default=3.0, help="each session publishes this long")
    ap.add_argument("--settle", type=float, default=0.5, help="wait after each DELETE before reading /proc")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set in the server's environment (e.g. MALLOC_ARENA_MAX=2)")
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to `facestream serve`")
    ap.add_argument("--json", help="also write every row as JSON")
    a = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(item.split("=", 1) for item in a.env)
    with tempfile.TemporaryDirectory(prefix="serve-soak-") as tmp:
        photo = Path(tmp) / "face.png"
        cv2.imwrite(str(photo), astronaut())
        proc, url = start_server(photo, env, a.serve_arg)
        try:
            time.sleep(1.0)
            rows = asyncio.run(soak(url, proc.pid, a.sessions, a.seconds, a.settle))
        finally:
            proc.terminate()
            proc.wait(10)
    first, last = rows[0], rows[-1]
    fifth = rows[min(5, len(rows) - 1)]
    growth = last["rss_mb"] / fifth["rss_mb"] - 1
    per = (last["rss_mb"] - fifth["rss_mb"]) / max(1, last["session"] - fifth["session"])
    print(f"RSS {first['rss_mb']:.0f} MB before, {fifth['rss_mb']:.0f} after session {fifth['session']}, "
          f"{last['rss_mb']:.0f} after session {last['session']}: {growth:+.1%} ({per:+.1f} MB a session "
          f"since the fifth); threads {first['threads']} -> {last['threads']}, fds {first['fds']} -> {last['fds']}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
