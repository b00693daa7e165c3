"""Runs a source, a chain of workers and a sink over rings: staged (a thread per stage)
or serial (one thread doing every stage in turn, for comparison).

Ring 0 holds the frames themselves; the records in later rings point at their frame
(`Slot.frame`), so a picture is decoded into one slot and never copied between stages.
The sink releases the frame slot once the frame is written; a record dropped by a
`drop_oldest` ring releases its frame too.

Worker loop contract: `EndOfStream` on the input is the normal end (the output ring is
closed so the end propagates); `PipelineAborted` is a quiet stop because another stage
failed or the user interrupted; any other exception is the run's error: it is kept,
logged with its traceback at debug level, and every ring is aborted so all stages stop
at once. The main thread always closes the source, the workers and the sink (the sink's
close finalises its file, so what was written plays).
"""
from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from stream.errors import EndOfStream, PipelineAborted, StopRequested
from stream.runtime.metrics import Metrics
from stream.runtime.protocols import Sink, Source, Worker
from stream.runtime.ring import Ring
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

JOIN_GRACE_S = 2.0

# While stages run as threads, CPython hands the GIL from a thread running Python to one that
# waits for it only every switch interval (5 ms by default). A stage coming back from C code
# (x264, cv2, the predictor's numpy, BLAS) needs the GIL for a few microseconds to hand its
# frame on, and waited up to that long behind another stage's Python, its core idle. Staged
# runs use a shorter interval while any of them runs (the process's own setting comes back
# after the last). `speed_ab.py --base HEAD`, 3 rounds, 2026-12-05: `fast` six faces 1.08x,
# one face 0.98x and 1.01x; the default preset's six faces 1.09x.
STAGED_SWITCH_S = 0.0005


