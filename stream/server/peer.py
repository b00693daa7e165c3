"""One WebRTC peer of `facestream serve`: its connection, its own pipeline on the server's
shared models, its live figures, and the watch that ends it when its peer is gone.

A session lives only while its peer does: one not connected within `connect_timeout`
(an offer whose candidates nobody answers, a client that vanished while connecting),
one whose connection fails or closes, and one whose video stops for `idle_timeout` (a
client killed without a word: ICE consent would take 30 s to notice) is closed, and its
slot freed, within a second of the bound."""
from __future__ import annotations

import asyncio
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError

from engines.errors import EngineError
from stream.errors import StreamError, reason_of
from stream.job.assembly import Pipeline
from stream.job.runs import run_live
from stream.job.swap_job import SwapJob
from stream.media.audio_delay import AudioBus
from stream.server.faces import FaceEntry
from stream.server.ice import restrict_gathering
from stream.sinks.relay import FrameRelay
from stream.sinks.webrtc import SwappedTrack, WebRtcSink
from stream.sinks.webrtc_sound import DelayedSoundTrack, SoundFeed
from stream.sources.rtp_arrivals import RtpArrivals
from stream.sources.webrtc import TrackReader, WebRtcSource
from stream.sources.webrtc_sound import SoundReader, VideoLag

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 15.0  # from the answer to a connected peer
IDLE_TIMEOUT_S = 10.0  # without a frame from a connected peer
MAX_SDP_CHARS = 64 * 1024  # a browser's offer is a few KB
WATCH_PERIOD_S = 0.25


class OfferError(ValueError):
    """An offer this server cannot answer (the message is for the client, one line)."""


def check_offer(sdp: str) -> None:
    """Refuse, before aiortc sees it, an offer that cannot lead to a session: no video, or
    no ICE candidate (this server takes no trickled candidates, so such a peer could only
    hold a slot until the connect timeout)."""
    if len(sdp) > MAX_SDP_CHARS:
        raise OfferError(f"offer: the SDP is {len(sdp)} characters; at most {MAX_SDP_CHARS} are taken")
    lines = [line.strip() for line in sdp.splitlines()]
    if not any(line.startswith("m=video ") for line in lines):
        raise OfferError("offer: the SDP has no video (m=video) section")
    if not any(line.startswith("a=candidate:") for line in lines):
        raise OfferError("offer: the SDP carries no ICE candidates (send it once gathering is "
                         "complete; this server takes no trickled candidates)")


