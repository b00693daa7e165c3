"""Audio-video sync, measured on what a live path delivers: a clip with a white flash and a
1 kHz beep starting on the same frame once a second, published live, and a reader that
finds each flash and each beep onset in the output's own timestamps.

The offset of a pair is beep onset minus flash (positive: the sound is late). Flash frames
carry no face, so a swap leaves them as they are. A flash lasts FLASH_FRAMES frames, and
each of them says which it is (frame k of a flash is white but for a dark band, the k-th
of FLASH_FRAMES from the top): a live path that drops frames on a busy machine (latest-
frame semantics) drops a one-frame flash too, while the first frame of a flash it does
deliver, less k frame times, still gives the flash's start. Used by the tests (tests.fixtures) and by
tools/bench_live.py.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction

import av
import numpy as np

FPS = 30
RATE = 48000
PERIOD = FPS  # one flash (and beep) a second
FLASH_AT = 10  # the frame of each second that a flash starts on
FLASH_FRAMES = 5  # frames a flash lasts
BEEP_HZ = 1000.0
SIZE = (320, 240)


DARK = 40


def flash_index(i: int) -> int | None:
    """Which frame of its flash frame `i` of the clip is (0 the first), None for a dark one."""
    k = i % PERIOD - FLASH_AT
    return k if 0 <= k < FLASH_FRAMES else None


def flash_frame(i: int, width: int = SIZE[0], height: int = SIZE[1]) -> np.ndarray:
    """Frame `i` of the clip (BGR): dark grey, or frame k of a flash: white with the k-th of
    FLASH_FRAMES bands from the top dark."""
    k = flash_index(i)
    if k is None:
        return np.full((height, width, 3), DARK, np.uint8)
    picture = np.full((height, width, 3), 255, np.uint8)
    picture[k * height // FLASH_FRAMES:(k + 1) * height // FLASH_FRAMES] = DARK
    return picture


def frames_into_flash(picture: np.ndarray) -> int:
    """Which frame of a flash a lit `picture` (grey or colour) is: its darkest band."""
    bands = np.array_split(picture, FLASH_FRAMES, axis=0)
    return int(np.argmin([float(band.mean()) for band in bands]))


def beep_samples(start: int, count: int) -> np.ndarray:
    """Samples `start`..`start+count` of the sound (float32, mono): silence, and a beep one
    frame long starting exactly when each flash does."""
    n = np.arange(start, start + count)
    t = n / RATE
    frame = np.floor(t * FPS).astype(np.int64)
    on = (frame % PERIOD) == FLASH_AT
    return (on * 0.5 * np.sin(2 * np.pi * BEEP_HZ * t)).astype(np.float32)



def _mux_frame_time(out, video, sound, n: int, audio_at: int, chunk: int) -> int:  # type: ignore[no-untyped-def]
    """Encodes and muxes frame `n` and the sound of its frame time, in pieces of `chunk`
    samples from sample `audio_at`; returns where the sound now stands."""
    frame = av.VideoFrame.from_ndarray(flash_frame(n), format="bgr24")
    frame.pts, frame.time_base = n, Fraction(1, FPS)
    for packet in video.encode(frame):
        out.mux(packet)
    while audio_at < (n + 1) * RATE // FPS:
        samples = beep_samples(audio_at, chunk).reshape(1, -1)
        af = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
        af.sample_rate, af.pts, af.time_base = RATE, audio_at, Fraction(1, RATE)
        for packet in sound.encode(af):
            out.mux(packet)
        audio_at += chunk
    return audio_at

def write_flash_beep_clip(path: str, seconds: float, audio_codec: str = "aac") -> None:
    """The clip as a file (H.264 + `audio_codec`, 30 fps): a camera with a microphone
    recorded, to play as a live input."""
    with av.open(path, "w") as out:
        video = out.add_stream("libx264", rate=FPS)
        video.width, video.height, video.pix_fmt = SIZE[0], SIZE[1], "yuv420p"
        video.options = {"preset": "ultrafast", "g": str(FPS)}
        sound = out.add_stream(audio_codec, rate=RATE)
        sound.layout = "mono"
        chunk = 1024
        audio_at = 0
        for n in range(round(seconds * FPS)):
            audio_at = _mux_frame_time(out, video, sound, n, audio_at, chunk)
        for stream in (video, sound):
            for packet in stream.encode(None):
                out.mux(packet)


class FlashBeepPublisher(threading.Thread):
    """Pushes the flash-and-beep clip live (H.264 + Opus, real time) to an RTSP server's
    RECORD url, for `seconds` or until stopped: a camera with a microphone."""

    def __init__(self, url: str, seconds: float = 3600.0) -> None:
        super().__init__(daemon=True, name="av-sync-publisher")
        self.url, self.seconds = url, seconds
        self.stop_event = threading.Event()
        self.sent = 0
        self.error: str | None = None

    def run(self) -> None:
        try:
            out = av.open(self.url, "w", format="rtsp", options={"rtsp_transport": "tcp"}, timeout=(5, 5))
        except (av.FFmpegError, OSError) as exc:
            self.error = str(exc)
            return
        try:
            video = out.add_stream("libx264", rate=FPS)
            video.width, video.height, video.pix_fmt = SIZE[0], SIZE[1], "yuv420p"
            video.options = {"preset": "ultrafast", "tune": "zerolatency", "g": str(FPS), "bf": "0",
                             "threads": "1"}
            sound = out.add_stream("libopus", rate=RATE)
            sound.layout = "mono"
            sound.options = {"application": "lowdelay", "frame_duration": "20"}
            chunk = RATE // 50
            t0 = time.monotonic()
            n = 0
            audio_at = 0
            while not self.stop_event.is_set() and n < self.seconds * FPS:
                audio_at = _mux_frame_time(out, video, sound, n, audio_at, chunk)
                n += 1
                self.sent = n
                delay = t0 + n / FPS - time.monotonic()
                if delay > 0:
                    self.stop_event.wait(delay)
        except (av.FFmpegError, OSError) as exc:
            self.error = str(exc)
        finally:
            try:
                out.close()
            except (av.FFmpegError, OSError):
                pass

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)


@dataclass
class SyncReading:
    """Flash times and beep onsets (seconds, the output's timestamps), paired."""

    flashes: list[float] = field(default_factory=list)
    beeps: list[float] = field(default_factory=list)
    frames: int = 0  # video and audio frames read (a reader that got none says why: `error`)
    error: str | None = None  # the last failure to open or read the stream, if any

    def offsets(self, skip_s: float = 0.0) -> list[float]:
        """Beep minus flash for each flash after `skip_s` with a beep within half a period."""
        out = []
        start = self.flashes[0] + skip_s if self.flashes else 0.0
        for flash in self.flashes:
            if flash < start or not self.beeps:
                continue
            beep = min(self.beeps, key=lambda b: abs(b - flash))
            if abs(beep - flash) < PERIOD / FPS / 2:
                out.append(beep - flash)
        return out


class SyncDetector:
    """Finds flashes (mean brightness rising past mid-grey; the start is the first lit
    frame's time less the frames it is into its flash) and beep onsets (the first sample, in
    1 ms steps, whose loudness rises past a quarter of the beep's) in frames fed in the
    order read."""

    def __init__(self) -> None:
        self.reading = SyncReading()
        self._lit = False
        self._loud = False

    def video(self, when: float, picture: np.ndarray) -> None:
        lit = float(picture.mean()) > 128
        if lit and not self._lit:
            self.reading.flashes.append(when - frames_into_flash(picture) / FPS)
        self._lit = lit

    def audio(self, when: float, samples: np.ndarray, rate: int) -> None:
        """`samples`: (channels, n) or interleaved (1, n * channels) float or int."""
        mono = np.abs(samples.astype(np.float32)).max(axis=0)
        if samples.dtype.kind == "i":
            mono /= 32768.0
        step = max(1, rate // 1000)
        for i in range(0, len(mono) - step + 1, step):
            loud = float(mono[i:i + step].max()) > 0.12
            if loud and not self._loud:
                self.reading.beeps.append(when + i / rate)
            self._loud = loud


OPEN_TIMEOUT_S = 8.0


def read_rtsp_sync(url: str, seconds: float, stop: threading.Event | None = None,
                   wait_s: float = 30.0) -> SyncReading:
    """Read `url` (video + audio) with FFmpeg's RTSP client for `seconds` from the first
    frame (waiting up to `wait_s` for the stream to be there) and find the flashes and
    beeps in its timestamps."""
    detector = SyncDetector()
    end = time.monotonic() + wait_s + seconds
    while time.monotonic() < end and not (stop and stop.is_set()):
        try:
            # A relay answers a DESCRIBE once the stream's next keyframe is there: 2 s apart
            # at full rate, longer when a loaded sender drops frames. A shorter open timeout
            # gave up on every try for a whole run on a loaded 2-core machine.
            container = av.open(url, options={"rtsp_transport": "tcp"}, timeout=(OPEN_TIMEOUT_S, 3))
        except (av.FFmpegError, OSError) as exc:
            detector.reading.error = f"open: {exc}"
            time.sleep(0.3)
            continue
        try:
            if not container.streams.audio or not container.streams.video:
                container.close()
                time.sleep(0.3)
                continue
            end = time.monotonic() + seconds
            got = 0
            for frame in container.decode(container.streams.video[0], container.streams.audio[0]):
                if frame.time is None:
                    continue
                got += 1
                detector.reading.frames += 1
                if isinstance(frame, av.VideoFrame):
                    detector.video(frame.time, frame.to_ndarray(format="gray"))
                else:
                    interleaved = frame.format.is_packed
                    samples = frame.to_ndarray()
                    if interleaved:
                        samples = samples.reshape(-1, len(frame.layout.channels)).T
                    detector.audio(frame.time, samples, frame.sample_rate)
                if time.monotonic() >= end or (stop and stop.is_set()):
                    break
        except (av.FFmpegError, OSError) as exc:
            detector.reading.error = f"read after {got} frames: {exc}"
        finally:
            container.close()
        if got:  # read until the end: done; a stream not flowing yet: try again
            break
    return detector.reading
