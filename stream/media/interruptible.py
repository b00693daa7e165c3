"""Waiting on a call that blocks in C (an FFmpeg connect, a DNS lookup) without being stuck
inside it: the call runs in a worker thread and the caller waits in short slices, so
Ctrl-C, a stop request from another thread and a deadline all take effect at once.

A call given up on is abandoned, not killed (C code cannot be): it runs on until its own
timeout ends it, and whatever it returns then is handed to `discard` (a container is
closed), so nothing it opened is left open."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")

POLL_S = 0.1  # how often the waiting thread looks at the stop request and the deadline


class Cancelled(Exception):
    """The wait ended because a stop was requested."""


class _Call(Generic[T]):
    def __init__(self, call: Callable[[], T], discard: Callable[[T], None] | None) -> None:
        self.call, self.discard = call, discard
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.abandoned = False
        self.result: T | None = None
        self.has_result = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            result = self.call()
        except BaseException as exc:  # handed to the waiting thread, which raises it
            self.error = exc
        else:
            with self.lock:
                late = self.abandoned
                if not late:
                    self.result, self.has_result = result, True
            if late and self.discard is not None:
                self.discard(result)
        finally:
            self.done.set()

    def abandon(self) -> None:
        with self.lock:
            self.abandoned = True
            result, had = self.result, self.has_result
            self.result, self.has_result = None, False
        if had and self.discard is not None:  # it finished just as the wait gave up
            self.discard(result)  # type: ignore[arg-type]


def wait_for_call(call: Callable[[], T], timeout: float, stop: threading.Event,
                  discard: Callable[[T], None] | None = None, name: str = "fs-connect") -> T:
    """`call()`'s result, or its exception; `TimeoutError` after `timeout` seconds,
    `Cancelled` as soon as `stop` is set, and KeyboardInterrupt at once in the main thread.
    In those three cases the call is abandoned and `discard` gets its late result."""
    pending = _Call(call, discard)
    thread = threading.Thread(target=pending.run, name=name, daemon=True)
    deadline = time.monotonic() + timeout
    thread.start()
    try:
        while not pending.done.wait(POLL_S):
            if stop.is_set():
                raise Cancelled()
            if time.monotonic() >= deadline:
                raise TimeoutError(f"no result within {timeout:g} s")
    except BaseException:
        pending.abandon()
        raise
    if pending.error is not None:
        raise pending.error
    return pending.result  # type: ignore[return-value]
