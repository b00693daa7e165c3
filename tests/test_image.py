"""The CPU image (deploy/Containerfile) run for real with podman: doctor, a swap through a
mounted folder, `serve` on the host's network (WHIP in and out, /metrics, the drain on
SIGTERM), and a camera worker under `podman kube play` (RTSP in and out, restarted after a
crash). `make image` builds the image and `make image-test` runs these; elsewhere they skip.
Every container and pod a test starts is removed in its `finally`."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest

from tests.fixtures import BLANK_FRAMES, CLIP_FRAMES, FACE_FRAMES, Identity, probe
from tests.fixtures.clips import window_frame
from tests.fixtures.rtsp import Publisher, Reader, Relay, free_port, require_relay
from tests.fixtures.scrape import get, samples

ROOT = Path(__file__).resolve().parents[1]
IMAGE = os.environ.get("FACESTREAM_IMAGE", "localhost/facestream:latest")
CONTAINER_UID = 10001  # the image's user (deploy/Containerfile)

pytestmark = [
    pytest.mark.image,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FACESTREAM_IMAGE_TEST") != "1",
                       reason="make image-test runs these: they need the built image"),
]


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One podman command, as a user types it: podman's settings are those `make image-deps`
    installed (deploy/containers.conf as a drop-in), or the caller's CONTAINERS_CONF."""
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout)
    if check and done.returncode:
        raise AssertionError(f"podman {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


def unique(kind: str) -> str:
    return f"fs-test-{kind}-{uuid.uuid4().hex[:8]}"


def shared_folder(path: Path) -> list[str]:
    """The `podman run` options that let the image's user write into the host folder `path`:
    rootless podman maps the caller's uid in (keep-id); as root the folder is opened to all."""
    if os.geteuid() != 0:
        return ["--userns=keep-id"]
    path.chmod(0o777)
    return []


@pytest.fixture(scope="module", autouse=True)
def image() -> str:
    if shutil.which("podman") is None:
        pytest.fail("podman is not installed (make image-deps)")
    if podman("image", "exists", IMAGE, check=False).returncode:
        pytest.fail(f"no image {IMAGE}: run `make image` first")
    return IMAGE


@pytest.fixture()
def container() -> Iterator[str]:
    """A unique container name, the container removed (whatever state it is in) at the end."""
    name = unique("c")
    try:
        yield name
    finally:
        podman("rm", "--force", "--time", "0", name, check=False)


# --- doctor ---------------------------------------------------------------------------------------

_CHECK = re.compile(r"^\s+(ok|--)\s+(\S+)\s+(.*)$")
PACKAGES = ("numpy", "av", "cv2", "dlib", "onnxruntime", "aiortc", "pyvirtualcam")


def doctor_lines(text: str) -> dict[str, tuple[str, str]]:
    """doctor's checks by name: (ok or --, what it says)."""
    return {m[2]: (m[1], m[3]) for m in map(_CHECK.match, text.splitlines()) if m}


def test_doctor_in_the_image_passes_and_sees_the_host_s_packages() -> None:
    done = podman("run", "--rm", IMAGE, "doctor", timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    inside = doctor_lines(done.stdout)
    host = subprocess.run([str(Path(sys.executable).with_name("facestream")), "doctor"],
                          capture_output=True, text=True, timeout=180)
    assert host.returncode == 0, host.stderr
    outside = doctor_lines(host.stdout)
    # The runtime packages are the lock's, as on the host (same status, same version).
    for name in PACKAGES:
        assert inside[name] == outside[name], (name, inside.get(name), outside.get(name))
    # Debian's python3 (3.11), the models looked for in the volume, and the same verdict.
    assert inside["python"][1].startswith("3.11.") and "/opt/facestream/" in inside["python"][1]
    assert "put det_10g.onnx in /models " in done.stdout
    assert done.stdout.splitlines()[-1].startswith("facestream runs here")
    assert host.stdout.splitlines()[-1].startswith("facestream runs here")


# --- swap through a volume ------------------------------------------------------------------------

def decode_all(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def test_a_swap_through_a_mounted_folder_keeps_frames_size_and_sound(
        container: str, face_clip: Path, source_photo: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(face_clip, work / "in.mp4")
    shutil.copy(source_photo, work / "face.png")
    podman("run", "--name", container, *shared_folder(work), "-v", f"{work}:/work", IMAGE,
           "swap", "--source", "/work/face.png", "--input", "/work/in.mp4", "--output", "/work/out.mp4",
           "--crf", "0", "--x264-preset", "ultrafast", "-q", timeout=300)
    out = work / "out.mp4"
    a, b = probe(work / "in.mp4"), probe(out)
    assert b["frames"] == a["frames"] == CLIP_FRAMES
    assert b["times"] == a["times"]
    assert a["audio"] is not None and b["audio"] is not None
    assert b["audio"]["payloads"] == a["audio"]["payloads"]
    before, after = decode_all(work / "in.mp4"), decode_all(out)
    assert after[0].shape == before[0].shape
    # The faceless stretch is left as it was; a face frame carries the source's identity.
    for i in range(FACE_FRAMES, FACE_FRAMES + BLANK_FRAMES):
        assert np.abs(after[i].astype(int) - before[i].astype(int)).mean() < 1.0, i
    identity = Identity()
    src = cv2.imread(str(source_photo))
    target = identity.embed(src, identity.boxes(src)[0])
    assert min(identity.distance_to(after[0], target)) < min(identity.distance_to(before[0], target)) - 0.03
    # Written by the image's user into the host's folder.
    if os.geteuid() == 0:
        assert out.stat().st_uid == CONTAINER_UID


# --- serve on the host's network -----------------------------------------------------------------

def http_status(url: str, timeout: float = 2.0) -> int | None:
    """The HTTP status of GET `url`; None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def wait_for(predicate: Any, timeout: float, what: str, container: str | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if container is not None and running(container) is False:
            raise AssertionError(f"{container} stopped while waiting for {what}: {logs(container)}")
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}" + (f": {logs(container)}" if container else ""))


def running(container: str) -> bool | None:
    done = podman("inspect", "--format", "{{.State.Running}}", container, check=False)
    return None if done.returncode else done.stdout.strip() == "true"


def logs(container: str) -> str:
    done = podman("logs", "--tail", "40", container, check=False)
    return (done.stdout + done.stderr)[-3000:]


def frames_in(base: str) -> float:
    """facestream_frames_in_total from a scrape of `base`/metrics, over every stream label."""
    return sum(v for (name, _labels), v in samples(get(f"{base}/metrics", timeout=5)[1]).items()
               if name == "facestream_frames_in_total")


@pytest.mark.usefixtures("loopback_ice")
def test_serve_swaps_a_whip_publisher_counts_its_frames_and_drains_on_sigterm(
        container: str, source_photo: Path, tmp_path: Path) -> None:
    from stream.server.client import PacedTrack
    from stream.server.whip_client import SignallingError, whip_publish

    faces = tmp_path / "faces"
    faces.mkdir()
    shutil.copy(source_photo, faces / "face.png")
    (faces / "face.png").chmod(0o644)
    faces.chmod(0o755)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    drain = 5
    podman("run", "--detach", "--name", container, "--network", "host", "-v", f"{faces}:/faces:ro", IMAGE,
           "serve", "--source", "/faces/face.png", "--host", "127.0.0.1", "--port", str(port),
           "--drain-seconds", str(drain), "--name", "image-test")
    wait_for(lambda: http_status(f"{base}/readyz") == 200, 180, "serve's /readyz", container)
    assert http_status(f"{base}/healthz") == 200
    clip = [window_frame(i) for i in range(12)]

    async def session() -> dict[str, Any]:
        got: dict[str, Any] = {}
        call = await whip_publish(f"{base}/whip", PacedTrack(clip))
        track = await asyncio.wait_for(call.remote, 60)
        got["frames"] = [await asyncio.wait_for(track.recv(), 30) for _ in range(30)]
        got["counted"] = [await asyncio.to_thread(frames_in, base)]
        for _ in range(15):
            await asyncio.wait_for(track.recv(), 30)
        got["counted"].append(await asyncio.to_thread(frames_in, base))
        # SIGTERM while the session runs: not ready at once, new sessions refused, and the
        # running one closed when the drain's time is up; the process then exits 0.
        sent = time.monotonic()
        await asyncio.to_thread(podman, "kill", "--signal", "TERM", container)
        while await asyncio.to_thread(http_status, f"{base}/readyz") == 200:
            await asyncio.sleep(0.02)
        got["not_ready_after_s"] = time.monotonic() - sent
        got["readyz"] = await asyncio.to_thread(http_status, f"{base}/readyz")
        try:
            late = await whip_publish(f"{base}/whip", PacedTrack(clip))
            await late.close()
            got["late"] = "accepted"
        except SignallingError as exc:
            got["late"] = exc.status
        got["running_while_draining"] = await asyncio.to_thread(running, container)
        waited = await asyncio.to_thread(podman, "wait", container, timeout=drain + 60)
        got["exit"] = waited.stdout.strip()
        await call.pc.close()
        return got

    got = asyncio.run(session())
    print(f"serve: /readyz said 503 {got['not_ready_after_s']:.2f} s after SIGTERM")
    last = got["frames"][-1]
    assert (last.width, last.height) == (640, 480)
    assert 0 < got["counted"][0] < got["counted"][1]
    assert got["readyz"] == 503 and got["late"] == 503 and got["running_while_draining"]
    assert got["exit"] == "0", logs(container)
    identity = Identity()
    src = cv2.imread(str(source_photo))
    target = identity.embed(src, identity.boxes(src)[0])
    before = min(min(identity.distance_to(picture, target)) for picture in clip[:3])
    assert min(identity.distance_to(last.to_ndarray(format="bgr24"), target)) < before - 0.03


# --- a camera worker under podman kube play --------------------------------------------------------

def played_containers(output: str) -> list[str]:
    """The container ids `podman kube play` printed (the lines after "Container:")."""
    ids, taking = [], False
    for line in output.splitlines():
        line = line.strip()
        if line.endswith(":"):
            taking = line in ("Container:", "Containers:")
        elif taking and re.fullmatch(r"[0-9a-f]{64}", line):
            ids.append(line)
    return ids


def restarts(container: str) -> int:
    done = podman("inspect", "--format", "{{.RestartCount}}", container)
    return int(done.stdout.strip())


def test_a_camera_worker_played_from_its_manifest_swaps_rtsp_and_comes_back_after_a_crash(
        source_photo: Path, tmp_path: Path) -> None:
    require_relay()
    name = unique("cam").removeprefix("fs-test-")
    models = tmp_path / "models"
    (models / "faces").mkdir(parents=True)
    shutil.copy(source_photo, models / "faces" / "face.png")
    for path in (tmp_path, models, models / "faces"):
        path.chmod(0o755)
    (models / "faces" / "face.png").chmod(0o644)
    relay = Relay(free_port(), ["cam", "out"])
    relay.start()
    # The relay takes a stream on PATH/push and plays it on PATH.
    publisher = Publisher(relay.url("cam/push"), [window_frame(i) for i in range(30)], fps=15)
    reader = Reader(relay.url("out"), keep_every=5)
    manifest = tmp_path / "camera.yaml"
    camera = {"name": name, "input": relay.url("cam"), "output": relay.url("out/push"),
              "source": "/models/faces/face.png"}
    (tmp_path / "cameras.yaml").write_text(json.dumps({"cameras": [camera]}))
    try:
        publisher.start()
        render = subprocess.run([str(Path(sys.executable).with_name("facestream")), "cameras",
                                 str(tmp_path / "cameras.yaml"), "-o", str(manifest), "--image", IMAGE,
                                 "--pull-never", "--host-network", "--models-host-path", str(models), "--no-probes"],
                                capture_output=True, text=True, timeout=60)
        assert render.returncode == 0, render.stderr
        played = podman("kube", "play", str(manifest), timeout=180)
        ids = played_containers(played.stdout)
        assert len(ids) == 1, played.stdout
        worker = ids[0]
        reader.start()
        wait_for(lambda: reader.frames >= 30, 120, "the worker's RTSP output", worker)
        first = list(reader.kept)
        # The worker crashes (its process killed, as the OOM killer would) and comes back (the
        # Deployment's restartPolicy: Always); frames flow again. Not `podman kill`: podman
        # takes that for a stop by the user, which no restart policy undoes.
        os.kill(int(podman("inspect", "--format", "{{.State.Pid}}", worker).stdout), signal.SIGKILL)
        wait_for(lambda: restarts(worker) >= 1 and running(worker), 120, "the worker's restart")
        resumed_from = reader.frames
        wait_for(lambda: reader.frames >= resumed_from + 30, 120, "frames after the restart", worker)
    finally:
        podman("kube", "down", str(manifest), timeout=120, check=False) if manifest.exists() else None
        reader.stop()
        publisher.stop()
        relay.stop()
    identity = Identity()
    src = cv2.imread(str(source_photo))
    target = identity.embed(src, identity.boxes(src)[0])
    before = min(identity.distance_to(window_frame(0), target))
    assert first and min(min(identity.distance_to(p, target) or [9.0]) for p in first) < before - 0.03
    assert first[0].shape == (480, 640, 3)
