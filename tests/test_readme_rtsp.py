"""The README's "Try RTSP locally" recipe, run as written (on a free port, with a test clip
that has sound, as the demo clip does): the relay starts, the camera's ffmpeg command
publishes to it, and the recipe's reader (the ffmpeg CLI) gets whole frames back from it."""
from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.rtsp import free_port, require_relay

pytestmark = pytest.mark.slow  # the README's RTSP recipe through a real server

ROOT = Path(__file__).resolve().parent.parent


def recipe() -> list[str]:
    """The command lines of the README's recipe, in order (comments and blanks left out)."""
    text = (ROOT / "README.md").read_text()
    assert "### Try RTSP locally" in text, "the README has no RTSP recipe"
    section = text.split("### Try RTSP locally", 1)[1]
    block = section.split("```", 2)[1]
    return [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.startswith("#")]


def command(lines: list[str], start: str, port: int, clip: Path) -> list[str]:
    found = [ln for ln in lines if ln.startswith(start)]
    assert len(found) == 1, (start, lines)
    line = found[0].replace("8554", str(port)).replace("facestream-demo/demo_target.mp4", str(clip))
    return shlex.split(line)


def test_the_readme_rtsp_recipe_publishes_whole_frames(face_clip: Path) -> None:
    require_relay()
    if shutil.which("ffmpeg") is None:
        pytest.skip("the ffmpeg command is not installed")
    lines = recipe()
    port = free_port()
    relay = subprocess.Popen(command(lines, "/usr/bin/python3 tests/fixtures/rtsp_relay.py", port, face_clip),
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    camera = None
    try:
        assert relay.stdout is not None and relay.stdout.readline().strip() == "ready"
        publish = command(lines, "ffmpeg -re", port, face_clip)
        camera = subprocess.Popen(["ffmpeg", "-nostdin", "-loglevel", "error", *publish[1:]], cwd=ROOT,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        read = command(lines, "ffmpeg -rtsp_transport tcp", port, face_clip)
        assert read[-3:-1] == ["-frames:v", "300"]
        # The reader as written, on the camera's path (the swap, step 3, is test_live_rtsp's),
        # keeping 45 frames (1.5 s) and no file.
        source = [arg.replace(f":{port}/out", f":{port}/cam") for arg in read[1:-3]]
        reader = subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "warning", *source, "-frames:v", "45",
                                 "-f", "framecrc", "-"], capture_output=True, text=True, timeout=60)
        assert camera.poll() is None, f"the camera's ffmpeg ended: {camera.communicate()[1][-500:]}"
    finally:
        if camera is not None:
            camera.kill()
            camera.wait()
        relay.kill()
        relay.wait()
    assert reader.returncode == 0, reader.stderr[-1000:]
    frames = [ln for ln in reader.stdout.splitlines() if ln and not ln.startswith("#")]
    assert len(frames) == 45, reader.stderr[-500:]
    # Frames cut into slices arrived with their first slices lost through this server.
    for damage in ("corrupt decoded frame", "error while decoding", "concealing"):
        assert damage not in reader.stderr, reader.stderr[-1000:]
