"""An RTSP push as a live sink: libx264 with zero latency, published from a writer thread so
that a slow, stalled or vanished server never holds up the pipeline."""
from __future__ import annotations

import base64
import logging
import queue
import threading
import time
from fractions import Fraction

import av
import numpy as np

from stream.config import EncodeConfig
from stream.errors import SinkError, reason_of
from stream.media.audio_delay import AudioDelay, PlayoutDelay
from stream.media.backoff import backoff_delay
from stream.media.clock import VIDEO_TIME_BASE
from stream.media.close import close_quietly
from stream.media.convert import YuvFramer
from stream.media.face_roi import FaceRegions
from stream.media.interruptible import Cancelled
from stream.media.rtsp import RtspRefused, redacted
from stream.runtime.slot import Slot
from stream.sinks.protocol import SinkStats
from stream.sinks.rtsp_session import MediaRefused, PublishSession, RtspLost

log = logging.getLogger(__name__)

QUEUE_FRAMES = 8  # about a quarter of a second at 30 fps: rides out a slow send, not a stall
RTP_PACKET = 1400  # bytes: what the server forwards over UDP to its readers must fit a datagram
CLOSE_GRACE_S = 2.0  # close() lets frames already queued go out for this long
AUDIO_RATE = 48000  # Opus's clock, and the rate live sources hand their sound on in
AUDIO_GAP_S = 0.02  # audio this close to where the last ended continues it (no hole, no overlap)
AUDIO_TICK_S = 0.005  # the writer looks for sound that is due this often


