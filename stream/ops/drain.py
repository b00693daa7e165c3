"""Stopping as a service: on SIGTERM, stop taking work and let the work under way finish,
within --drain-seconds.

`serve` (ServeSignals, on its event loop): SIGTERM starts the drain (the server answers
/readyz 503 and refuses new sessions at once) and the server waits for its sessions to
end, or closes them when the drain's time is up; a repeated SIGTERM changes nothing (a
preStop hook may have sent one already). SIGINT and SIGHUP stop at once, a drain too.

`live` (StopDeadline): a signal stops the pipeline cleanly (stream.cli.main.StopOnCtrlC);
if the stop takes longer than --drain-seconds, the main thread is interrupted as by a
second Ctrl-C."""
from __future__ import annotations

import _thread
import asyncio
import signal
import threading
from collections.abc import Callable

DRAIN_SECONDS = 20.0
_POLL_S = 0.1


def check_drain_seconds(seconds: float) -> float:
    """--drain-seconds, checked (0 or more; 0: close at once); a ValueError in one line."""
    if not 0 <= seconds < 1e6:
        raise ValueError(f"--drain-seconds {seconds:g}: must be 0 or more")
    return seconds


class ServeSignals:
    """The server's signals on its loop: `drain` is set by SIGTERM (once; `on_drain` is
    called then), `stop` by SIGINT or SIGHUP."""

    STOP = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if s is not None)

    def __init__(self, on_drain: Callable[[], None]) -> None:
        self.on_drain = on_drain
        self.stop = asyncio.Event()
        self.drain = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_signal_handler(signal.SIGTERM, self.terminate)
        for sig in self.STOP:
            loop.add_signal_handler(sig, self.stop.set)

    def remove(self) -> None:
        if self._loop is not None:
            for sig in (signal.SIGTERM, *self.STOP):
                self._loop.remove_signal_handler(sig)
            self._loop = None

    def terminate(self) -> None:
        """SIGTERM: the first starts the drain, later ones are ignored."""
        if not self.drain.is_set():
            self.drain.set()
            self.on_drain()

    async def wait(self, drain_seconds: float, open_sessions: Callable[[], int]) -> str:
        """Until the server should close: "stopped" (SIGINT, SIGHUP), "drained" (SIGTERM,
        and every session ended by itself) or "drain time up" (sessions left open after
        `drain_seconds`)."""
        waits = [asyncio.ensure_future(self.stop.wait()), asyncio.ensure_future(self.drain.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + drain_seconds
        while not self.stop.is_set() and open_sessions():
            left = deadline - loop.time()
            if left <= 0:
                return "drain time up"
            try:
                await asyncio.wait_for(self.stop.wait(), min(left, _POLL_S))
            except asyncio.TimeoutError:
                pass
        return "stopped" if self.stop.is_set() else "drained"


class StopDeadline:
    """`live`: once a signal has asked the run to stop, it has `seconds` to finish; then
    the main thread is interrupted (KeyboardInterrupt, as by a second Ctrl-C)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = False
        self._timer: threading.Timer | None = None

    def start(self) -> None:
        """The stop began (any thread; only the first call counts)."""
        if self.started:
            return
        self.started = True
        self._timer = threading.Timer(self.seconds, _thread.interrupt_main)
        self._timer.daemon = True
        self._timer.start()

    def cancel(self) -> None:
        """The run is over: no interrupt, and no thread left behind."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join(5.0)
