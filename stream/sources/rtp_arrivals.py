"""When each frame of a received WebRTC track reached us: the arrival of its first RTP
packet, before aiortc's receiving side held it back.

aiortc's receiver hands a frame on only after more packets came behind it: a video frame
when the next frame's first packet arrives (about one frame interval), an audio frame when
four more packets are buffered (80 ms of 20 ms Opus packets). Those holds differ between
sound and pictures, so the moment `recv()` returns is no common clock for the two. The
moment their packets arrived is: `RtpArrivals` notes it for each RTP timestamp as packets
come in, and maps a decoded frame (whose pts is its RTP timestamp less the receiver's
first one) back to it.
"""
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

KEEP = 512  # RTP timestamps remembered: 10 s of 20 ms sound, 17 s of 30 fps video


class RtpArrivals:
    """The arrival times (time.monotonic()) of one receiver's RTP packets, per RTP
    timestamp; `install` before packets flow (at the track event)."""

    def __init__(self) -> None:
        self._first: OrderedDict[int, float] = OrderedDict()
        self._receiver: Any = None
        self._origin: int | None = None  # the first timestamp seen, when the receiver's is unknown

    def install(self, receiver: Any) -> RtpArrivals:
        """Note the arrival of each packet `receiver` (an aiortc RTCRtpReceiver) handles."""
        self._receiver = receiver
        handle = receiver._handle_rtp_packet

        async def noted(packet: Any, arrival_time_ms: int) -> None:
            self.note(packet.timestamp, time.monotonic())
            await handle(packet, arrival_time_ms=arrival_time_ms)

        receiver._handle_rtp_packet = noted
        return self

    def note(self, timestamp: int, when: float) -> None:
        if self._origin is None:
            self._origin = timestamp
        if timestamp not in self._first:
            self._first[timestamp] = when
            if len(self._first) > KEEP:
                self._first.popitem(last=False)

    def arrival(self, frame: Any) -> float | None:
        """When the first packet of `frame` (decoded from this receiver) arrived; None
        when not known (no pts, or before `install`)."""
        if frame.pts is None:
            return None
        mapper = getattr(self._receiver, "_RTCRtpReceiver__timestamp_mapper", None)
        origin = getattr(mapper, "_origin", None)
        if origin is None:
            origin = self._origin
        if origin is None:
            return None
        return self._first.get((int(frame.pts) + origin) & 0xFFFFFFFF)
