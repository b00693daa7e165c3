"""Several sinks fed the same frames: a live output plus its recording (`--record`)."""
from __future__ import annotations

from collections.abc import Sequence

from stream.media.close import close_quietly
from stream.runtime.slot import Slot
from stream.sinks.protocol import LiveSink


class FanoutSink:
    """Writes each frame to every sink in turn; opens them all or none."""

    def __init__(self, sinks: Sequence[LiveSink]) -> None:
        self.sinks = list(sinks)
        self.opened = False

    @property
    def name(self) -> str:
        return " + ".join(s.name for s in self.sinks)

    def open(self) -> None:
        """Open every sink (once; a failure closes those already opened)."""
        if self.opened:
            return
        opened: list[LiveSink] = []
        try:
            for sink in self.sinks:
                sink.open()
                opened.append(sink)
        except BaseException:
            for sink in opened:
                close_quietly(sink)
            raise
        self.opened = True

    def write(self, slot: Slot) -> None:
        for sink in self.sinks:
            sink.write(slot)

    def close(self) -> None:
        error: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - the first one is reported
                error = error or exc
        if error is not None:
            raise error