class PeerSession:
    """One browser (or other WebRTC peer): its connection, its pipeline, its figures."""

    def __init__(self, job: SwapJob, face: FaceEntry, codec: str = "vp8",
                 say: Callable[[str], None] | None = None,
                 on_failed: Callable[[str], Awaitable[None]] | None = None,
                 visitor: str | None = None, ice_addresses: list[str] | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT_S, idle_timeout: float = IDLE_TIMEOUT_S) -> None:
        """`job`: the shared models; `codec`: what to send back (see stream.server.CODECS); `say`: one
        line per event for the console; `on_failed(id)`: the session should end (its
        connection failed or closed, or its peer is gone); `visitor`: who opened it (its
        faces are theirs); `ice_addresses`: where to gather candidates (None: everywhere)."""
        self.job = job
        self.codec_wanted = codec
        self.say = say or (lambda line: None)
        self.on_failed = on_failed
        self.visitor = visitor
        self.ice_addresses = ice_addresses
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.id = secrets.token_hex(6)
        self.token = secrets.token_urlsafe(24)  # reading, changing or closing the session needs it
        self.face = face
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.source = WebRtcSource(f"webrtc peer {self.id}")
        self.out = SwappedTrack()
        self.relay = FrameRelay()  # the swapped video for this session's viewers (WHEP)
        self.via = "page"  # how the peer came: "page" (the JSON offer) or "whip"
        # The peer's sound: stamped on its pictures' clock (the lag of its pictures measured
        # from their packets' arrival), sent back held by the pictures' latency.
        self.audio = AudioBus()
        self.video_lag = VideoLag(RtpArrivals())
        self.sound: SoundReader | None = None
        self.sound_out: DelayedSoundTrack | None = None
        self._drains: list[asyncio.Task[None]] = []  # further sound tracks: read and let go
        self.reader: TrackReader | None = None
        self.thread: threading.Thread | None = None
        self.sink: WebRtcSink | None = None
        self.pipeline: Pipeline | None = None
        self.figures: dict[str, Any] = {}
        self.report: dict[str, Any] | None = None
        self.error: str | None = None
        self.codec: str | None = None
        self.closed = False
        self.ended: str | None = None  # why the server ended it
        self._watch: asyncio.Task[None] | None = None

    async def answer(self, offer: RTCSessionDescription) -> RTCSessionDescription:
        pc = self.pc
        pc.on("track", self._on_track)
        pc.on("connectionstatechange", self._on_state)
        await pc.setRemoteDescription(offer)
        video = [t for t in pc.getTransceivers() if t.kind == "video"]
        if not video:
            raise OfferError("offer: the SDP has no video (m=video) section")
        pc.addTrack(self.out)
        audio = [t for t in pc.getTransceivers() if t.kind == "audio"]
        sends = getattr(audio[0], "_offerDirection", None) if audio else None  # ours, the offer's reversed
        if sends in ("recvonly", "sendrecv"):  # the peer sends sound: its viewers hear it
            self.relay.sound = SoundFeed(self.audio, self.video_latency)
        if sends == "sendrecv":  # ... and takes sound back: its own, with its swapped video
            self.sound_out = DelayedSoundTrack(self.audio.subscribe(), self.video_latency)
            pc.addTrack(self.sound_out)
        prefer_codec(video[0], self.codec_wanted)
        restrict_gathering(pc, self.ice_addresses)
        await pc.setLocalDescription(await pc.createAnswer())
        self.codec = _negotiated_codec(video[0])
        self._watch = asyncio.ensure_future(self._watch_peer())
        return pc.localDescription

    async def _watch_peer(self) -> None:
        """End the session when its peer does not connect in time, or stops sending."""
        start = time.monotonic()
        connected = False
        seen, last_frame = 0, start
        while not self.closed:
            await asyncio.sleep(WATCH_PERIOD_S)
            now = time.monotonic()
            state = self.pc.connectionState
            if not connected:
                if state == "connected":
                    connected, last_frame = True, now
                elif now - start > self.connect_timeout:
                    return await self._give_up(f"not connected within {self.connect_timeout:g} s")
                continue
            if self.source.frames_received != seen:
                seen, last_frame = self.source.frames_received, now
            elif now - last_frame > self.idle_timeout:
                return await self._give_up(f"no video from the peer for {self.idle_timeout:g} s")

    async def _give_up(self, why: str) -> None:
        self.ended = why
        self.say(f"peer {self.id}: closed, {why}")
        if self.on_failed is not None:
            await self.on_failed(self.id)

    def _on_track(self, track: Any) -> None:
        receiver = next((r for r in self.pc.getReceivers() if r.track is track), None)
        if track.kind != "video":
            if self.sound is None and track.kind == "audio":
                self.sound = SoundReader(track, receiver, self.audio, self.video_lag, f"webrtc peer {self.id}")
                self.sound.start()
            else:  # read and let go, so aiortc's receive queue does not grow for the session's life
                self._drains.append(asyncio.ensure_future(_drain(track)))
            return
        if self.reader is not None:
            return
        if receiver is not None:
            self.video_lag.arrivals.install(receiver)
        self.reader = TrackReader(track, self.source, receiver, on_first=self._start_pipeline,
                                  on_frame=self.video_lag.offered)
        self.reader.start()

    def video_latency(self) -> float:
        """The swapped pictures' latency, capture to the sender taking them (to the sink,
        when the peer takes no video back): what the sound sent with them is held back by."""
        if self.out.frames_sent or self.sink is None:
            return self.out.latency_s
        return self.sink.latency_s

    async def _on_state(self) -> None:
        if self.pc.connectionState in ("failed", "closed") and not self.closed:
            self.ended = self.ended or f"the connection {self.pc.connectionState}"
            if self.on_failed is not None:
                await self.on_failed(self.id)

    def _start_pipeline(self, _frame: Any) -> None:
        if self.closed:  # the peer left before its first frame was handled
            return
        self.thread = threading.Thread(target=self._run, name=f"fs-peer-{self.id}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        info = self.source.info
        assert info is not None
        hdr = f"; {self.source.range_note}" if self.source.range_note else ""
        self.say(f"peer {self.id}: {self.codec or 'video'} {info.width}x{info.height}, "
                 f"face {self.face.name}{hdr}")
        self.sink = sink = WebRtcSink(self.out, info.width, info.height, relay=self.relay)
        try:
            result = run_live(self.job, self.source, sink, self.source.name, status=self._on_figures,
                              faces=[self.face.prepared], on_start=self._on_pipeline)
            self.report = rep = result.report
            lat = rep.get("latency", {})
            self.say(f"peer {self.id}: ended after {rep['frames_in']} frames in, {rep['frames']} out, "
                            f"{rep['drops']} dropped, latency p95 {lat.get('p95_ms', 0):.0f} ms")
        except (StreamError, EngineError, ValueError) as exc:
            self.error = reason_of(exc)
            self.say(f"peer {self.id}: {self.error}")
        except Exception as exc:  # noqa: BLE001 - one peer's failure must not take the server down
            self.error = f"internal error: {type(exc).__name__}: {exc}"
            log.exception("%s failed", self.source.name)

    def _on_pipeline(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def _on_figures(self, figures: dict[str, Any]) -> None:
        self.figures = figures

    def set_face(self, face: FaceEntry) -> None:
        self.face = face
        if self.pipeline is not None:
            self.pipeline.use_faces([face.prepared])

    def state(self) -> dict[str, Any]:
        info = self.source.info
        return {"session": self.id, "connection": self.pc.connectionState, "ended": self.ended,
                "face": self.face.id, "via": self.via, "viewers": self.relay.viewers,
                "codec": self.codec, "size": [info.width, info.height] if info else None,
                "running": self.thread is not None and self.thread.is_alive(), "error": self.error,
                **self.figures,
                "received": self.source.frames_received, "replaced_in": self.source.frames_replaced,
                "sent": self.out.frames_sent, "replaced_out": self.out.frames_replaced,
                "decoder_backlog_max": self.reader.max_backlog if self.reader else 0,
                "audio": self._audio_state()}

    def _audio_state(self) -> dict[str, Any] | None:
        if self.sound is None:
            return None
        out = self.sound_out
        return {"received": self.sound.frames, "sent": out.frames_sent if out else 0,
                "held_ms": round(out.held_s * 1000, 1) if out else None,
                "expired": out.delay.expired if out else 0}

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._watch is not None and self._watch is not asyncio.current_task():
            self._watch.cancel()
        self.source.end()  # the pipeline reads no more: it finishes and closes its stages
        if self.reader is not None:
            await self.reader.stop()
        self.out.stop()
        if self.sound_out is not None:
            self.sound_out.stop()
        if self.sound is not None:
            await self.sound.stop()
        self.relay.close()
        for drain in self._drains:
            drain.cancel()
        await self.pc.close()
        if self.thread is not None:
            await asyncio.to_thread(self.thread.join, 15.0)
            if self.thread.is_alive():
                log.warning("%s: pipeline still running after close", self.source.name)


async def _drain(track: Any) -> None:
    try:
        while True:
            await track.recv()
    except MediaStreamError:
        pass


def prefer_codec(transceiver: Any, codec: str) -> None:
    """Answer with `codec` first when the peer offered it ("auto": the peer's order).

    aiortc builds the transceiver from the offer and answers in the offer's order; its
    `setCodecPreferences` only applies to transceivers we create, so the negotiated list
    is reordered (stable: each RTX entry stays with its codec)."""
    codecs = getattr(transceiver, "_codecs", None)
    if codec == "auto" or not codecs:
        return
    mime = f"video/{codec}".lower()
    chosen = {c.payloadType for c in codecs if c.mimeType.lower() == mime}
    if not chosen:
        return

    def rank(c: Any) -> int:
        if c.payloadType in chosen:
            return 0
        apt = c.parameters.get("apt") if c.mimeType.lower() == "video/rtx" else None
        return 0 if apt is not None and int(apt) in chosen else 1

    transceiver._codecs = sorted(codecs, key=rank)


def _negotiated_codec(transceiver: Any) -> str | None:
    codecs = getattr(transceiver, "_codecs", None) or []
    media = [c for c in codecs if c.mimeType.lower() not in ("video/rtx", "video/red", "video/ulpfec")]
    return media[0].mimeType.split("/", 1)[1] if media else None
