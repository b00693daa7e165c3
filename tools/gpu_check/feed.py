"""Section b: one of our rings (stream.runtime.ring) of pinned slots feeding the device,
serially against overlapped.

A producer thread publishes frames into a `Ring` whose slot buffers come from the pinned
allocator; the consumer sends each frame up, runs a kernel on it and brings the result
back into a pinned buffer.
- serial: copy up, work, copy back, wait, next frame (one stream);
- overlapped: three streams (up, work, down) and two device buffers, ordered by events:
  frame N+1's upload runs while frame N's kernel runs and frame N-1's result comes back;
  a slot returns to the ring once its upload has finished (not when its frame is done).

The kernel's length is calibrated to the upload's, so the best the overlap can do is
(up + work + down) / max(up, work, down). For the timed runs the producer only publishes
slots rendered once (a frame-sized memcpy per frame would bound both modes by the CPU);
a separate checked run has the producer write every frame into its slot and compares
every result with the kernel's output computed alone, frame by frame, which shows that
no slot was handed back or overwritten before its copy had read it.
"""
from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np

from stream.errors import EndOfStream
from stream.runtime.ring import Policy, Ring
from stream.runtime.slot import Slot
from tools.gpu_check.copies import median_s
from tools.gpu_check.device import Backend, work_reference

Shape = tuple[int, int, int]


