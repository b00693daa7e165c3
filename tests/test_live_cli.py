"""`facestream live` as a user and a service manager meet it: stopped by SIGTERM, SIGHUP or
Ctrl-C (also while it is still loading), its recording (constant rate, the clip's sound in
step), the honest figures (frames a sink dropped are not "out", faces on screen), the
measured rate of a clip played as a camera, and log lines that never run into the status
line. Real processes, signals, codecs, a pseudo-terminal and GStreamer's RTSP server."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np
import pytest

from stream.cli.main import main
from stream.config import load_config
from stream.job.assembly import Pipeline
from stream.job.runs import run_live
from stream.job.status import StatusLine, format_live_summary, format_status
from stream.job.swap_job import SwapJob
from stream.media.demo_clips import pan_zoom_frames, single_face_picture, write_clip
from stream.runtime.slot import Slot
from stream.sinks.fanout import FanoutSink
from stream.sources.capture import WebcamSource
from stream.sources.open import open_source
from tests.fixtures import probe
from tests.fixtures.rtsp import Relay, free_port, require_relay

pytestmark = pytest.mark.slow  # live runs of the CLI, each seconds long

ROOT = Path(__file__).resolve().parents[1]
FPS = 30
SIZE = (640, 360)
FLASHES = (1.0, 2.0, 3.0)  # seconds: a white bar on the picture and a beep on the sound
# The bar stays BAR_FRAMES frames, frame k of them with the k-th of BAR_FRAMES pieces of it
# dark: a live run on a busy machine drops frames, the first of the bar's among them, and
# the first it keeps still tells when the bar came.
BAR_FRAMES = 6


def _bar_frame(i: int) -> int | None:
    """Which frame of a bar frame `i` of the clip shows (0 the first), None for no bar."""
    for s in FLASHES:
        if 0 <= i - round(s * FPS) < BAR_FRAMES:
            return i - round(s * FPS)
    return None


def _flash_frames(seconds: float) -> Iterator[np.ndarray]:
    picture, centre = single_face_picture()
    n = round(seconds * FPS)
    for i, frame in enumerate(pan_zoom_frames(picture, n, SIZE, zoom=(1.8, 2.0), centre=centre, sweep=40.0)):
        k = _bar_frame(i)
        if k is not None:
            frame[:40] = 255
            frame[:40, k * SIZE[0] // BAR_FRAMES:(k + 1) * SIZE[0] // BAR_FRAMES] = 0
        yield frame


def _beeps(t: np.ndarray) -> np.ndarray:
    on = np.zeros_like(t, dtype=bool)
    for s in FLASHES:
        on |= (t >= s) & (t < s + 0.1)
    return np.where(on, 0.5 * np.sin(2 * np.pi * 1000 * t), 0.0)


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """8 s, one face, a 440 Hz tone: long enough to be stopped in the middle."""
    from stream.media.demo_clips import make_single_face_clip

    path = tmp_path_factory.mktemp("live_cli") / "camera.mp4"
    make_single_face_clip(path, seconds=8.0, fps=FPS, size=SIZE)
    return path


@pytest.fixture(scope="module")
def sync_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 s, one face; at 1, 2 and 3 s a white bar on the picture and a beep, together."""
    path = tmp_path_factory.mktemp("live_sync") / "flashes.mp4"
    write_clip(path, _flash_frames(4.0), fps=FPS, tone=_beeps)
    return path


def _cli(*args: str, stderr: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "stream.cli", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=stderr)


