"""Audio on the live RTSP path, in sync: a camera with a microphone (H.264 + Opus, a white
flash and a beep starting on the same frame once a second) publishes to GStreamer's RTSP
server; `live` pulls it, swaps and publishes it back with its sound, and records it. An
independent reader (FFmpeg's RTSP client) and the recording are read back: the beeps land
within one frame interval of their flashes.

The bound is one frame interval (33 ms) plus 17 ms: the relay stamps every buffer with its
arrival (not the publisher's timestamps), and on a loaded 2-core machine single packets
were seen up to 25 ms late through the relay alone (with no pipeline in between, the
offsets were 12-14 ms: Opus's 6.5 ms encoder look-ahead, uncompensated over RTP, twice).
The median over the flashes read rules out one late packet deciding the result."""
from __future__ import annotations

import statistics
import threading
from pathlib import Path

import av
import pytest

from stream.cli.main import main
from tests.fixtures import FlashBeepPublisher, SyncDetector, read_rtsp_sync
from tests.fixtures.rtsp import Relay, running_relay
from tests.fixtures.serving import live_whep_process

pytestmark = pytest.mark.slow  # live runs whose sound and pictures are timed for seconds

FRAME_S = 1 / 30
BOUND_S = FRAME_S + 0.017


@pytest.fixture
def relay() -> Relay:
    with running_relay(["cam", "out"], ("--audio",)) as server:
        yield server


def _whep_sync(url: str, seconds: float, while_listening=None):  # type: ignore[no-untyped-def]
    """A WHEP viewer (asking for sound) of `url`: its flashes and beeps read for `seconds`
    (tools.webrtc_sync); `while_listening()` is called before the viewer leaves."""
    import asyncio

    from stream.server.whip_client import whep_view
    from tools.webrtc_sync import read_webrtc_sync

    async def watch() -> object:
        viewer = await whep_view(url, audio=True)
        try:
            video = await asyncio.wait_for(viewer.remote, 30)
            assert viewer.remote_audio is not None
            audio = await asyncio.wait_for(viewer.remote_audio, 30)
            got = await read_webrtc_sync(viewer.pc, video, audio, seconds)
            if while_listening is not None:
                while_listening()
            return got
        finally:
            await viewer.close()

    return asyncio.run(watch())


def _file_offsets(path: Path) -> list[float]:
    detector = SyncDetector()
    with av.open(str(path)) as container:
        assert container.streams.audio, f"{path} has no audio stream"
        for frame in container.decode(container.streams.video[0], container.streams.audio[0]):
            if frame.time is None:
                continue
            if isinstance(frame, av.VideoFrame):
                detector.video(frame.time, frame.to_ndarray(format="gray"))
            else:
                detector.audio(frame.time, frame.to_ndarray(), frame.sample_rate)
    return detector.reading.offsets()


def test_a_flash_whose_first_frames_were_dropped_still_gives_its_start(tmp_path: Path) -> None:
    """A busy live path drops frames (latest-frame semantics): of each flash it may deliver
    only the later frames, and each says how far into the flash it is."""
    from tools.av_sync import FLASH_FRAMES, FPS, write_flash_beep_clip

    clip = tmp_path / "flash_beep.mp4"
    write_flash_beep_clip(str(clip), 5.0)
    detector = SyncDetector()
    with av.open(str(clip)) as container:
        for frame in container.decode(container.streams.video[0], container.streams.audio[0]):
            if isinstance(frame, av.VideoFrame):
                n = round(frame.time * FPS)
                # Second s of the clip delivers its flash from the flash's frame s on.
                if frame.time >= 1.0 and 0 <= n % FPS - 10 < min(int(frame.time), FLASH_FRAMES - 1):
                    continue
                detector.video(frame.time, frame.to_ndarray(format="gray"))
            else:
                detector.audio(frame.time, frame.to_ndarray(), frame.sample_rate)
    got = detector.reading
    assert got.flashes == pytest.approx([s + 10 / FPS for s in range(5)], abs=1e-6), got.flashes
    offsets = got.offsets()
    assert len(offsets) == 5 and max(abs(o) for o in offsets) < 0.005, offsets  # AAC's frames: ~1 ms