def picture(i: int, shape: Shape) -> np.ndarray:
    """A distinct frame per `i` (gradients shifted by i, a band of noise)."""
    h, w, c = shape
    base = ((np.arange(w) * 7)[None, :] + (np.arange(h) * 3)[:, None] + 41 * i) % 256
    frame = np.empty(shape, np.uint8)
    frame[...] = base[:, :, None]
    rng = np.random.default_rng(i)
    frame[: max(1, h // 8)] = rng.integers(0, 256, size=frame[: max(1, h // 8)].shape, dtype=np.uint8)
    return frame


class _Feeder:
    """The device side of one run: buffers, streams, and a consumer loop per mode."""

    def __init__(self, backend: Backend, shape: Shape, rounds: int) -> None:
        self.backend = backend
        self.rounds = rounds
        pinned = backend.pinned_allocator()
        self.dev_in = [backend.empty(shape, np.uint8) for _ in range(2)]
        self.dev_out = [backend.empty(shape, np.uint8) for _ in range(2)]
        self.host_out = [pinned.empty(shape, np.uint8) for _ in range(2)]
        self.s_up, self.s_work, self.s_down = backend.stream(), backend.stream(), backend.stream()
        self.work_done = [backend.event() for _ in range(2)]
        self.down_done = [backend.event() for _ in range(2)]
        self.expected: list[np.ndarray] | None = None  # per picture: checked runs compare with these
        self.checked = 0
        self.mismatched = 0

    def _check(self, out: np.ndarray, which: int) -> None:
        if self.expected is None:
            return
        self.checked += 1
        if not np.array_equal(out, self.expected[which]):
            self.mismatched += 1

    def serial(self, ring: Ring) -> int:
        b, s = self.backend, self.s_up
        frames = 0
        while True:
            try:
                slot = ring.take()
            except EndOfStream:
                return frames
            b.upload(self.dev_in[0], slot.buffers["image"], s)
            b.work(self.dev_in[0], self.dev_out[0], self.rounds, s)
            b.download(self.host_out[0], self.dev_out[0], s)
            s.synchronize()
            self._check(self.host_out[0], slot.payload)
            ring.release(slot)
            frames += 1

    def overlapped(self, ring: Ring) -> int:
        b = self.backend
        uploading: deque[tuple[Any, Slot]] = deque()  # slots whose upload may still be reading them
        in_flight: list[int | None] = [None, None]  # the picture each result buffer is receiving
        frames = 0
        while True:
            # Hand back every slot whose upload is over; never hold more than two.
            while uploading and (len(uploading) >= 2 or uploading[0][0].done):
                event, done_slot = uploading.popleft()
                event.synchronize()
                ring.release(done_slot)
            try:
                slot = ring.take()
            except EndOfStream:
                break
            k = frames % 2
            if frames >= 2:
                self.s_up.wait_event(self.work_done[k])  # dev_in[k] was read by the kernel two frames ago
            b.upload(self.dev_in[k], slot.buffers["image"], self.s_up)
            uploaded = b.event()
            uploaded.record(self.s_up)
            uploading.append((uploaded, slot))
            self.s_work.wait_event(uploaded)
            if frames >= 2:
                self.s_work.wait_event(self.down_done[k])  # dev_out[k] was copied out two frames ago
            b.work(self.dev_in[k], self.dev_out[k], self.rounds, self.s_work)
            self.work_done[k].record(self.s_work)
            previous = in_flight[k]
            if previous is not None:  # host_out[k] is reused: its last result must be in
                self.down_done[k].synchronize()
                self._check(self.host_out[k], previous)
            self.s_down.wait_event(self.work_done[k])
            b.download(self.host_out[k], self.dev_out[k], self.s_down)
            self.down_done[k].record(self.s_down)
            in_flight[k] = slot.payload
            frames += 1
        for event, done_slot in uploading:
            event.synchronize()
            ring.release(done_slot)
        for k, previous in enumerate(in_flight):
            if previous is not None:
                self.down_done[k].synchronize()
                self._check(self.host_out[k], previous)
        return frames


def _run(feeder: _Feeder, mode: str, pictures: list[np.ndarray], frames: int, slots: int,
         write: bool) -> float:
    """Frames per second of one run of `frames` through a fresh ring of pinned slots."""
    shape = pictures[0].shape
    ring = Ring("feed", slots, {"image": (shape, np.uint8)}, policy=Policy.BLOCK,
                allocator=feeder.backend.pinned_allocator())
    for slot in ring.slots:  # rendered once: the timed runs' producer only publishes
        np.copyto(slot.buffers["image"], pictures[slot.index % len(pictures)])
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            for seq in range(frames):
                slot = ring.acquire()
                assert slot is not None  # a blocking ring always gives a slot
                which = seq % len(pictures) if write else slot.index % len(pictures)
                if write:
                    np.copyto(slot.buffers["image"], pictures[which])
                slot.seq, slot.payload = seq, which
                ring.publish(slot)
        except BaseException as exc:  # noqa: BLE001  (reported by the consumer's side)
            failure.append(exc)
        finally:
            ring.close()

    producer = threading.Thread(target=produce, name="gpu-check-producer", daemon=True)
    t0 = time.perf_counter()
    producer.start()
    try:
        done = feeder.serial(ring) if mode == "serial" else feeder.overlapped(ring)
    except BaseException:
        ring.abort()
        raise
    finally:
        producer.join(timeout=30)
    elapsed = time.perf_counter() - t0
    if failure:
        raise RuntimeError(f"the ring's producer failed: {failure[0]!r}") from failure[0]
    if done != frames:
        raise RuntimeError(f"{mode} run: {done} frames came through of {frames}")
    return frames / elapsed


def measure_feed(backend: Backend, shape: Shape, frames: int, slots: int = 4,
                 probe_rounds: int = 64) -> dict[str, Any]:
    """fps of the serial and the overlapped feed, their ratio, and the checked run's result."""
    pictures = [picture(i, shape) for i in range(slots)]
    feeder = _Feeder(backend, shape, probe_rounds)
    stream = feeder.s_up
    host = backend.pinned_allocator().empty(shape, np.uint8)
    np.copyto(host, pictures[0])

    def up() -> None:
        backend.upload(feeder.dev_in[0], host, stream)
        stream.synchronize()

    def down() -> None:
        backend.download(feeder.host_out[0], feeder.dev_out[0], stream)
        stream.synchronize()

    def work(rounds: int) -> Any:
        def step() -> None:
            backend.work(feeder.dev_in[0], feeder.dev_out[0], rounds, stream)
            stream.synchronize()
        return step

    up_s, down_s = median_s(up, 5), median_s(down, 5)
    probe_s = median_s(work(probe_rounds), 5)
    rounds = int(min(8192, max(1, round(probe_rounds * up_s / probe_s)))) if probe_s > 0 else probe_rounds
    feeder.rounds = rounds
    work_s = median_s(work(rounds), 5)

    warm = min(frames, 2 * slots)
    _run(feeder, "serial", pictures, warm, slots, write=False)
    _run(feeder, "overlapped", pictures, warm, slots, write=False)
    serial_fps = _run(feeder, "serial", pictures, frames, slots, write=False)
    overlapped_fps = _run(feeder, "overlapped", pictures, frames, slots, write=False)

    # The checked run: every frame written into its slot by the producer, every result compared.
    expected = []
    for pic in pictures:
        backend.upload(feeder.dev_in[0], pic, stream)
        backend.work(feeder.dev_in[0], feeder.dev_out[0], rounds, stream)
        out = np.empty(shape, np.uint8)
        backend.download(out, feeder.dev_out[0], stream)
        stream.synchronize()
        expected.append(out)
    strip = slice(0, max(1, min(16, shape[0] // 16)))  # the kernel itself against numpy, on a strip
    kernel_diff = int(np.abs(expected[0][strip].astype(np.int16)
                             - work_reference(pictures[0][strip], rounds).astype(np.int16)).max())
    feeder.expected = expected
    checked_frames = min(frames, 6 * slots)
    for mode in ("serial", "overlapped"):
        _run(feeder, mode, pictures, checked_frames, slots, write=True)

    ideal = (up_s + work_s + down_s) / max(up_s, work_s, down_s)
    return {
        "frame_shape": list(shape), "frame_mib": round(int(np.prod(shape)) / 2**20, 2),
        "slots": slots, "frames": frames, "allocator": backend.pinned_allocator().name,
        "upload_ms": round(up_s * 1e3, 3), "work_ms": round(work_s * 1e3, 3), "download_ms": round(down_s * 1e3, 3),
        "work_rounds": rounds,
        "serial_fps": round(serial_fps, 1), "overlapped_fps": round(overlapped_fps, 1),
        "ratio": round(overlapped_fps / serial_fps, 2), "ideal_ratio": round(ideal, 2),
        "checked_frames": feeder.checked, "mismatched_frames": feeder.mismatched,
        "kernel_vs_numpy_max_diff": kernel_diff,
    }