class Lines(threading.Thread):
    """Collects a pipe's lines; `wait_for` a line that matches."""

    def __init__(self, pipe) -> None:
        super().__init__(daemon=True)
        self.pipe, self.lines = pipe, []
        self._new = threading.Condition()

    def run(self) -> None:
        for line in self.pipe:
            with self._new:
                self.lines.append(line)
                self._new.notify_all()

    def wait_for(self, pattern: str, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        with self._new:
            while not any(re.search(pattern, line) for line in self.lines):
                if not self.is_alive() or time.monotonic() > deadline:
                    return False
                self._new.wait(0.2)
        return True

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _partials(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if ".partial" in p.name]


def _ffprobe(path: Path) -> dict[str, str]:
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=r_frame_rate,avg_frame_rate,nb_frames", "-of", "default=nw=1", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return dict(line.split("=", 1) for line in out.split())


def _ffmpeg_warnings(path: Path) -> str:
    return subprocess.run(["ffmpeg", "-v", "warning", "-i", str(path), "-f", "null", "-"],
                          capture_output=True, text=True).stderr.strip()


def _grid(stdout: str, path: Path) -> int:
    """Frames the recording at `path` holds beyond those delivered: frame times that held the
    picture before, less frames left out (two in one frame time), as its note says."""
    found = re.search(re.escape(f"note: {path}: ") + r"recorded at a constant .*?(\d+) frame time\(s\) held "
                      r"the picture before .*?, (\d+) frame\(s\) left out", stdout)
    return int(found.group(1)) - int(found.group(2)) if found else 0


# -- case 2: SIGTERM, SIGHUP, Ctrl-C -------------------------------------------------------

@pytest.mark.parametrize("sig, said", [(signal.SIGTERM, "stopped by SIGTERM"), (signal.SIGHUP, "stopped by SIGHUP"),
                                       (signal.SIGINT, "stopped by Ctrl-C")])
def test_a_signal_stops_live_like_ctrl_c(sig: signal.Signals, said: str, clip: Path, source_photo: Path,
                                         tmp_path: Path) -> None:
    out, rec = tmp_path / "live.mp4", tmp_path / "rec.mkv"
    proc = _cli("live", "--source", str(source_photo), "--input", str(clip), "--output", str(out),
                "--record", str(rec))
    err = Lines(proc.stderr)
    err.start()
    assert err.wait_for(r"^in .* fps"), err.text  # the first status line: the pipeline runs
    proc.send_signal(sig)
    stdout, _ = proc.communicate(timeout=60)
    err.join(10)
    assert proc.returncode == 0, err.text
    assert "Traceback" not in err.text and "Traceback" not in stdout
    summary = [line for line in stdout.splitlines() if line.startswith("live:")]
    assert summary and summary[-1].endswith(said), stdout
    delivered = int(re.search(r"frames in, (\d+) out", summary[-1]).group(1))
    assert 0 < delivered < 200  # stopped about a second into an 8 s clip (240 frames)
    assert f"recorded {rec}" in stdout
    assert not _partials(tmp_path)
    for path in (out, rec):
        got = probe(path)  # moov (mkv: cues) written: the file reads back whole
        assert got["frames"] == delivered + _grid(stdout, path), (path, got["frames"], stdout)
        assert got["audio"] is not None and got["audio"]["packets"] > 0  # the clip's sound, kept
        assert _ffmpeg_warnings(path) == ""


def test_sigterm_right_after_the_output_opened_leaves_no_file(clip: Path, source_photo: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """The signal lands after the output file was created and before the pipeline runs (a
    real SIGTERM to this process, at that moment): no partial file, no traceback, the
    source and the output closed, one line, 128 + 15."""
    import stream.job.runs as runs

    opened: list[object] = []
    real_open_live = runs.open_live

    def open_live_then_sigterm(source, make_sink):  # noqa: ANN001, ANN202
        info, sink = real_open_live(source, make_sink)
        opened.extend([source, sink])
        os.kill(os.getpid(), signal.SIGTERM)  # handled here, in the main thread
        return info, sink

    monkeypatch.setattr(runs, "open_live", open_live_then_sigterm)
    out = tmp_path / "live.mp4"
    code = main(["live", "--source", str(source_photo), "--input", str(clip), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 128 + signal.SIGTERM
    assert err.strip().splitlines()[-1] == "facestream: stopped by SIGTERM", err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # neither the output nor a hidden partial file
    source, sink = opened
    assert isinstance(source, WebcamSource) and source._cap is None  # closed
    assert all(s._output is None for s in sink.sinks)  # type: ignore[attr-defined]


# -- the recording: constant rate, monotonic timestamps, the clip's sound in step -------------

def _flash_times(path: Path) -> list[float]:
    """Where a white bar appears in the video (seconds): the first frame showing it, less the
    frames it is into the bar."""
    times, on = [], False
    with av.open(str(path)) as c:
        for frame in c.decode(video=0):
            bar = frame.to_ndarray(format="gray")[:30]
            pieces = np.array([piece.mean() for piece in np.array_split(bar, BAR_FRAMES, axis=1)])
            bright = bool(np.sort(pieces)[1:].min() > 240)  # white but for one piece
            if bright and not on:
                times.append(float(frame.pts * frame.time_base) - int(np.argmin(pieces)) / FPS)
            on = bright
    return times


def _beep_times(path: Path) -> list[float]:
    """Where a beep starts in the sound (seconds)."""
    with av.open(str(path)) as c:
        stream = c.streams.audio[0]
        chunks, start, rate = [], 0.0, 44100
        for frame in c.decode(stream):
            if not chunks:
                start = float(frame.pts * frame.time_base)
            chunks.append(frame.to_ndarray().mean(axis=0))
            rate = frame.sample_rate
    samples = np.concatenate(chunks)
    window = rate // 200  # 5 ms
    n = len(samples) // window
    loud = np.abs(samples[:n * window]).reshape(n, window).max(axis=1) > 0.2
    times, last = [], -1.0
    for i in np.flatnonzero(loud):
        t = start + i * window / rate
        if t - last > 0.3:
            times.append(t)
        last = t
    return times


@pytest.mark.parametrize("name", ["live.mp4", "live.mkv"])
def test_live_recording_is_constant_rate_with_the_clips_sound_in_step(name: str, sync_clip: Path,
                                                                     source_photo: Path, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / name
    code = main(["live", "--source", str(source_photo), "--input", str(sync_clip), "--output", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0
    rates = _ffprobe(out)
    assert rates["r_frame_rate"] == rates["avg_frame_rate"] == "30/1", rates  # was 90000/1 and ~29.97
    assert _ffmpeg_warnings(out) == ""  # was "non monotonically increasing dts" under load
    got = probe(out)
    assert got["pts"] == sorted(set(got["pts"]))
    assert abs(got["frames"] - 4 * FPS) <= 2  # every frame time of the 4 s clip, none twice
    assert got["audio"] is not None  # was dropped
    flashes, beeps = _flash_times(out), _beep_times(out)
    assert len(flashes) == len(beeps) == len(FLASHES), (flashes, beeps, stdout)
    for seen, heard in zip(flashes, beeps, strict=True):
        assert abs(seen - heard) <= 2.5 / FPS, (flashes, beeps)  # together, within two frame times


# -- the measured rate of a clip played as a camera -------------------------------------------

def test_a_30_fps_clip_as_a_camera_measures_30_fps_with_a_late_reader(clip: Path) -> None:
    """The reader is busy now and then (a stage holding the interpreter, a loaded machine):
    the clip no longer catches up in a burst (which measured 33-37 fps over a one-second
    window that started inside it); the frames it was late for are skipped, as a camera
    drops what nobody read."""
    source = WebcamSource(str(clip))
    info = source.open()
    slot = Slot(0, {"image": np.empty((info.height, info.width, 3), np.uint8)})
    reads, gaps = 0, []
    last = None
    while reads < 100 and source.read_into(slot):
        reads += 1
        if last is not None:
            gaps.append(slot.capture_time - last)
        last = slot.capture_time
        if reads % 30 == 20:
            time.sleep(0.25)  # busy for 7-8 frame times
    source.close()
    rep = source.describe()
    assert abs(rep["measured_fps"] - 30) <= 1, rep  # was 33-37
    assert rep.get("skipped", 0) >= 10  # what the reader missed is skipped, not delivered late
    assert sum(gap < 0.25 / FPS for gap in gaps) <= 2, gaps  # no burst (was ~7 frames after each pause)


# -- case 11: frames a sink drops are not "out"; faces on screen ------------------------------

@pytest.fixture(scope="module")
def live_job(source_photo: Path) -> SwapJob:
    job = SwapJob(load_config(None, ["detect.every=2"]), [str(source_photo)])
    job.open()
    return job


class FlakyOutput:
    """A network output whose server is away for the frames given to it at positions in
    `lost`: it drops them (and counts them, and the time without a connection), then
    reconnects. What an RTSP output does; a stand-in so that the loss is exact."""

    name = "flaky"

    def __init__(self, lost: range, ongoing_from: int | None = None) -> None:
        self.lost, self.ongoing_from = lost, ongoing_from
        self.given = 0
        self.delivered: list[int] = []
        self.dropped = self.reconnects = 0
        self._outage = 0.0
        self._lost_since: float | None = None

    def open(self) -> None:
        pass

    def write(self, slot: Slot) -> None:
        n, now = self.given, time.monotonic()
        self.given += 1
        if n in self.lost or (self.ongoing_from is not None and n >= self.ongoing_from):
            if self._lost_since is None:
                self._lost_since = now
            self.dropped += 1
            return
        if self._lost_since is not None:
            self._outage += now - self._lost_since
            self._lost_since = None
            self.reconnects += 1
        self.delivered.append(slot.seq)

    def stats(self) -> dict[str, float]:
        ongoing = time.monotonic() - self._lost_since if self._lost_since is not None else 0.0
        return {"dropped": self.dropped, "reconnects": self.reconnects, "outage_s": self._outage + ongoing}

    def close(self) -> None:
        pass


def test_frames_a_sink_drops_are_not_out(live_job: SwapJob, sync_clip: Path) -> None:
    source = open_source(str(sync_clip))
    source.open()
    flaky = FlakyOutput(lost=range(10, 30))
    figures: list[dict] = []
    pipelines: list[Pipeline] = []
    result = run_live(live_job, source, FanoutSink([flaky]), "flaky", status=figures.append,
                      on_start=pipelines.append)
    rep = result.report
    assert flaky.dropped == 20 and flaky.reconnects == 1
    assert rep["frames"] == len(flaky.delivered) == flaky.given - 20  # was flaky.given
    assert rep["sink"]["dropped"] == 20 and rep["sink"]["reconnects"] == 1
    assert rep["sink"]["outage_s"] > 0.3  # 20 frames at up to 30 fps
    assert rep["sink"]["sinks"]["flaky"]["dropped"] == 20
    summary = format_live_summary(rep)
    assert f"{rep['frames_in']} frames in, {len(flaky.delivered)} out" in summary
    assert "output dropped 20, reconnected 1x" in summary and "s without connection" in summary
    # The status line counts the same way, and says what the output lost.
    final = StatusLine(pipelines[0], lambda f: None).figures()
    assert final["frames_out"] == len(flaky.delivered) and final["sink_dropped"] == 20
    line = format_status(final)
    assert "output dropped 20, reconnected 1x" in line
    assert figures and all("sink_dropped" in f for f in figures)
    assert all(f["frames_out"] <= f["frames_in"] for f in figures)


def test_an_outage_still_going_on_counts(live_job: SwapJob, sync_clip: Path) -> None:
    source = open_source(str(sync_clip))
    source.open()
    flaky = FlakyOutput(lost=range(0), ongoing_from=20)
    result = run_live(live_job, source, FanoutSink([flaky]), "flaky")
    sink = result.report["sink"]
    assert sink["reconnects"] == 0 and sink["dropped"] == flaky.given - 20 > 0
    assert sink["outage_s"] > 0.3  # from the 20th frame to the end, no reconnect to close it
    assert result.report["frames"] == 20


def test_status_says_faces_on_screen_beside_the_total(live_job: SwapJob, sync_clip: Path) -> None:
    source = open_source(str(sync_clip))
    source.open()
    figures: list[dict] = []
    run_live(live_job, source, FanoutSink([FlakyOutput(lost=range(0))]), "faces", status=figures.append)
    assert len(figures) >= 2
    assert figures[-1]["faces_on_screen"] == 1, figures  # one face in the clip
    assert all(f["faces_on_screen"] in (0, 1) for f in figures), figures
    assert figures[-1]["faces"] > 30  # the running total
    line = format_status(figures[-1])
    assert f"faces on screen 1, swapped {figures[-1]['faces']}" in line
    assert "output dropped" not in line  # nothing lost: nothing said


def test_status_says_once_what_is_shed(live_job: SwapJob, sync_clip: Path) -> None:
    """The status line names the steps shed when that changes, not every second after."""
    source = open_source(str(sync_clip))
    source.open()
    figures: list[dict] = []

    def starting(pipeline) -> None:  # the run has fallen behind before its first second
        pipeline.analyse.skip = frozenset({"occlusion", "resample"})

    run_live(live_job, source, FanoutSink([FlakyOutput(lost=range(0))]), "shed", status=figures.append,
             on_start=starting)
    assert len(figures) >= 2
    lines = [format_status(f) for f in figures]
    assert "  shedding resample, occlusion" in lines[0], lines[0]
    # Said on the lines where it changed (the run's own adapter may shed or take back more), never
    # again while it stays the same.
    before: list[str] = []
    for f, line in zip(figures, lines):
        said = "shedding" in line or "every quality step back" in line
        assert said == (f["shed"] != before), (before, f["shed"], line)
        before = f["shed"]
    back = dict(figures[-1], shed=[], shed_changed=True)
    assert format_status(back).endswith("  every quality step back")


# -- case 12: log lines never run into the status line ------------------------------------------

def _screen(raw: str) -> list[str]:
    """What a terminal shows for `raw`: carriage return, newline, erase to end of line."""
    lines, col = [""], 0
    i = 0
    while i < len(raw):
        if raw.startswith("\x1b[K", i):
            lines[-1] = lines[-1][:col]
            i += 3
            continue
        ch = raw[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("")
            col = 0
        else:
            line = lines[-1].ljust(col)
            lines[-1] = line[:col] + ch + line[col + 1:]
            col += 1
        i += 1
    return lines


class PtyReader(threading.Thread):
    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.data = fd, b""

    def run(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                return
            if not chunk:
                return
            self.data += chunk

    def wait_for(self, text: str, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while text.encode() not in self.data:
            if time.monotonic() > deadline or not self.is_alive():
                return False
            time.sleep(0.1)
        return True


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_warnings_never_run_into_the_status_line(terminal: bool, clip: Path, source_photo: Path) -> None:
    """An RTSP output whose server goes away and comes back logs WARNING lines mid-run: on a
    terminal each one is on a line of its own, the status redrawn below it; into a pipe no
    carriage return is written at all."""
    require_relay()
    port = free_port()
    relay = Relay(port, ["out"])
    relay.start()
    args = ("live", "--source", str(source_photo), "--input", str(clip), "--output", relay.url("out/push"),
            "--duration", "6")
    try:
        if terminal:
            master, slave = os.openpty()
            proc = _cli(*args, stderr=slave)
            os.close(slave)
            reader = PtyReader(master)
            reader.start()
            assert reader.wait_for("latency p50"), reader.data  # the status line is up
        else:
            proc = _cli(*args)
            lines = Lines(proc.stderr)
            lines.start()
            assert lines.wait_for(r"^in .* fps"), lines.text
        relay.stop()  # the output's server goes away: a warning
        time.sleep(1.5)
        relay.start()  # and comes back: another one
        proc.wait(60)
    finally:
        relay.stop()
        if proc.poll() is None:
            proc.kill()
    if terminal:
        reader.join(10)
        os.close(master)
        raw = reader.data.decode(errors="replace")
    else:
        lines.join(10)
        raw = lines.text
    assert proc.returncode == 0, raw
    if not terminal:
        assert "\r" not in raw
    shown = _screen(raw)
    warnings = [line for line in shown if "WARNING" in line]
    assert warnings, raw
    for line in warnings:
        assert line.startswith("WARNING"), line  # nothing of the status before it ...
        assert "fps" not in line and "faces on screen" not in line, line  # ... or after it
    if terminal:
        statuses = [line for line in shown if line.startswith("in ")]
        assert statuses and all("WARNING" not in s for s in statuses)
