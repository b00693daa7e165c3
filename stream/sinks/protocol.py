"""What a live sink is to a live run: a sink that is opened before the first frame and has
a name for messages; and, for a sink that can fail to deliver (a network output), its
delivery figures."""
from __future__ import annotations

from typing import Any, NotRequired, Protocol, TypedDict, runtime_checkable

from stream.runtime.protocols import Sink


class LiveSink(Sink, Protocol):
    @property
    def name(self) -> str: ...

    def open(self) -> None:
        """Open the output (a device, a connection, a file); a SinkError when it cannot."""
        ...


class SinkStats(TypedDict):
    """A live sink's delivery figures since `open()`.

    `dropped`: frames given to `write()` that were not delivered (no connection, a failed
    write, a full send queue); `reconnects`: connections made again after one was lost;
    `outage_s`: seconds without a working connection in all, an outage still going on
    included (up to the moment `stats()` is called). A sink made of several (a fanout) adds
    `sinks`: each counting sink's own figures by its name, the three above being their totals.
    """

    dropped: int
    reconnects: int
    outage_s: float
    sinks: NotRequired[dict[str, SinkStats]]


@runtime_checkable
class CountingSink(Protocol):
    """Optional on a live sink: one that can drop frames says how many, and why (outages)."""

    def stats(self) -> SinkStats:
        """The figures so far (any thread; cheap: called once a second by the status line)."""
        ...


def stats_of(sink: Any) -> SinkStats:
    """`sink.stats()` for a sink that keeps them, zeros for one that always delivers (a file,
    a virtual camera): the frames given to it are the frames it delivered."""
    if isinstance(sink, CountingSink):
        got = sink.stats()
        stats = SinkStats(dropped=int(got.get("dropped", 0)), reconnects=int(got.get("reconnects", 0)),
                          outage_s=float(got.get("outage_s", 0.0)))
        if "sinks" in got:
            stats["sinks"] = dict(got["sinks"])
        return stats
    return SinkStats(dropped=0, reconnects=0, outage_s=0.0)
