"""Lines redrawn in place on a terminal: the progress of long jobs (frames, fps, ETA; a bar
on a terminal, a few lines in a log), and the status line of live runs with log lines
written above it."""
from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO


class Progress:
    def __init__(self, total: int, label: str = "", stream: TextIO | None = None,
                 enabled: bool = True, unit: str = "frames") -> None:
        self.total = max(0, total)
        self.unit = unit  # "frames" or "bytes"
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.done = 0
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._next_quarter = 0.25

    def update(self, n: int = 1, done: int | None = None, total: int | None = None) -> None:
        """Advance by `n`, or set the absolute `done` (and `total`, once known)."""
        self.done = done if done is not None else self.done + n
        if total is not None:
            self.total = total
        if not self.enabled:
            return
        now = time.monotonic()
        if self.tty:
            if now - self._last_draw >= 0.2:
                self._last_draw = now
                self.stream.write("\r" + self.line(now))
                self.stream.flush()
        elif self.total and self.done >= self._next_quarter * self.total:
            while self._next_quarter <= 1.0 and self.done >= self._next_quarter * self.total:
                self._next_quarter += 0.25  # one line, however many quarters this step passed
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        now = now or time.monotonic()
        elapsed = max(now - self.started, 1e-6)
        if self.unit == "bytes":
            mb, rate = self.done / 1e6, self.done / 1e6 / elapsed
            if self.total:
                return (f"{self.label}{mb:.1f} / {self.total / 1e6:.1f} MB "
                        f"({100 * self.done // self.total:3d}%)  {rate:.1f} MB/s")  # 100% once whole
            return f"{self.label}{mb:.1f} MB  {rate:.1f} MB/s"
        fps = self.done / elapsed
        if self.total:
            frac = min(1.0, self.done / self.total)
            width = 24
            bar = "#" * int(frac * width) + "." * (width - int(frac * width))
            eta = (self.total - self.done) / fps if fps > 0 else 0.0
            return (f"{self.label}[{bar}] {self.done}/{self.total} frames  {fps:5.1f} fps  "
                    f"ETA {eta:4.0f} s")
        return f"{self.label}{self.done} frames  {fps:5.1f} fps"

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r" + self.line() + "\n")
            self.stream.flush()


ERASE_LINE = "\x1b[K"  # erase from the cursor to the end of the line


class StatusBoard:
    """A live run's status line at the bottom of a terminal, redrawn in place, with every
    other line (log records, messages) written above it on a line of its own: the status is
    erased first and drawn again after, so the two never run into one another.

    Not on a terminal (a log file, a pipe, a service's journal) nothing is redrawn and no
    carriage return is written: the status goes out as a whole line every `every` seconds,
    the first one at the first update. Any thread may call; writes are serialised.
    """

    def __init__(self, stream: TextIO | None = None, every: float = 10.0, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)()) if tty is None else tty
        self.every = every
        self._lock = threading.RLock()
        self._shown: str | None = None  # the status line on screen now (terminal only)
        self._next_line = 0.0  # when the next whole status line is due (not a terminal)

    def show(self, text: str) -> None:
        """The status is now `text`."""
        with self._lock:
            if self.tty:
                self._write("\r" + text + ERASE_LINE)
                self._shown = text
                return
            now = time.monotonic()
            if now >= self._next_line:
                self._next_line = now + self.every
                self._write(text + "\n")

    def above(self, text: str) -> None:
        """Write `text` (one line or several) as lines of their own, above the status."""
        with self._lock:
            if self._shown is not None:
                self._write("\r" + ERASE_LINE)
            self._write(text.rstrip("\n") + "\n")
            if self._shown is not None:
                self._write(self._shown + ERASE_LINE)

    def end(self) -> None:
        """Leave the last status on screen and move below it."""
        with self._lock:
            if self._shown is not None:
                self._write("\n")
                self._shown = None

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    @contextmanager
    def carrying_logs(self) -> Iterator[None]:
        """While in the block, log records that would be written to this board's stream
        are written through `above` instead (same format, same level)."""
        root = logging.getLogger()
        swapped: list[tuple[logging.StreamHandler[TextIO], TextIO]] = []
        for handler in root.handlers:
            if isinstance(handler, logging.StreamHandler) and getattr(handler, "stream", None) is self.stream:
                swapped.append((handler, handler.stream))
                handler.setStream(_Above(self))  # type: ignore[arg-type]
        try:
            yield
        finally:
            for handler, stream in swapped:
                handler.setStream(stream)


class _Above:
    """A stream for a logging handler: each record (the handler writes it, then its
    terminator) becomes one `StatusBoard.above` call."""

    def __init__(self, board: StatusBoard) -> None:
        self.board = board
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if self._pending.endswith("\n"):
            self.board.above(self._pending)
            self._pending = ""
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self.board.above(self._pending)
            self._pending = ""
