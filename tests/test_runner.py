"""The staged runner: order, end of stream, errors stopping every stage, serial parity."""
from __future__ import annotations

import signal
import sys
import threading
import time

import numpy as np
import pytest

from stream.runtime.metrics import Metrics
from stream.runtime.ring import Policy, Ring
from stream.runtime.runner import STAGED_SWITCH_S, Runner
from stream.runtime.slot import Slot

H, W = 8, 8


class CountingSource:
    wait_s = 0.0

    def __init__(self, n: int, fail_at: int = -1) -> None:
        self.n, self.i, self.fail_at = n, 0, fail_at
        self.closed = False

    def read_into(self, slot: Slot) -> bool:
        if self.i == self.fail_at:
            raise OSError("decoder broke")
        if self.i >= self.n:
            return False
        slot.buffers["image"][:] = self.i % 256
        slot.seq, slot.pts, slot.capture_time = self.i, self.i, time.monotonic()
        self.i += 1
        return True

    def close(self) -> None:
        self.closed = True


class AddWorker:
    def __init__(self, name: str, delta: int, fail_at: int = -1, delay: float = 0.0) -> None:
        self.name, self.delta, self.fail_at, self.delay = name, delta, fail_at, delay
        self.closed = False

    def process(self, item: Slot, out: Slot) -> None:
        if item.seq == self.fail_at:
            raise ValueError(f"{self.name} failed on frame {item.seq}")
        if self.delay:
            time.sleep(self.delay)
        img = item.image
        img += self.delta  # in place on the shared frame
        out.payload = (item.payload or 0) + 1

    def close(self) -> None:
        self.closed = True


class ListSink:
    def __init__(self, block_after: int = -1) -> None:
        self.frames: list[tuple[int, int, int]] = []
        self.closed = False
        self.block_after = block_after

    def write(self, slot: Slot) -> None:
        self.frames.append((slot.seq, int(slot.image[0, 0, 0]), slot.payload))

    def close(self) -> None:
        self.closed = True


def _runner(source, workers, sink, depth: int = 2, policy: Policy = Policy.BLOCK) -> Runner:
    frames = depth + len(workers) * depth + len(workers) + 1
    rings = [Ring("A", frames, {"image": ((H, W, 3), np.uint8)}, policy=policy)]
    rings += [Ring(f"R{i}", depth, policy=policy) for i in range(len(workers))]
    return Runner(source, workers, sink, rings, Metrics())


@pytest.mark.parametrize("staged", [True, False])
@pytest.mark.parametrize("depth", [1, 3])
def test_every_frame_in_order_through_all_stages(staged: bool, depth: int) -> None:
    sink = ListSink()
    workers = [AddWorker("a", 1), AddWorker("b", 2), AddWorker("c", 3)]
    runner = _runner(CountingSource(200), workers, sink, depth)
    metrics = runner.run(staged=staged)
    assert [f[0] for f in sink.frames] == list(range(200))
    assert all(v == (s + 6) % 256 for s, v, _ in sink.frames)
    assert all(p == 3 for _, _, p in sink.frames)
    assert metrics.frames_out == 200
    assert sink.closed and all(w.closed for w in workers)
    # every frame slot came back: nothing leaked
    assert len(runner.rings[0]._free) == runner.rings[0].capacity


@pytest.mark.parametrize("staged", [True, False])
@pytest.mark.parametrize("where", ["source", "worker"])
def test_a_failing_stage_stops_everything_and_closes_the_sink(staged: bool, where: str) -> None:
    sink = ListSink()
    source = CountingSource(10_000, fail_at=50 if where == "source" else -1)
    workers = [AddWorker("a", 1), AddWorker("b", 1, fail_at=60 if where == "worker" else -1),
               AddWorker("c", 1, delay=0.001)]
    runner = _runner(source, workers, sink)
    with pytest.raises((OSError, ValueError)):
        runner.run(staged=staged)
    assert sink.closed and source.closed
    assert not [t for t in threading.enumerate() if t.name.startswith("fs-") and t.is_alive()]
    assert 0 < len(sink.frames) <= 60
    assert [f[0] for f in sink.frames] == list(range(len(sink.frames)))


def test_consumer_death_unblocks_a_producer_waiting_on_a_full_ring() -> None:
    # The sink fails on its first frame while the source is blocked on full rings.
    class FailingSink(ListSink):
        def write(self, slot: Slot) -> None:
            raise RuntimeError("disk full")

    sink = FailingSink()
    runner = _runner(CountingSource(10_000), [AddWorker("a", 1, delay=0.002)], sink, depth=1)
    with pytest.raises(RuntimeError, match="disk full"):
        runner.run(staged=True)
    assert sink.closed
    assert not [t for t in threading.enumerate() if t.name.startswith("fs-") and t.is_alive()]


