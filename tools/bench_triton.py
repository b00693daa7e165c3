"""Streams sharing one Triton server against the same streams each with a local runtime.

1, 2 and 4 concurrent streams, each a `facestream swap` process on the same clip, with the
stand-in neural models (tools/synth: SCRFD, ArcFace, inswapper with a dynamic batch axis,
2dfan4): first each stream on its own ONNX Runtime, then all of them through one bundled
`tritonserver` (tools/triton/env.py) serving a Python-backend repository of the same files
(`engines.backends.triton.repo`, dynamic batching). Prints, per mode and stream count: frames per
second per stream (mean, and all streams together), the p95 of the swap stage (the
swapper call of a frame) and of the analyse stage (detector and landmarks), the p95
capture-to-sink latency, and from the server's statistics the batches formed: requests
and batch items per model execution.

    python tools/bench_triton.py                        # 1, 2, 4 streams, 150 frames each
    python tools/bench_triton.py --streams 1 2 --frames 60 --faces 3 --json out.json
    python tools/bench_triton.py --serve inswapper_128  # only the swapper on the server

Every process here shares the machine's cores with the server; on a CPU-only machine the
server's models run on the same cores as the streams, so this measures the batching and
the client's overhead, not what a GPU server adds.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):  # run as a file: this tree's packages first (a tool measures the tree it sits in)
    sys.path.insert(0, str(ROOT))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from engines.backends.triton.repo import write_repository  # noqa: E402
from stream.media.demo_clips import astronaut, group_picture  # noqa: E402
from tools.media import make_clip  # noqa: E402
from tools.synth.face_models import make_arcface, make_inswapper  # noqa: E402
from tools.synth.fan import make_fan  # noqa: E402
from tools.synth.scrfd import build_scrfd_model  # noqa: E402
from tools.triton.env import ensure_env, server_command, server_environ  # noqa: E402

MODELS = {"scrfd_10g": "det_10g.onnx", "arcface_w600k_r50": "w600k_r50.onnx",
          "inswapper_128": "inswapper_128.onnx", "2dfan4": "2dfan4.onnx"}
# Face crops of the group picture (x0, y0, x1, y1), pasted small on grey: the stand-in
# detector finds about this many faces there (on the whole picture it finds a hundred).
CROPS = [(100, 180, 220, 300), (300, 330, 420, 450), (470, 190, 590, 310), (820, 260, 940, 380)]


def make_models(folder: Path) -> dict[str, Path]:
    build_scrfd_model(folder / MODELS["scrfd_10g"], seed=3)
    make_arcface(folder / MODELS["arcface_w600k_r50"], seed=4)
    make_inswapper(folder / MODELS["inswapper_128"], seed=5, batch=None)
    make_fan(folder / MODELS["2dfan4"])
    return {name: folder / file for name, file in MODELS.items()}


def make_bench_clip(path: Path, frames: int, faces: int) -> Path:
    picture = group_picture()

    def frame(i: int) -> np.ndarray:
        canvas = np.full((360, 480, 3), 128, np.uint8)
        for k, (x0, y0, x1, y1) in enumerate(CROPS[:faces]):
            x, y = 30 + (k % 2) * 220 + i % 24, 30 + (k // 2) * 170
            canvas[y:y + 96, x:x + 96] = cv2.resize(picture[y0:y1, x0:x1], (96, 96))
        return cv2.GaussianBlur(canvas, (0, 0), 4)

    make_clip(path, frame, n=frames, fps=25, audio=False, options=None)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """The bundled tritonserver on a repository, in a process group of its own."""

    def __init__(self, repo: Path, log: Path) -> None:
        self.http, self.grpc = _free_port(), _free_port()
        env = ensure_env()
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(server_command(env, repo, self.http, self.grpc), env=server_environ(env),
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while not self._ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"tritonserver did not start; see {log}")
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.grpc}"

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def stats(self) -> dict[str, dict[str, int]]:
        """Per model: requests, batch items (inference_count) and executions so far."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/models/stats", timeout=10) as r:
            data = json.loads(r.read())
        return {m["name"]: {"requests": int(m["inference_stats"]["success"]["count"]),
                            "items": int(m["inference_count"]), "executions": int(m["execution_count"])}
                for m in data["model_stats"]}

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_streams(n: int, clip: Path, photo: Path, models: Path, work: Path, threads: int,
                url: str | None) -> list[dict[str, Any]]:
    """`n` swap processes at once on `clip`; their --stats-json figures."""
    procs = []
    for i in range(n):
        stats = work / f"s{n}-{i}-{'triton' if url else 'local'}.json"
        cmd = [sys.executable, "-m", "stream.cli", "swap", "--source", str(photo), "--input", str(clip),
               "--output", str(work / f"out-{i}.mp4"), "--engine", "neural", "--models-dir", str(models),
               "--x264-preset", "ultrafast", "-q", "--stats-json", str(stats),
               "--set", f"runtime.intra_threads={threads}"]
        if url:
            cmd += ["--triton-url", url]
        procs.append((stats, subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                              text=True)))
    out = []
    for stats, proc in procs:
        _, err = proc.communicate()
        if proc.returncode:
            raise SystemExit(f"a stream failed: {err.strip()}")
        out.append(json.loads(stats.read_text()))
    return out


