"""An RTSP stream as a live source: PyAV over TCP with low-delay options, reconnecting
with backoff when the stream drops or goes silent, stamped by the capture clock."""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from fractions import Fraction

import av

from stream.errors import SourceError, StopRequested, reason_of
from stream.media.audio_delay import LIVE_RATE, AudioBus, AudioFormat, live_pieces, live_resampler
from stream.media.backoff import PROBE_S, backoff_delay
from stream.media.clock import VIDEO_TIME_BASE, CaptureClock, StreamRate
from stream.media.close import close_quietly
from stream.media.interruptible import Cancelled, wait_for_call
from stream.media.rtsp import Join, has_credentials, reason_after, redacted, refusal_of, server_answer
from stream.media.sdr_pictures import SdrPictures
from stream.media.video_info import VideoInfo
from stream.runtime.slot import Slot

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0  # an OPTIONS request unanswered this long: the server is not there (yet)

_Opened = tuple["av.container.InputContainer", Iterator["av.VideoFrame"], "av.VideoFrame"]

# The stream's sound is decoded and handed on in one format whatever it came in (AAC, Opus,
# PCM ...): what the live sinks encode from (Opus is 48 kHz; AAC takes it as well).
CLOCK_FRAMES = 90  # video frames (3 s at 30 fps) the stream clock's offset is the least over


class StreamClock:
    """The stream's own timestamps on the capture clock (time.monotonic()): capture time =
    stream time + offset, the offset being the least (read time - stream time) over the
    last `CLOCK_FRAMES` video frames, i.e. that of the frame that reached us soonest.

    A frame read late (the network, the demuxer, a busy machine) is stamped when it was
    due, not when it was read, and the sound, stamped by the same offset, keeps exactly the
    offset to the pictures that the stream's timestamps give (RTCP-synchronised by FFmpeg's
    RTSP client), whatever order and delay the two arrived in."""

    def __init__(self) -> None:
        self._offsets: deque[float] = deque(maxlen=CLOCK_FRAMES)
        self.offset: float | None = None

    def reset(self) -> None:
        """A new connection: a new stream clock."""
        self._offsets.clear()
        self.offset = None

    def video(self, stream_time: float, now: float) -> float:
        """The capture time of a video frame of `stream_time` read at `now` (never later)."""
        self._offsets.append(now - stream_time)
        self.offset = min(self._offsets)
        return stream_time + self.offset

    def sound(self, stream_time: float | None, now: float) -> float:
        """The capture time of sound of `stream_time` (`now` before any picture)."""
        if self.offset is None or stream_time is None:
            return now
        return stream_time + self.offset


