"""Several sinks fed the same frames: a live output plus its recording (`--record`)."""
from __future__ import annotations

from collections.abc import Sequence

from stream.media.close import close_quietly
from stream.runtime.slot import Slot
from stream.sinks.protocol import CountingSink, LiveSink, SinkStats, stats_of


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

    def stats(self) -> SinkStats:
        """The totals of the sinks that count their drops, and each one's figures under
        `sinks` by name (sinks that always deliver, such as files, are not listed)."""
        per = {sink.name: stats_of(sink) for sink in self.sinks if isinstance(sink, CountingSink)}
        return SinkStats(dropped=sum(s["dropped"] for s in per.values()),
                         reconnects=sum(s["reconnects"] for s in per.values()),
                         outage_s=round(sum(s["outage_s"] for s in per.values()), 3), sinks=per)

    def close(self) -> None:
        error: BaseException | None = None
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:  # noqa: BLE001 - the first one is reported
                error = error or exc
        if error is not None:
            raise error