def summarise(mode: str, n: int, runs: list[dict[str, Any]], batches: dict[str, dict[str, int]] | None) -> dict:
    fps = [r["fps"] for r in runs]
    row: dict[str, Any] = {
        "mode": mode, "streams": n, "fps_per_stream": round(float(np.mean(fps)), 2),
        "fps_total": round(float(np.sum(fps)), 2),
        "swap_p95_ms": round(max(r["stages"]["swap"]["p95_ms"] for r in runs), 1),
        "analyse_p95_ms": round(max(r["stages"]["analyse"]["p95_ms"] for r in runs), 1),
        "latency_p95_ms": round(max(r["latency"]["p95_ms"] for r in runs), 1),
        "faces_per_frame": round(sum(r["faces_swapped"] for r in runs) / max(sum(r["frames"] for r in runs), 1), 1),
    }
    if batches is not None:
        row["batches"] = {m: {"requests_per_execution": round(b["requests"] / b["executions"], 2),
                              "items_per_execution": round(b["items"] / b["executions"], 2), **b}
                          for m, b in batches.items() if b["executions"]}
    return row


def _delta(after: dict[str, dict[str, int]], before: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {m: {k: v - before.get(m, {}).get(k, 0) for k, v in vals.items()} for m, vals in after.items()}


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"{'mode':8} {'streams':>7} {'faces':>5} {'fps/stream':>10} {'fps all':>8} {'swap p95':>9} "
          f"{'analyse p95':>11} {'latency p95':>11}  inswapper req/exec (items/exec)  scrfd req/exec")
    for r in rows:
        b = r.get("batches", {})
        swap = b.get("inswapper_128")
        det = b.get("scrfd_10g")
        swap_txt = f"{swap['requests_per_execution']:.2f} ({swap['items_per_execution']:.2f})" if swap else "-"
        det_txt = f"{det['requests_per_execution']:.2f}" if det else "-"
        print(f"{r['mode']:8} {r['streams']:>7} {r['faces_per_frame']:>5.1f} {r['fps_per_stream']:>10.1f} "
              f"{r['fps_total']:>8.1f} {r['swap_p95_ms']:>7.1f}ms {r['analyse_p95_ms']:>9.1f}ms "
              f"{r['latency_p95_ms']:>9.0f}ms  "
              f"{swap_txt:>31}  {det_txt:>14}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--streams", type=int, nargs="+", default=[1, 2, 4], help="stream counts (default 1 2 4)")
    ap.add_argument("--frames", type=int, default=150, help="frames per stream's clip (default 150)")
    ap.add_argument("--faces", type=int, default=2, choices=range(1, len(CROPS) + 1),
                    help="face crops pasted in the clip (default 2; the stand-in detector finds more: "
                         "the table gives the faces swapped per frame)")
    ap.add_argument("--threads", type=int, default=1, help="ONNX Runtime threads per model in a stream (default 1)")
    ap.add_argument("--max-batch", type=int, default=16, help="the server's max_batch_size (default 16)")
    ap.add_argument("--serve", nargs="+", choices=list(MODELS), default=list(MODELS), metavar="MODEL",
                    help="the models the server serves (default all four); a stream runs the others on its "
                         "local ONNX Runtime, e.g. --serve inswapper_128")
    ap.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-triton-") as tmp:
        work = Path(tmp)
        models = work / "models"
        models.mkdir()
        files = make_models(models)
        clip = make_bench_clip(work / "clip.mp4", args.frames, args.faces)
        photo = work / "source.png"
        cv2.imwrite(str(photo), astronaut())
        served = {name: path for name, path in files.items() if name in args.serve}
        write_repository(work / "repo", served, backend="python", max_batch=args.max_batch, kind="cpu")
        rows = []
        server = Server(work / "repo", work / "server.log")
        try:  # local and Triton side by side for each count: the machine's other load varies
            for n in args.streams:
                rows.append(summarise("local", n, run_streams(n, clip, photo, models, work, args.threads, None),
                                      None))
                before = server.stats()
                runs = run_streams(n, clip, photo, models, work, args.threads, server.url)
                rows.append(summarise("triton", n, runs, _delta(server.stats(), before)))
        finally:
            server.stop()
    print(f"{args.frames} frames per stream, 480x360; {os.cpu_count()} CPU cores; "
          f"server: bundled tritonserver, Python backend (ONNX Runtime on the CPU), max batch {args.max_batch}, "
          f"serving {', '.join(args.serve)}")
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
