"""What a live sink is to a live run: a sink that is opened before the first frame and has
a name for messages."""
from __future__ import annotations

from typing import Protocol

from stream.runtime.protocols import Sink


class LiveSink(Sink, Protocol):
    @property
    def name(self) -> str: ...

    def open(self) -> None:
        """Open the output (a device, a connection, a file); a SinkError when it cannot."""
        ...
