"""dlib's 68-point predictor in child processes, for the staged pipeline.

dlib's Python binding holds the GIL for the whole of each prediction (about 2-3 ms a
face here), so in one process six faces a frame serialise every other stage's Python
behind it. In child processes the predictor runs beside the parent's stages; the
parent's analyse thread waits on pipes (GIL released) while decode, swap, composite and
encode go on. With several children the faces of a frame are split between them, which
shortens the analyse stage, the pipeline's critical path.

The grey frame and the results travel through shared memory allocated once in `open()`;
only a few bytes (shape, face count) cross the pipes per frame. The children are plain
interpreters (`python -m engines.landmark_process`), not multiprocessing's spawn, which
would re-import the caller's __main__ and break scripts without an `if __name__` guard.
"""
from __future__ import annotations

import logging
import os
import subprocess
import sys
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

import numpy as np

from engines.errors import EngineError
from engines.face import Box, Landmarks68
from engines.protocols import GrayImage

log = logging.getLogger(__name__)

START_TIMEOUT_S = 60.0


def _io_views(buf: memoryview, max_faces: int) -> tuple[np.ndarray, np.ndarray]:
    boxes = np.ndarray((max_faces, 4), np.float64, buf, 0)
    out = np.ndarray((max_faces, 68, 2), np.float32, buf, boxes.nbytes)
    return boxes, out


def _io_size(max_faces: int) -> int:
    return max_faces * 4 * 8 + max_faces * 68 * 2 * 4


class _Child:
    """One child process, its two pipe ends and its own box/result block."""

    def __init__(self, frame_name: str, max_faces: int) -> None:
        self.max_faces = max_faces
        self.io = SharedMemory(create=True, size=_io_size(max_faces))
        self.boxes, self.out = _io_views(self.io.buf, max_faces)
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "engines.landmark_process", str(down_r), str(up_w),
                 frame_name, self.io.name, str(max_faces)],
                pass_fds=(down_r, up_w), env=env, stdin=subprocess.DEVNULL)
        except OSError:
            os.close(down_w)
            os.close(up_r)
            self.io.close()
            self.io.unlink()
            raise
        finally:
            os.close(down_r)
            os.close(up_w)
        self.send = Connection(down_w, readable=False)
        self.recv = Connection(up_r, writable=False)

    def expect(self, kind: str, timeout: float | None = None) -> tuple:
        try:
            if timeout is not None and not self.recv.poll(timeout):
                raise EngineError(f"the landmark process did not start within {timeout:.0f} s")
            msg = self.recv.recv()
        except (EOFError, OSError) as exc:
            raise EngineError("the landmark process died") from exc
        if msg[0] == "error":
            raise EngineError(f"the landmark process failed: {msg[1]}")
        if msg[0] != kind:
            raise EngineError(f"the landmark process answered {msg[0]!r}, expected {kind!r}")
        return msg

    def close(self) -> None:
        try:
            self.send.send(("stop",))
        except OSError:
            pass
        self.send.close()
        try:
            self.proc.wait(2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(1.0)
        self.recv.close()
        del self.boxes, self.out  # views first: the segment cannot close while exported
        self.io.close()
        self.io.unlink()


class DlibLandmarkerProcess:
    """Same contract as `DlibLandmarker`, computed in `workers` child processes."""

    name = "dlib-68-process"

    def __init__(self, max_shape: tuple[int, int], max_faces: int = 16, workers: int = 2) -> None:
        self.max_pixels = int(max_shape[0] * max_shape[1])
        self.max_faces = max_faces
        self.workers = max(1, workers)
        self.calls = 0
        self._frame: SharedMemory | None = None
        self._children: list[_Child] = []

    def open(self) -> None:
        if self._frame is not None:
            return
        self._frame = SharedMemory(create=True, size=max(1, self.max_pixels))
        try:
            for _ in range(self.workers):
                self._children.append(_Child(self._frame.name, self.max_faces))
            for child in self._children:
                child.expect("ready", START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    def forward_many(self, gray: GrayImage, boxes: list[Box]) -> list[Landmarks68]:
        if self._frame is None:
            self.open()
        assert self._frame is not None
        h, w = gray.shape[:2]
        if h * w > self.max_pixels:
            raise EngineError(f"frame {w}x{h} is larger than the landmark process was opened for")
        np.copyto(np.ndarray((h, w), np.uint8, self._frame.buf), gray)
        out: list[Landmarks68] = []
        per_round = self.max_faces * len(self._children)
        for start in range(0, len(boxes), per_round):
            group = boxes[start:start + per_round]
            # Contiguous, near-equal shares, so results come back in the boxes' order.
            share = -(-len(group) // len(self._children))
            busy = []
            for k, child in enumerate(self._children):
                part = group[k * share:(k + 1) * share]
                if part:
                    child.boxes[:len(part)] = part
                    try:
                        child.send.send(("run", h, w, len(part)))
                    except OSError as exc:
                        raise EngineError("the landmark process died") from exc
                    busy.append((child, len(part)))
            for child, n in busy:
                child.expect("ok")
                out.extend(child.out[i].copy() for i in range(n))
        self.calls += len(boxes)
        return out

    def forward(self, gray: GrayImage, box: Box) -> Landmarks68:
        return self.forward_many(gray, [box])[0]

    def close(self) -> None:
        for child in self._children:
            child.close()
        self._children.clear()
        if self._frame is not None:
            self._frame.close()
            self._frame.unlink()
            self._frame = None


# -- the child's side ---------------------------------------------------------------------

def _attach(name: str) -> SharedMemory:
    shm = SharedMemory(name)
    # The parent owns (and unlinks) the segment; without this the child's resource
    # tracker would unlink it too when the child exits, and warn about a "leak".
    resource_tracker.unregister(shm._name, "shared_memory")  # type: ignore[attr-defined]
    return shm


def serve(recv: Connection, send: Connection, frame_name: str, io_name: str, max_faces: int) -> None:
    """The child's loop: ("run", h, w, n) -> landmarks of the first n boxes, in place."""
    from engines.dlib_landmarker import DlibLandmarker

    frame_shm = _attach(frame_name)
    io_shm = _attach(io_name)
    try:
        landmarker = DlibLandmarker()
        landmarker.open()
        boxes, out = _io_views(io_shm.buf, max_faces)
        send.send(("ready",))
        while True:
            msg = recv.recv()
            if msg[0] == "stop":
                break
            _, h, w, n = msg
            gray = np.ndarray((h, w), np.uint8, frame_shm.buf)
            for i in range(n):
                out[i] = landmarker.forward(gray, tuple(boxes[i]))
            del gray
            send.send(("ok", n))
        del boxes, out
    except (EOFError, KeyboardInterrupt):
        pass  # the parent went away or is being interrupted: just stop
    except Exception as exc:  # reported to the parent as one line
        try:
            send.send(("error", f"{type(exc).__name__}: {exc}"))
        except OSError:
            pass
    finally:
        recv.close()
        send.close()


if __name__ == "__main__":
    down_fd, up_fd, frame, io, faces = sys.argv[1:]
    serve(Connection(int(down_fd), writable=False), Connection(int(up_fd), readable=False),
          frame, io, int(faces))