class _StagedSwitchInterval:
    """`with` block of a staged run: the GIL's switch interval at most STAGED_SWITCH_S while
    one or more staged runs are in theirs (serve runs sessions side by side)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0
        self._saved = 0.0

    def __enter__(self) -> None:
        with self._lock:
            if self._active == 0:
                self._saved = sys.getswitchinterval()
                if self._saved > STAGED_SWITCH_S:
                    sys.setswitchinterval(STAGED_SWITCH_S)
            self._active += 1

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._active -= 1
            if self._active == 0:
                sys.setswitchinterval(self._saved)


staged_switch_interval = _StagedSwitchInterval()


class Runner:
    """One run of source -> workers -> sink. `rings[0]` is the frame ring; `rings[i+1]`
    is worker i's output. Call `run()` once."""

    def __init__(
        self,
        source: Source,
        workers: Sequence[Worker],
        sink: Sink,
        rings: Sequence[Ring],
        metrics: Metrics | None = None,
        on_frame: Callable[[Slot], None] | None = None,
    ) -> None:
        if len(rings) != len(workers) + 1:
            raise ValueError(f"need {len(workers) + 1} rings for {len(workers)} workers, got {len(rings)}")
        self.source = source
        self.workers = list(workers)
        self.sink = sink
        self.rings = list(rings)
        self.frames = self.rings[0]
        for ring in self.rings[1:]:
            ring.on_drop = self._drop_record
        self.metrics = metrics or Metrics()
        self.on_frame = on_frame
        self.error: BaseException | None = None
        self.stopped: str | None = None
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._ended = threading.Condition()
        self._running = 0  # stage bodies started and not yet returned
        self._scratch: Slot | None = None
        self._decode_t = self.metrics.stage("decode")
        self._worker_t = [self.metrics.stage(w.name) for w in self.workers]
        self._encode_t = self.metrics.stage("encode")

    # -- one step of each kind ---------------------------------------------------------

    def _drop_record(self, record: Slot) -> None:
        if record.frame is not None:
            self.frames.release(record.frame)

    def _scratch_slot(self) -> Slot:
        if self._scratch is None:  # allocated once, on the first frame dropped this way
            first = self.frames.slots[0].buffers
            self._scratch = Slot(-1, {k: np.empty_like(v) for k, v in first.items()})
        return self._scratch

    def _step_source(self) -> bool:
        slot = self.frames.acquire()
        if slot is None:  # drop_oldest with every frame held downstream: read it, drop it
            if self.source.read_into(self._scratch_slot()):
                self.metrics.frames_in += 1  # counted as a drop by ring A
                return True
            self.frames.close()
            return False
        t0 = time.perf_counter()
        ok = self.source.read_into(slot)
        if not ok:
            self.frames.release(slot)
            self.frames.close()
            return False
        # A live source waits for its next frame (a camera's pace, a peer's network): that
        # wait is not decoding time (the source's `wait_s`).
        self._decode_t.add(time.perf_counter() - t0 - self.source.wait_s)
        self.metrics.frames_in += 1
        self.frames.publish(slot)
        return True

    def _step_worker(self, i: int) -> None:
        rin, rout = self.rings[i], self.rings[i + 1]
        item = rin.take()
        out = rout.acquire()
        if out is None:  # drop_oldest with nothing to reclaim: this frame is dropped
            if i:
                self._drop_record(item)
                rin.release(item)
            else:
                self.frames.release(item)
            return
        out.stamp_from(item)
        t0 = time.perf_counter()
        self.workers[i].process(item, out)
        self._worker_t[i].add(time.perf_counter() - t0)
        if i:  # records of later rings are done with; the frame itself travels on
            rin.release(item)
        rout.publish(out)

    def _step_sink(self) -> None:
        last = self.rings[-1]
        item = last.take()
        t0 = time.perf_counter()
        self.sink.write(item)
        now = time.perf_counter()
        self._encode_t.add(now - t0)
        self.metrics.latency.add(time.monotonic() - item.capture_time)
        self.metrics.frames_out += 1
        if self.on_frame is not None:
            self.on_frame(item)
        frame = item.frame if item.frame is not None else item
        if last is not self.frames:
            last.release(item)
        self.frames.release(frame)

    # -- loops -------------------------------------------------------------------------

    def _guard(self, name: str, body: Callable[[], None]) -> None:
        try:
            body()
        except (EndOfStream, PipelineAborted):
            pass
        except StopRequested as exc:
            self.stop(str(exc))
        except BaseException as exc:  # the run's error: keep it, stop every stage
            self._fail(name, exc)
        finally:
            with self._ended:
                self._running -= 1
                self._ended.notify_all()

    def _wait_stages(self, timeout: float | None) -> bool:
        """Wait until every stage body has returned (True) or `timeout` passes (False).

        The main thread waits on this condition rather than on `Thread.join`: on Python
        3.11 a Ctrl-C landing inside `join` can mark a still-running thread as finished
        (the interrupted join releases the thread's own state lock), so the run would
        close the sink and let the interpreter exit under a stage that is still inside
        OpenCV or dlib, and the process aborts ("terminate called without an active
        exception") instead of exiting 130.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._ended:
            while self._running > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._ended.wait(0.1 if left is None else min(left, 0.1))
        return True

    def stop(self, why: str = "stop requested") -> None:
        """End the run now, from any thread: every stage stops, nothing is an error."""
        self.stopped = why
        stop = StopRequested(why)
        for ring in self.rings:
            ring.abort(stop)

    def _fail(self, name: str, exc: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = exc
                log.debug("stage %s failed", name, exc_info=exc)
        for ring in self.rings:
            ring.abort(exc)

    def _loop_source(self) -> None:
        while self._step_source():
            pass

    def _loop_worker(self, i: int) -> None:
        try:
            while True:
                self._step_worker(i)
        except EndOfStream:
            self.rings[i + 1].close()

    def _loop_sink(self) -> None:
        while True:
            self._step_sink()

    def _loop_serial(self) -> None:
        while self._step_source():
            for i in range(len(self.workers)):
                self._step_worker(i)
            self._step_sink()

    # -- the run -----------------------------------------------------------------------

    def run(self, staged: bool = True) -> Metrics:
        """Process the whole stream; raises the first stage error (or KeyboardInterrupt)
        after every stage has stopped and the sink has been closed."""
        bodies: list[tuple[str, Callable[[], None]]]
        if staged:
            bodies = [("decode", self._loop_source)]
            bodies += [(w.name, lambda i=i: self._loop_worker(i)) for i, w in enumerate(self.workers)]
            bodies += [("encode", self._loop_sink)]
        else:
            bodies = [("serial", self._loop_serial)]
        self._threads = [
            threading.Thread(target=self._guard, args=(name, body), name=f"fs-{name}", daemon=True)
            for name, body in bodies
        ]
        with staged_switch_interval if staged else contextlib.nullcontext():
            interrupted: BaseException | None = None
            try:
                for t in self._threads:
                    with self._ended:
                        self._running += 1
                    t.start()
                self._wait_stages(None)
            except KeyboardInterrupt as exc:
                interrupted = exc
                self._fail("interrupt", exc)
            finally:
                if self._wait_stages(JOIN_GRACE_S):
                    for t in self._threads:  # each has left its body: only the thread's exit is left
                        t.join(JOIN_GRACE_S)
                else:
                    stuck = [t.name for t in self._threads if t.is_alive()]
                    log.warning("stages still running after stop: %s", ", ".join(stuck))
                self.metrics.finish()
                self._close_all()
            if interrupted is not None:
                raise interrupted
            if self.error is not None:
                raise self.error
            return self.metrics

    def _close_all(self) -> None:
        parts: list[Any] = [self.source, *self.workers, self.sink]
        for part in parts:
            try:
                part.close()
            except Exception as exc:
                log.debug("closing %r failed", part, exc_info=exc)
                if self.error is None:
                    self.error = exc