def test_rtsp_sound_reaches_rtsp_out_and_the_recording_in_sync(relay: Relay, source_photo: Path,
                                                               tmp_path: Path) -> None:
    publisher = FlashBeepPublisher(relay.url("cam/push"))
    publisher.start()
    reading: dict[str, object] = {}
    stop = threading.Event()

    def read() -> None:
        reading["out"] = read_rtsp_sync(relay.url("out"), 11.0, stop)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    record = tmp_path / "rec.mp4"
    try:
        code = main(["live", "--source", str(source_photo), "--input", relay.url("cam"),
                     "--output", relay.url("out/push"), "--record", str(record), "--duration", "17", "-q"])
        assert code == 0
        reader.join(40)
    finally:
        stop.set()
        publisher.stop()
    out = reading["out"]
    offsets = out.offsets(skip_s=1.0)  # type: ignore[attr-defined]
    assert len(offsets) >= 4, (  # type: ignore[attr-defined]
        f"read back {out.frames} frames: flashes {out.flashes}, beeps {out.beeps}; last error: {out.error}")
    assert abs(statistics.median(offsets)) <= BOUND_S, f"RTSP out: beep - flash offsets {offsets}"
    recorded = _file_offsets(record)
    assert len(recorded) >= 5, f"recording: offsets {recorded}"
    assert abs(statistics.median(recorded)) <= BOUND_S, f"recording: beep - flash offsets {recorded}"


def test_rtsp_sound_reaches_live_whep_viewers_in_sync(relay: Relay, source_photo: Path, loopback_ice: None) -> None:
    """`live --output whep`: an aiortc WHEP viewer offering to receive sound hears the RTSP
    camera's beeps with their flashes, timed as tools/webrtc_sync does (each frame by its
    first RTP packet's arrival, so the receiver's own unequal holds do not count).

    The camera read directly gives +14-15 ms. Sound sent in 10 ms pieces as each came due
    gave +39-50 ms (aiortc's encoder sends a 20 ms packet once its second piece is there,
    and a receiver plays a packet from its arrival); sent in whole packets timed by their
    first sample, pictures and sound both leaving at capture + D: +15-28 ms."""


    publisher = FlashBeepPublisher(relay.url("cam/push"))
    publisher.start()
    try:
        with live_whep_process(source_photo, relay.url("cam"), "--duration", "14", "--quiet") as (proc, url):
            reading = _whep_sync(f"{url}whep", 7.0)
            out, err = proc.communicate(timeout=60)
    finally:
        publisher.stop()
    assert proc.returncode == 0, err
    offsets = reading.offsets(skip_s=1.0)  # type: ignore[attr-defined]
    assert len(offsets) >= 4, f"WHEP viewer: flashes {reading.flashes}, beeps {reading.beeps}"  # type: ignore[attr-defined]
    assert abs(statistics.median(offsets)) <= BOUND_S, f"WHEP viewer: beep - flash offsets {offsets}"


class LateSoundCamera(threading.Thread):
    """The flash-and-beep clip as a live source hands it to a sink: a picture written as it
    is captured (30 fps), and its sound in 10 ms pieces stamped with their capture times but
    put on the bus `late_s` after each piece ended, as a camera that sends its sound only
    after recording it (and often after its pictures) delivers it."""

    def __init__(self, sink: object, bus: object, late_s: float, seconds: float) -> None:
        super().__init__(daemon=True)
        self.sink, self.bus, self.late_s, self.seconds = sink, bus, late_s, seconds
        self.stop_event = threading.Event()

    def run(self) -> None:
        import time

        import numpy as np

        from stream.runtime.slot import Slot
        from tools.av_sync import RATE, beep_samples, flash_frame

        piece = RATE // 100
        slot = Slot(0, {"image": flash_frame(0)})
        start = time.monotonic() + 0.05
        n = k = 0
        while not self.stop_event.is_set() and n < self.seconds * 30:
            frame_at, piece_due = start + n / 30, start + (k + 1) * piece / RATE + self.late_s
            now = time.monotonic()
            if frame_at <= piece_due:
                if frame_at > now:
                    self.stop_event.wait(frame_at - now)
                slot.buffers["image"] = flash_frame(n)
                slot.seq, slot.pts, slot.capture_time = n, n * 3000, frame_at
                self.sink.write(slot)  # type: ignore[attr-defined]
                n += 1
            else:
                if piece_due > now:
                    self.stop_event.wait(piece_due - now)
                mono = (beep_samples(k * piece, piece) * 32767).astype(np.int16)
                self.bus.push(start + k * piece / RATE, np.repeat(mono, 2).reshape(1, -1))  # type: ignore[attr-defined]
                k += 1