class RtspSink:
    """Pushes H.264 to an RTSP server (ANNOUNCE/RECORD, RTP interleaved over TCP): libx264
    with `tune=zerolatency`, no B-frames, a keyframe at least every 2 s, SPS/PPS in the SDP
    and on every keyframe, timestamps from the frames' capture clock, one slice per frame
    (zerolatency's sliced threads cut each frame into slices, which not every server relays
    intact: through GStreamer's RTSP server the first slices of each frame were lost; one
    encoder thread adds no delay).

    `write()` converts the picture and queues it; a writer thread encodes and sends. The
    first connection must succeed within `open_timeout` (a one-line SinkError otherwise,
    at once for a refusal or a 404). If the server goes away or stalls (takes no data for
    `send_timeout` seconds) mid-run, that is one warning line, frames are dropped and
    counted while the writer reconnects with backoff, and the run goes on. `stats()` gives
    the frames dropped, the reconnects and the time without a connection.

    `audio` (the source's sound, 48 kHz stereo s16, through its delay line): published as
    Opus beside the video (a second stream in the ANNOUNCE), timed on the same capture
    clock. Pictures and sound leave on that clock: both captured at t are sent at t + D
    (`PlayoutDelay`: the 90th percentile of the frames' latency to this sink; a frame
    written sooner waits in the writer, the sound going on meanwhile), the sound a little
    later by the encoder's time, so a picture and its sound reach the server together.
    Sound never waits for a picture: frames dropped or a stall change nothing for it.
    """

    def __init__(self, url: str, width: int, height: int, fps: float, encode: EncodeConfig,
                 preset: str = "veryfast", open_timeout: float = 10.0, send_timeout: float = 3.0,
                 audio: AudioDelay | None = None) -> None:
        self.url = url
        self.audio = audio
        self._playout = PlayoutDelay()  # D: capture to sent, pictures and sound alike (with sound)
        self._encode_s = 0.0  # how long the last frame took to encode and send
        self._audio_next: int | None = None  # pts (1/48000) where the sound sent so far ends
        self.audio_frames_sent = 0
        self.width, self.height = width, height
        self.fps = fps if fps > 0 else 30.0
        self.encode = encode
        self.preset = preset
        self.open_timeout = open_timeout
        self.send_timeout = send_timeout
        self.frames_written = 0
        self.frames_dropped = 0
        self.reconnects = 0
        self._framer = YuvFramer(width, height)
        # The swapped faces get finer quantisation (encode.face_qp), as in a file output.
        self._faces = FaceRegions(self.name, "libx264", preset, encode.face_qp, width, height, VIDEO_TIME_BASE)
        # The writer may hold one frame and the queue the next QUEUE_FRAMES: one more to fill.
        self._pool = [self._framer.new_frame() for _ in range(QUEUE_FRAMES + 2)]
        self._next = 0
        self._queue: queue.Queue[av.VideoFrame] = queue.Queue(QUEUE_FRAMES)
        self._link: _Link | None = None
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None  # what ended the writer, if not close()
        self._closing = threading.Event()  # close() called: send what is queued, then end
        self._stop = threading.Event()  # end now: every wait and send returns
        self._lock = threading.Lock()  # the figures, written by two threads
        self._lost_since: float | None = None
        self._outage_s = 0.0
        self._dropped_before = 0  # frames dropped up to the last one sent
        self._t0: float | None = None
        self._last_pts = -1

    @property
    def name(self) -> str:
        return f"rtsp {redacted(self.url)!r}"

    # -- the connection ----------------------------------------------------------------

    def _connect(self, timeout: float) -> _Link:
        packets: list[bytes] = []
        output = av.open(_Collector(packets), "w", format="rtp",
                         container_options={"packetsize": str(RTP_PACKET), "payload_type": "96"})
        session = PublishSession(self.url, self._stop)
        try:
            video = output.add_stream("libx264", rate=Fraction(self.fps).limit_denominator(1001))
            video.width, video.height, video.pix_fmt = self.width, self.height, "yuv420p"
            video.time_base = VIDEO_TIME_BASE
            video.codec_context.time_base = VIDEO_TIME_BASE
            video.codec_context.flags |= av.codec.context.Flags.global_header  # SPS/PPS for the SDP
            gop = max(1, int(2 * self.fps))  # a keyframe at least every 2 s
            video.options = {"preset": self.preset, "tune": "zerolatency", "bf": "0",
                             "g": str(gop), "keyint_min": str(min(gop, 10)),
                             "crf": str(self.encode.crf), "forced-idr": "1", "threads": "1",
                             "x264-params": "repeat-headers=1"}  # and in band, for late readers
            output.start_encoding()  # opens the encoder; the rtp muxer writes nothing yet
            media = _media_sdp(bytes(video.codec_context.extradata or b""))
            sound = None
            if self.audio is not None:
                sound = _SoundOut()
                media += "\n" + _OPUS_SDP
            session.start(media, timeout)
        except BaseException:
            session.close()
            close_quietly(output)
            if sound is not None:
                sound.close()
            raise
        return _Link(session, output, video, packets, sound)

    def open(self) -> None:
        """Connect and start publishing (a SinkError within `open_timeout` when the server
        refuses, is not there or does not answer), then start the writer."""
        if self.width % 2 or self.height % 2:
            raise SinkError(f"{self.name}: H.264 needs an even width and height, got {self.width}x{self.height}")
        if self._thread is not None:
            return
        try:
            try:
                self._link = self._connect(self.open_timeout)
            except MediaRefused as exc:
                if self.audio is None:
                    raise
                log.warning("%s: %s for the video with sound; publishing the video only", self.name, exc)
                self.audio.drop_all()
                self.audio = None
                self._link = self._connect(self.open_timeout)
        except (RtspRefused, RtspLost) as exc:
            raise SinkError(f"{self.name}: {exc}") from None
        except av.FFmpegError as exc:
            raise SinkError(f"{self.name}: cannot start the encoder ({reason_of(exc)})") from None
        except ValueError as exc:  # a URL that is not one
            raise SinkError(f"{self.name}: {exc}") from None
        except Cancelled:
            raise SinkError(f"{self.name}: closed while connecting") from None
        self._thread = threading.Thread(target=self._run, name="fs-rtsp-out", daemon=True)
        self._thread.start()

    # -- the pipeline's side -----------------------------------------------------------

    def write(self, slot: Slot) -> None:
        """Queue the frame for the writer; never waits: while there is no connection, or
        the queue is full (the server is slow or stalled), the frame is dropped and counted."""
        if self._failure is not None:
            raise SinkError(f"{self.name}: the writer failed ({type(self._failure).__name__}: "
                            f"{self._failure})") from self._failure
        if self._t0 is None:
            self._t0 = slot.capture_time
        pts = max(round((slot.capture_time - self._t0) / VIDEO_TIME_BASE), self._last_pts + 1)
        self._last_pts = pts
        if self.audio is not None:
            self._playout.frame(max(0.0, time.monotonic() - slot.capture_time))
        if self._link is None or self._closing.is_set() or self._queue.full():
            self._count_dropped(1)
            return
        frame = self._faces.attach(self._framer.fill(slot.image, self._pool[self._next]), slot.payload)
        self._next = (self._next + 1) % len(self._pool)
        frame.pts = pts
        frame.time_base = VIDEO_TIME_BASE
        try:
            self._queue.put_nowait(frame)
        except queue.Full:
            self._count_dropped(1)

    def _due_sound(self) -> list[av.AudioFrame]:
        """The sound due now (see `audio`), as Opus-ready frames timed on the video's clock;
        sound from before the first picture is left out."""
        t0 = self._t0
        if self.audio is None or t0 is None:
            return []
        sound: list[av.AudioFrame] = []
        for when, samples in self.audio.release_due(time.monotonic(), self._playout.seconds() + self._encode_s):
            n = samples.shape[1] // 2
            pts = round((when - t0) * AUDIO_RATE)
            if self._audio_next is not None and abs(pts - self._audio_next) <= AUDIO_GAP_S * AUDIO_RATE:
                pts = self._audio_next  # continuous: clock jitter must not cut or overlap it
            if pts < 0 or (self._audio_next is not None and pts < self._audio_next):
                continue
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="s16", layout="stereo")
            frame.sample_rate = AUDIO_RATE
            frame.pts = pts
            frame.time_base = Fraction(1, AUDIO_RATE)
            sound.append(frame)
            self._audio_next = pts + n
        return sound

    def _captured(self, frame: av.VideoFrame) -> float:
        assert self._t0 is not None
        return self._t0 + float((frame.pts or 0) * VIDEO_TIME_BASE)

    def _count_dropped(self, n: int) -> None:
        if n:
            with self._lock:
                self.frames_dropped += n

    def stats(self) -> SinkStats:
        with self._lock:
            outage = self._outage_s
            if self._lost_since is not None:
                outage += time.monotonic() - self._lost_since
            return SinkStats(dropped=self.frames_dropped, reconnects=self.reconnects, outage_s=round(outage, 3))

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        """Contract: ends when close() asks (after sending what is queued) or stops it; a
        lost connection is retried with backoff, never raised; the connection is closed
        and what is left in the queue is counted as dropped on the way out."""
        attempt = 0
        held: av.VideoFrame | None = None  # a frame waiting for capture + D (with sound)
        wait = 0.0
        try:
            while not self._stop.is_set():
                link = self._link
                if link is None:
                    if self._closing.is_set() or self._stop.wait(backoff_delay(attempt)):
                        break
                    attempt += 1
                    if self._reconnect():
                        attempt = 0
                    continue
                frame, held = held, None
                if frame is None:
                    try:
                        frame = self._queue.get(timeout=0.1 if self.audio is None else AUDIO_TICK_S)
                    except queue.Empty:
                        if self._closing.is_set():
                            break
                started = time.monotonic()
                if frame is not None and self.audio is not None and not self._closing.is_set():
                    wait = self._captured(frame) + self._playout.seconds() - started
                    if wait > 0.001:  # ready before capture + D: it waits, the sound goes on
                        held, frame = frame, None
                try:
                    if frame is not None:
                        link.send(frame, self.send_timeout)
                        self._encode_s = time.monotonic() - started
                    elif held is not None:
                        self._stop.wait(min(wait, AUDIO_TICK_S))
                    sound = self._due_sound()
                    if sound and link.sound is not None:
                        link.send_sound(sound, self.send_timeout)
                        self.audio_frames_sent += len(sound)
                    if frame is None:
                        continue
                except Cancelled:
                    self._count_dropped(int(frame is not None))
                    break
                except (RtspLost, RtspRefused, av.FFmpegError, OSError) as exc:
                    self._count_dropped(int(frame is not None))
                    self._lose(link, str(exc), started)
                    continue
                with self._lock:
                    self.frames_written += 1
                    self._dropped_before = self.frames_dropped
        except BaseException as exc:  # a bug, not the network: the next write() stops the run with it
            log.debug("%s: the writer failed", self.name, exc_info=exc)
            self._failure = exc
        finally:
            with self._lock:
                link, self._link = self._link, None
                if self._lost_since is not None:
                    self._outage_s += time.monotonic() - self._lost_since
                    self._lost_since = None
            if link is not None:
                link.close()
            self._count_dropped(int(held is not None))
            self._discard_queued()

    def _lose(self, link: _Link, why: str, since: float) -> None:
        with self._lock:
            self._link = None
            self._lost_since = since  # a stall began when the send that timed out did
        link.close()
        self._discard_queued()
        log.warning("%s: %s; reconnecting", self.name, why)

    def _reconnect(self) -> bool:
        try:
            link = self._connect(min(self.open_timeout, 5.0))
        except Cancelled:
            return False
        except (RtspRefused, RtspLost, av.FFmpegError, OSError) as exc:
            log.debug("%s: reconnect failed (%s)", self.name, exc)
            return False
        self._discard_queued()  # queued before the reconnect: late now
        with self._lock:
            since = self._lost_since or time.monotonic()
            self._outage_s += time.monotonic() - since
            self._lost_since = None
            self.reconnects += 1
            dropped = self.frames_dropped - self._dropped_before
            self._link = link
        log.warning("%s: publishing again after %.1f s (%d frames dropped)", self.name,
                    time.monotonic() - since, dropped)
        return True

    def _discard_queued(self) -> None:
        n = 0
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
            n += 1
        self._count_dropped(n)

    def close(self) -> None:
        """Send what is queued (for up to CLOSE_GRACE_S), TEARDOWN and hang up; bounded
        whatever the server does."""
        thread = self._thread
        if thread is None:
            link, self._link = self._link, None
            if link is not None:
                link.close()
            return
        self._closing.set()
        if self._link is None:  # nothing to send: no reason to wait for a reconnect
            self._stop.set()
        thread.join(CLOSE_GRACE_S)
        if thread.is_alive():  # a send to a stalled server, or a reconnect under way
            self._stop.set()
            link = self._link
            if link is not None:
                link.session.abort()
            thread.join(CLOSE_GRACE_S)
            if thread.is_alive():
                log.warning("%s: the writer did not stop", self.name)


