"""Rings: both policies, ordering, drops, close/drain, abort of blocked threads."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from stream.errors import EndOfStream, PipelineAborted
from stream.runtime.ring import Policy, Ring


def _fill(ring: Ring, seq: int) -> None:
    slot = ring.acquire()
    assert slot is not None
    slot.seq = seq
    slot.buffers["x"][:] = seq
    ring.publish(slot)


def test_slots_are_preallocated_and_reused() -> None:
    ring = Ring("r", 3, {"x": ((4, 4), np.int32)})
    pointers = {s.buffers["x"].ctypes.data for s in ring.slots}
    seen = set()
    for i in range(50):
        _fill(ring, i)
        slot = ring.take()
        assert slot.seq == i and int(slot.buffers["x"][0, 0]) == i
        seen.add(slot.buffers["x"].ctypes.data)
        ring.release(slot)
    assert seen <= pointers


@pytest.mark.parametrize("capacity", [1, 2, 5])
def test_block_policy_keeps_every_item_in_order(capacity: int) -> None:
    ring = Ring("r", capacity, {"x": ((1,), np.int64)})
    n = 500
    got: list[int] = []

    def consume() -> None:
        while True:
            try:
                slot = ring.take()
            except EndOfStream:
                return
            got.append(int(slot.buffers["x"][0]))
            ring.release(slot)

    t = threading.Thread(target=consume)
    t.start()
    for i in range(n):
        _fill(ring, i)
    ring.close()
    t.join(5)
    assert not t.is_alive()
    assert got == list(range(n))
    assert ring.drops == 0
    assert ring.occupancy_max <= capacity


def test_block_policy_producer_waits_when_full() -> None:
    ring = Ring("r", 2, {"x": ((1,), np.int64)})
    _fill(ring, 0)
    _fill(ring, 1)
    acquired = threading.Event()

    def produce() -> None:
        ring.acquire()
        acquired.set()

    t = threading.Thread(target=produce)
    t.start()
    assert not acquired.wait(0.2)  # full: the producer is waiting
    ring.release(ring.take())
    assert acquired.wait(2)
    t.join(2)


def test_drop_oldest_never_waits_and_keeps_the_newest() -> None:
    dropped: list[int] = []
    ring = Ring("r", 3, {"x": ((1,), np.int64)}, policy=Policy.DROP_OLDEST,
                on_drop=lambda s: dropped.append(s.seq))
    for i in range(10):  # nobody reads: the producer must not wait
        _fill(ring, i)
    assert ring.drops == 7
    assert dropped == list(range(7))
    assert [ring.take().seq for _ in range(3)] == [7, 8, 9]


def test_drop_oldest_with_every_slot_held_returns_none() -> None:
    ring = Ring("r", 2, policy=Policy.DROP_OLDEST)
    _fill_empty = [ring.acquire(), ring.acquire()]
    assert all(s is not None for s in _fill_empty)
    assert ring.acquire() is None  # both slots held by the producer/consumer: drop the new frame
    assert ring.drops == 1


def test_close_drains_then_ends() -> None:
    ring = Ring("r", 4, {"x": ((1,), np.int64)})
    for i in range(3):
        _fill(ring, i)
    ring.close()
    assert [ring.take().seq for _ in range(3)] == [0, 1, 2]
    with pytest.raises(EndOfStream):
        ring.take()


@pytest.mark.parametrize("side", ["producer", "consumer"])
def test_abort_wakes_a_blocked_thread(side: str) -> None:
    ring = Ring("r", 1, {"x": ((1,), np.int64)})
    if side == "producer":
        _fill(ring, 0)  # full: the next acquire blocks
    errors: list[BaseException] = []

    def blocked() -> None:
        try:
            ring.acquire() if side == "producer" else ring.take()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=blocked)
    t.start()
    t.join(0.2)
    assert t.is_alive()
    ring.abort(RuntimeError("stage failed"))
    t.join(2)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], PipelineAborted)


def test_take_timeout() -> None:
    ring = Ring("r", 1)
    with pytest.raises(TimeoutError):
        ring.take(timeout=0.05)


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        Ring("r", 0)


def test_max_ready_keeps_only_the_newest_unread_and_frees_the_rest() -> None:
    dropped: list[int] = []
    ring = Ring("entry", 4, policy=Policy.DROP_OLDEST, max_ready=1, on_drop=lambda s: dropped.append(s.seq))
    for seq in range(3):
        slot = ring.acquire()
        assert slot is not None  # slots come back to the free list: never a reclaim here
        slot.seq = seq
        ring.publish(slot)
    assert ring.drops == 2 and dropped == [0, 1]
    assert ring.take().seq == 2
    assert ring.occupancy_max == 1


def test_max_ready_needs_drop_oldest() -> None:
    with pytest.raises(ValueError, match="max_ready"):
        Ring("x", 2, policy=Policy.BLOCK, max_ready=1)