class RtspSource:
    """An RTSP stream pulled with PyAV over TCP, with low-delay options.

    Opening waits up to `open_timeout` seconds for the server to answer (an RTSP OPTIONS
    request), then, from that moment, for the first picture, which a stream joined between
    keyframes shows at the next one: up to two keyframe intervals (measured: stream.media.rtsp.Join)
    and at least `open_timeout`; a one-line error otherwise
    ("no answer within", or "connected, waiting for a keyframe"), and at once when the
    server's answer will not change (a 404, a refused connection, another protocol). The
    waits run in worker threads, so Ctrl-C and `stop()` end `open()` at once. When the
    stream drops mid-run (server restart, network) or goes silent for `read_timeout`
    seconds, it says so in one line, asks the server every 0.1-0.5 s whether it is back and
    reconnects as soon as it answers; after `give_up_after` seconds without a frame it ends
    with an error. A changed picture size after a reconnect is scaled to the pipeline's size.
    `describe()` gives the stream's rate over the run (outages left out) and the time from
    the server's answer to the first picture.

    Frames and sound are stamped by the stream's own timestamps, put on the capture clock
    (`StreamClock`). The stream's first audio track (any codec FFmpeg decodes), when it has
    one, is decoded to 48 kHz stereo s16 and put on `audio` (an AudioBus) stamped the same
    way, so the sound keeps the stream's own sync with the picture.
    """

    def __init__(self, url: str, transport: str = "tcp", open_timeout: float = 15.0,
                 read_timeout: float = 3.0, give_up_after: float = 60.0) -> None:
        self.url = url
        self.transport = transport
        self.open_timeout = open_timeout
        self.read_timeout = read_timeout
        self.give_up_after = give_up_after
        self.info: VideoInfo | None = None
        self.clock = CaptureClock()
        self.reconnects = 0
        self.outage_s = 0.0  # seconds without frames between a loss and its reconnect, in all
        self.wait_s = 0.0  # network waits count as decoding here: a stalled stream shows in decode time
        self._container: av.container.InputContainer | None = None
        self._frames: Iterator[av.VideoFrame] | None = None
        self._pending: av.VideoFrame | None = None
        self._last_frame_at = 0.0
        self._time_to_first: float | None = None  # seconds from the server's answer to the first picture
        self.first_note: str | None = None  # how long the first picture took, and why (one line)
        self.gop_s: float | None = None  # seconds between the stream's last two keyframes (its timestamps)
        self.rate = StreamRate()  # the stream's own rate, from its timestamps
        self._lost_since: float | None = None
        self._stalled = False
        self._pictures = SdrPictures()  # the YUV -> BGR conversion (HDR: tone-mapped)
        self.range_note: str | None = None  # an HDR camera: tone-mapped, and how (one line)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.audio = AudioBus()
        self._resampler: av.AudioResampler | None = None
        self.stream_clock = StreamClock()

    @property
    def name(self) -> str:
        return f"rtsp {redacted(self.url)!r}"

    def _demuxed(self, container: av.container.InputContainer, video: av.VideoStream,
                 join: Join) -> Iterator[av.VideoFrame]:
        """The video frames of `container`; its first audio track's frames go to `audio`.
        Until the first picture, each video packet is noted in `join` and the wait ends
        (TimeoutError) at its deadline; packets the decoder refuses then (a stream joined
        between keyframes: frames whose reference never came) are skipped, not an error."""
        self.stream_clock.reset()  # a new connection: a new stream clock
        sound = container.streams.audio[0] if container.streams.audio else None
        if sound is not None:
            self.audio.format = AudioFormat(LIVE_RATE, 2)
            self._resampler = live_resampler()
        pictured = False
        last_key: float | None = None
        for packet in container.demux(video, sound) if sound is not None else container.demux(video):
            if packet.stream is sound:
                self._on_audio(packet)
                continue
            if packet.is_keyframe and packet.pts is not None and packet.time_base is not None:
                key_time = float(packet.pts * packet.time_base)
                if last_key is not None and key_time > last_key:
                    self.gop_s = key_time - last_key
                last_key = key_time
            if pictured:
                yield from packet.decode()
                continue
            now = time.monotonic()
            if packet.size:
                join.saw(packet.is_keyframe, now)
            try:
                frames = packet.decode()
            except av.error.InvalidDataError:
                join.undecodable += 1
                frames = []
            if not frames and now > join.deadline():
                raise TimeoutError(join.failure())
            pictured = bool(frames)
            yield from frames

    def _on_audio(self, packet: av.Packet) -> None:
        try:
            frames = packet.decode()
        except (av.FFmpegError, ValueError) as exc:  # one bad audio packet must not end the video
            log.debug("%s: audio packet skipped: %s", self.name, exc)
            return
        assert self._resampler is not None
        now = time.monotonic()
        for frame in frames:
            stream_time = frame.time
            for piece in live_pieces(self._resampler, frame):
                self.audio.push(self.stream_clock.sound(stream_time, now), piece)
                if stream_time is not None:
                    stream_time += piece.shape[1] / 2 / LIVE_RATE

    def _error(self, what: str) -> SourceError:
        return SourceError(f"{self.name}: {what}")

    def _open_container(self, join: Join) -> _Opened:
        """Connect, find the video and decode its first frame (in the connect thread)."""
        # No "fflags nobuffer": with it the packets read while the stream is analysed are
        # thrown away, and joining a stream already playing, the analysis waits for the first
        # keyframe (the picture's size comes with it) and drops it: the first picture then
        # came at the second keyframe, 9-11 s after connecting with keyframes 6 s apart,
        # against 1.7-4.6 s at the first one without it (tools/rtsp_join.py). The analysis
        # reads 0.1 s of stream, not 1 s: each reconnect waited for that second, and then
        # handed the pipeline a second's frames at once (0.95 -> 0.3 s after the server's return).
        options = {"rtsp_transport": self.transport, "flags": "low_delay",
                   "max_delay": "0", "analyzeduration": "100000", "probesize": "500000"}
        timeout = max(join.deadline() - time.monotonic(), 0.1)  # the server may hold its answer until a keyframe
        container = av.open(self.url, "r", options=options, timeout=(timeout, self.read_timeout))
        join.answered = time.monotonic()
        try:
            if not container.streams.video:
                raise SourceError(f"{self.name}: has no video stream")
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            stream.codec_context.flags |= av.codec.context.Flags.low_delay
            frames = self._demuxed(container, stream, join)
            first = next(frames)
        except BaseException:
            close_quietly(container)
            raise
        return container, frames, first

    def _connect(self, join: Join) -> None:
        """Connect and decode the first picture within `join`'s deadline (which moves as
        the stream shows its keyframe interval), waiting so that Ctrl-C and stop() end it
        at once (`Cancelled`); a connect given up on is closed when it returns."""
        join.attempts += 1
        container, frames, first = wait_for_call(
            lambda: self._open_container(join), join.longest() - time.monotonic() + 1.0, self._stop,
            discard=lambda opened: close_quietly(opened[0]), name="fs-rtsp-connect")
        self._container, self._frames, self._pending = container, frames, first
        self.rate.new_connection()

    def _disconnect(self) -> None:
        container, self._container, self._frames = self._container, None, None
        if container is not None:
            close_quietly(container)

    def _ask_server(self, timeout: float) -> bytes:
        """The server's first answer to an OPTIONS request (stream.media.rtsp.server_answer),
        waited for so that Ctrl-C and stop() end it at once (`Cancelled`); b"" for silence."""
        try:
            return wait_for_call(lambda: server_answer(self.url, timeout), timeout + 1.0, self._stop,
                                 name="fs-rtsp-probe")
        except TimeoutError:
            return b""
        except OSError as exc:
            if isinstance(exc, ConnectionRefusedError | socket.gaierror):
                raise
            return b""  # unreachable, reset, timed out: not there yet

    def _reach(self, deadline: float) -> None:
        """Wait until the server answers, within `deadline` (time.monotonic()): at once a
        one-line SourceError for a refused connection, an unknown host or another kind of
        server; after the deadline, for silence."""
        attempt = 0
        while (left := deadline - time.monotonic()) > 0.05:
            try:
                answer = self._ask_server(min(PROBE_TIMEOUT_S, max(left, 0.1)))
            except ConnectionRefusedError:
                raise self._error("connection refused (no server listens on that port)") from None
            except socket.gaierror as exc:
                raise self._error(f"cannot find the server ({exc.strerror or exc})") from None
            if answer.startswith(b"RTSP/"):
                return
            if answer:
                raise self._error(f"not an RTSP server (it answered {_shown_answer(answer)})")
            if self._stop.wait(min(backoff_delay(attempt, PROBE_S), max(deadline - time.monotonic(), 0))):
                raise Cancelled()
            attempt += 1
        raise self._error(f"no answer within {self.open_timeout:g} s")

    def open(self) -> VideoInfo:
        """Connect: the server must answer within `open_timeout`; then, from that moment,
        the first picture must come within two keyframe intervals and at least
        `open_timeout` (stream.media.rtsp.Join: a stream joined between keyframes shows its
        first picture at the next one, and a join may miss one). `first_note` says how long
        it took and why (`live` prints it)."""
        try:
            self._reach(time.monotonic() + self.open_timeout)
        except Cancelled:
            raise StopRequested(f"{self.name}: stopped while connecting") from None
        connected = time.monotonic()
        join = Join(connected, self.open_timeout, self.gop_s)
        last = waiting = ""  # "": no picture in time (join.failure(), known at the end)
        attempt = 0
        while (left := join.deadline() - time.monotonic()) > 0.05:
            tried = time.monotonic()
            try:
                self._connect(join)
                break
            except Cancelled:
                raise StopRequested(f"{self.name}: stopped while connecting") from None
            except TimeoutError:  # FFmpeg's own timeout did not end it: the same wait
                last = waiting
            except (av.FFmpegError, OSError, StopIteration) as exc:
                refused = refusal_of(exc, has_credentials(self.url))
                if refused is not None:
                    raise self._error(refused) from None
                waited = time.monotonic() - tried
                if isinstance(exc, av.error.InvalidDataError) and waited < left - 0.5:
                    # An answer at once, and not one FFmpeg can read: another protocol's server.
                    raise self._error(f"not an RTSP server, or not a stream we can read ({reason_of(exc)})") from None
                if not isinstance(exc, StopIteration):
                    last = reason_after(exc, waited, left, waiting)
                else:
                    last = "the stream ended at once"
            if self._stop.wait(min(backoff_delay(attempt, PROBE_S), max(join.deadline() - time.monotonic(), 0))):
                raise StopRequested(f"{self.name}: stopped while connecting")
            attempt += 1
        if self._frames is None or self._pending is None:
            if last == waiting:
                raise self._error(join.failure())
            raise self._error(f"cannot connect within {join.wait():.3g} s ({last})")
        first = self._pending
        self._last_frame_at = time.monotonic()
        self._time_to_first = self._last_frame_at - connected
        self.first_note = join.note(self._last_frame_at)
        log.info("%s: %s", self.name, self.first_note)  # `live` prints it as a note
        stream = self._container.streams.video[0]  # type: ignore[union-attr]
        rate = stream.average_rate or stream.guessed_rate
        self.info = VideoInfo(first.width, first.height, Fraction(rate or 30), VIDEO_TIME_BASE)
        if self._pictures.prepare(first, first.width, first.height) is not None:
            self.range_note = self._pictures.note
        return self.info

    def _reconnect(self, why: str) -> bool:
        """After a loss: ask the server every 0.1-0.5 s whether it is back (PROBE_S), and
        connect as soon as it answers, waiting for its first picture as `open()` does;
        False when stopped meanwhile, a SourceError after `give_up_after` seconds."""
        self._disconnect()
        self._lost_since = self._last_frame_at or time.monotonic()
        log.warning("%s: %s; reconnecting", self.name, why)
        started = time.monotonic()
        attempt = 0
        while not self._stop.is_set():
            waited = time.monotonic() - started
            if waited > self.give_up_after:
                raise self._error(f"lost for {waited:.0f} s, giving up ({why})")
            if attempt and self._stop.wait(backoff_delay(attempt - 1, PROBE_S)):
                return False
            attempt += 1
            try:
                if not self._ask_server(PROBE_TIMEOUT_S).startswith(b"RTSP/"):
                    continue
                self._connect(Join(time.monotonic(), self.open_timeout, self.gop_s))
            except Cancelled:
                return False
            except TimeoutError:
                continue
            except (av.FFmpegError, OSError, StopIteration) as exc:
                why = ("the stream ended" if isinstance(exc, StopIteration) else
                       reason_after(exc, 0.0, self.open_timeout, "no picture"))
                log.debug("%s: reconnect failed (%s)", self.name, why)
                continue
            now = time.monotonic()
            self.reconnects += 1
            self.outage_s += now - self._lost_since
            self._lost_since = None
            log.warning("%s: reconnected after %.1f s", self.name, now - started)
            return True
        return False

    def read_into(self, slot: Slot) -> bool:
        with self._lock:  # close() from another thread waits for a read in progress
            return self._read_into(slot)

    def _read_into(self, slot: Slot) -> bool:
        if self.info is None:
            raise self._error("read before open()")
        while True:
            if self._stop.is_set():
                return False
            if self._stalled:
                self._stalled = False
                if not self._reconnect(f"no frames for {self.read_timeout:g} s"):
                    return False
            frame = self._pending
            self._pending = None
            if frame is None:
                reading = time.monotonic()
                assert self._frames is not None  # open() or the last reconnect left a connection
                try:
                    frame = next(self._frames)
                except StopIteration:
                    if not self._reconnect("stream dropped: the server ended the stream"):
                        return False
                    continue
                except (av.FFmpegError, OSError) as exc:
                    if self._stop.is_set():
                        return False
                    silent = f"no frames for {self.read_timeout:g} s"
                    why = reason_after(exc, time.monotonic() - reading, self.read_timeout, silent)
                    if why != silent:
                        why = f"stream dropped: {why}"
                    if not self._reconnect(why):
                        return False
                    continue
                # After a silence FFmpeg's read timeout ends, the frame its parser still held
                # comes out first, and only the next read fails: the silence is known now.
                self._stalled = time.monotonic() - reading >= self.read_timeout
                self._last_frame_at = reading if self._stalled else time.monotonic()
            else:
                self._last_frame_at = time.monotonic()
            image = slot.buffers["image"]
            self._pictures.convert(frame, image)  # scales a stream that changed size
            now = time.monotonic()
            self.rate.frame(frame.time, now)
            self.clock.stamp(slot, now if frame.time is None else self.stream_clock.video(frame.time, now))
            return True

    def stop(self) -> None:
        """From any thread: end a connect, a reconnect or a read as soon as it can."""
        self._stop.set()

    def close(self) -> None:
        self._stop.set()
        # A read in progress ends within the read timeout (a connect or a backoff wait, at once).
        if self._lock.acquire(timeout=self.read_timeout + 2.0):
            try:
                self._disconnect()
            finally:
                self._lock.release()

    def input_fps(self) -> float:
        """The stream's own rate over the run (StreamRate: its timestamps, outages and each
        connection's first second left out). The last second's rate, which the status line
        shows, read 5.3 fps for a 30 fps stream at the end of a run with reconnects."""
        fps = self.rate.fps(self.outage_s)
        return self.clock.measured_fps if fps is None else fps

    def describe(self) -> dict[str, object]:
        outage = self.outage_s
        if self._lost_since is not None:
            outage += time.monotonic() - self._lost_since
        out: dict[str, object] = {"input": self.name, "measured_fps": round(self.input_fps(), 2),
                                  "reconnects": self.reconnects, "outage_s": round(outage, 3)}
        if self._time_to_first is not None:
            out["first_picture_s"] = round(self._time_to_first, 3)
            out["first_picture"] = self.first_note
        if self.gop_s is not None:
            out["keyframe_interval_s"] = round(self.gop_s, 3)
        if self.audio.format is not None:
            out["audio_frames"] = self.audio.frames
        return out


def _shown_answer(answer: bytes) -> str:
    """The first line of a server's answer, for a message: printable, at most 40 characters."""
    line = answer.split(b"\r\n", 1)[0].split(b"\n", 1)[0].decode("latin-1")
    line = "".join(c for c in line if c.isprintable())[:40]
    return repr(line)
