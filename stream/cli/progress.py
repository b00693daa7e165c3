"""A progress line for long jobs: frames, fps, ETA (a bar on a terminal, a few lines in a log)."""
from __future__ import annotations

import sys
import time
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
            self._next_quarter += 0.25
            self.stream.write(self.line(now) + "\n")
            self.stream.flush()

    def line(self, now: float | None = None) -> str:
        now = now or time.monotonic()
        elapsed = max(now - self.started, 1e-6)
        if self.unit == "bytes":
            mb, rate = self.done / 1e6, self.done / 1e6 / elapsed
            if self.total:
                return (f"{self.label}{mb:.1f} / {self.total / 1e6:.1f} MB "
                        f"({100 * self.done / self.total:3.0f}%)  {rate:.1f} MB/s")
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