@pytest.mark.usefixtures("loopback_ice")
def test_whep_viewers_hear_a_camera_whose_sound_comes_after_its_pictures_in_step() -> None:
    """A live source whose sound reaches us 60 ms after it ended (after its pictures): the
    WHEP output holds the pictures back by that much (plus one Opus packet), so a viewer
    gets the beeps with their flashes; sent as they came, the beeps were 70-90 ms late."""

    from stream.media.audio_delay import AudioBus, AudioFormat
    from stream.server.whep_output import WhepOutput

    bus = AudioBus()
    bus.format = AudioFormat(48000, 2)
    out = WhepOutput(320, 240, port=0, sound=bus)
    out.open()
    camera = LateSoundCamera(out, bus, late_s=0.06, seconds=30)
    camera.start()
    try:
        holds: list[float] = []  # read while the viewer listens
        reading = _whep_sync(f"{out.url}whep", 6.0, lambda: holds.append(out.video_hold_s))
        (hold,) = holds
    finally:
        camera.stop_event.set()
        camera.join(5)
        out.close()
    offsets = reading.offsets(skip_s=1.0)  # type: ignore[attr-defined]
    assert len(offsets) >= 3, f"WHEP viewer: flashes {reading.flashes}, beeps {reading.beeps}"  # type: ignore[attr-defined]
    assert abs(statistics.median(offsets)) <= BOUND_S, f"WHEP viewer: beep - flash offsets {offsets}"
    # The pictures waited for their sound: about its lateness, one packet and the look-ahead.
    assert 0.06 < hold < 0.2, hold


def test_a_clip_played_as_the_camera_gives_whep_viewers_its_sound_in_sync(source_photo: Path, tmp_path: Path,
                                                                          loopback_ice: None) -> None:
    """`live --input clip.mp4 --output whep`: the clip's own sound (AAC) reaches a WHEP viewer
    with its pictures, as an RTSP camera's does."""

    from tools.av_sync import write_flash_beep_clip

    clip = tmp_path / "flash_beep.mp4"
    write_flash_beep_clip(str(clip), 12.0)
    with live_whep_process(source_photo, str(clip), "--quiet") as (proc, url):
        reading = _whep_sync(f"{url}whep", 6.0)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    offsets = reading.offsets(skip_s=1.0)  # type: ignore[attr-defined]
    assert len(offsets) >= 3, f"WHEP viewer: flashes {reading.flashes}, beeps {reading.beeps}"  # type: ignore[attr-defined]
    assert abs(statistics.median(offsets)) <= BOUND_S, f"WHEP viewer: beep - flash offsets {offsets}"


def test_rtsp_frames_and_sound_are_stamped_on_the_streams_own_clock() -> None:
    """A frame read 40 ms late (a busy machine, the network) is stamped when it was due, by
    the stream's timestamps, and the sound between with it: their offset is the stream's,
    not how late each was read. The offset follows the frame that reached us soonest."""
    from stream.sources.rtsp import StreamClock

    clock = StreamClock()
    assert clock.sound(5.0, 99.0) == 99.0  # before any picture: when it came
    assert clock.video(0.0, 100.0) == 100.0
    late = clock.video(1 / 30, 100.0 + 1 / 30 + 0.04)
    assert abs(late - (100.0 + 1 / 30)) < 1e-9
    assert abs(clock.sound(1 / 30 + 0.01, 100.2) - (100.0 + 1 / 30 + 0.01)) < 1e-9
    assert abs(clock.video(2 / 30, 100.0 + 2 / 30 - 0.005) - (100.0 + 2 / 30 - 0.005)) < 1e-9  # sooner: the new offset
    clock.reset()
    assert clock.sound(0.5, 7.0) == 7.0


def test_the_playout_delay_covers_the_slow_pictures_and_late_sound() -> None:
    """D is the 90th percentile of the pictures' recent latency (a slow picture every tenth
    does not leave after its sound), raised to what late sound needs, bounded."""
    from stream.media.audio_delay import PlayoutDelay

    delay = PlayoutDelay(max_s=0.5)
    for i in range(30):
        delay.frame(0.060 if i % 5 == 0 else 0.020)  # one picture in five takes 60 ms
    assert abs(delay.seconds() - 0.060) < 1e-9
    delay.at_least = 0.2
    assert delay.seconds() == 0.2
    delay.at_least = 3.0
    assert delay.seconds() == 0.5