class _Link:
    """One working connection: the encoder and rtp muxer, and the session carrying their packets."""

    def __init__(self, session: PublishSession, output: av.container.OutputContainer,
                 video: av.VideoStream, packets: list[bytes], sound: _SoundOut | None = None) -> None:
        self.session, self.output, self.video, self.packets = session, output, video, packets
        self.sound = sound

    def send(self, frame: av.VideoFrame, timeout: float) -> None:
        self.packets.clear()
        for packet in self.video.encode(frame):
            self.output.mux(packet)
        self.session.send(self.packets, timeout)

    def send_sound(self, frames: list[av.AudioFrame], timeout: float) -> None:
        assert self.sound is not None
        packets = self.sound.encode(frames)
        if packets:
            self.session.send(packets, timeout, stream=1)

    def close(self) -> None:
        self.session.close()
        close_quietly(self.output)
        if self.sound is not None:
            self.sound.close()


_OPUS_SDP = "\n".join(["m=audio 0 RTP/AVP 97", "a=rtpmap:97 opus/48000/2", "a=control:streamid=1"])


class _SoundOut:
    """The Opus encoder and its own rtp muxer (one stream per RTP session), payload type 97."""

    def __init__(self) -> None:
        self.packets: list[bytes] = []
        self.output = av.open(_Collector(self.packets), "w", format="rtp",
                              container_options={"packetsize": str(RTP_PACKET), "payload_type": "97"})
        try:
            self.stream = self.output.add_stream("libopus", rate=AUDIO_RATE)
            self.stream.layout = "stereo"
            self.stream.time_base = Fraction(1, AUDIO_RATE)
            self.stream.codec_context.time_base = Fraction(1, AUDIO_RATE)
            # 10 ms frames: the pieces sources hand on, each sent when due, none held back
            self.stream.options = {"application": "lowdelay", "frame_duration": "10"}
            self.output.start_encoding()
        except BaseException:
            close_quietly(self.output)
            raise

    def encode(self, frames: list[av.AudioFrame]) -> list[bytes]:
        self.packets.clear()
        for frame in frames:
            for packet in self.stream.encode(frame):
                self.output.mux(packet)
        return list(self.packets)

    def close(self) -> None:
        close_quietly(self.output)


class _Collector:
    """The rtp muxer's output: each write is one RTP or RTCP packet (it flushes after each)."""

    def __init__(self, packets: list[bytes]) -> None:
        self.packets = packets

    def write(self, data: bytes) -> int:
        self.packets.append(bytes(data))
        return len(data)


def _media_sdp(extradata: bytes) -> str:
    """The SDP media section for H.264 from the encoder's Annex B SPS and PPS (RFC 6184)."""
    nals = [n.rstrip(b"\x00") for n in extradata.split(b"\x00\x00\x01")]
    sps = next((n for n in nals if n and n[0] & 0x1F == 7), b"")
    pps = next((n for n in nals if n and n[0] & 0x1F == 8), b"")
    fmtp = "packetization-mode=1"
    if sps and pps:
        sets = ",".join(base64.b64encode(n).decode() for n in (sps, pps))
        fmtp += f"; sprop-parameter-sets={sets}; profile-level-id={sps[1:4].hex().upper()}"
    return "\n".join(["m=video 0 RTP/AVP 96", "a=rtpmap:96 H264/90000", f"a=fmtp:96 {fmtp}",
                      "a=control:streamid=0"])