def test_drop_oldest_drops_under_load_and_releases_frames() -> None:
    sink = ListSink()
    runner = _runner(CountingSource(300), [AddWorker("slow", 1, delay=0.003)], sink, depth=1,
                     policy=Policy.DROP_OLDEST)
    runner.run(staged=True)
    seqs = [f[0] for f in sink.frames]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # order kept, no duplicates
    drops = sum(r.drops for r in runner.rings)
    assert drops > 0 and len(seqs) + drops == 300  # each drop is exactly one frame lost
    assert len(runner.rings[0]._free) == runner.rings[0].capacity


@pytest.mark.parametrize("frame_slots", [1, 2, 5])
def test_fewer_frame_slots_than_downstream_room_still_flows(frame_slots: int) -> None:
    # A frame ring smaller than the later rings (as for 4K frames) must not deadlock.
    sink = ListSink()
    workers = [AddWorker("a", 1), AddWorker("b", 1), AddWorker("c", 1)]
    rings = [Ring("A", frame_slots, {"image": ((H, W, 3), np.uint8)})]
    rings += [Ring(f"R{i}", 4) for i in range(3)]
    Runner(CountingSource(100), workers, sink, rings, Metrics()).run(staged=True)
    assert [f[0] for f in sink.frames] == list(range(100))


@pytest.mark.parametrize("staged", [True, False])
def test_ctrl_c_waits_for_a_stage_inside_a_long_call_before_closing(staged: bool) -> None:
    # A stage inside a long native call (OpenCV, dlib) when Ctrl-C comes: the run must
    # not close the sink, nor return, until that call is over. Serial mode has a single
    # thread, so the interrupt always lands while the main thread waits on it (the case
    # where Python 3.11's Thread.join marks a running thread as finished).
    inside = threading.Event()
    busy = [False]

    class SlowWorker(AddWorker):
        def process(self, item: Slot, out: Slot) -> None:
            busy[0] = True
            inside.set()
            time.sleep(0.6)  # stands for the native call (releases the GIL, ignores the abort)
            busy[0] = False
            super().process(item, out)

    class CheckingSink(ListSink):
        busy_at_close: bool | None = None

        def close(self) -> None:
            self.busy_at_close = busy[0]
            super().close()

    main = threading.get_ident()

    def interrupt() -> None:
        inside.wait(10)
        time.sleep(0.1)
        signal.pthread_kill(main, signal.SIGINT)

    sink = CheckingSink()
    runner = _runner(CountingSource(10_000), [SlowWorker("slow", 1)], sink)
    # Python installs its Ctrl-C handler only where SIGINT is not ignored at start-up (a
    # background job of a non-interactive shell starts with it ignored, and then this run
    # would go on through all 10,000 items): the test sets it for itself.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Thread(target=interrupt, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            runner.run(staged=staged)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert sink.closed and sink.busy_at_close is False
    assert not [t for t in threading.enumerate() if t.name.startswith("fs-") and t.is_alive()]


class IntervalWorker(AddWorker):
    """Notes the GIL's switch interval each frame sees."""

    def __init__(self, name: str, fail_at: int = -1) -> None:
        super().__init__(name, 1, fail_at)
        self.seen: set[float] = set()

    def process(self, item: Slot, out: Slot) -> None:
        self.seen.add(sys.getswitchinterval())
        super().process(item, out)


@pytest.mark.parametrize("fail", [False, True])
def test_a_staged_run_shortens_the_gil_switch_interval_and_gives_it_back(fail: bool) -> None:
    before = sys.getswitchinterval()
    worker = IntervalWorker("a", fail_at=20 if fail else -1)
    runner = _runner(CountingSource(50), [worker], ListSink())
    if fail:
        with pytest.raises(ValueError):
            runner.run(staged=True)
    else:
        runner.run(staged=True)
    assert worker.seen == {STAGED_SWITCH_S}
    assert sys.getswitchinterval() == before
    serial = IntervalWorker("b")
    _runner(CountingSource(10), [serial], ListSink()).run(staged=False)
    assert serial.seen == {before}


def test_side_by_side_staged_runs_keep_the_short_interval_until_the_last_ends() -> None:
    before = sys.getswitchinterval()
    gate, started = threading.Event(), threading.Event()

    class Waiting(IntervalWorker):
        def process(self, item: Slot, out: Slot) -> None:
            started.set()
            gate.wait(5.0)
            super().process(item, out)

    slow = Waiting("slow")
    first = threading.Thread(target=_runner(CountingSource(5), [slow], ListSink()).run)
    first.start()
    assert started.wait(5.0)
    quick = IntervalWorker("quick")
    _runner(CountingSource(5), [quick], ListSink()).run(staged=True)  # starts and ends inside the first
    after_quick = sys.getswitchinterval()
    gate.set()
    first.join(10.0)
    assert quick.seen == slow.seen == {STAGED_SWITCH_S}
    assert after_quick == STAGED_SWITCH_S  # the first run was still going
    assert sys.getswitchinterval() == before
