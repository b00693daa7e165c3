"""TritonRuntime against the real bundled Triton server (tests.fixtures.triton): the same
answers as the local runtime, tensors checked against the ONNX file, requests spread over
the servers up, a server gone retried and reported once, batching across processes, and
`--runtime triton --triton-url` from the command line."""
from __future__ import annotations

import contextlib
import json
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.backends.registry import runtime_factory
from engines.backends.triton.runtime import TritonRuntime, model_name
from engines.errors import EngineError
from stream.cli.main import main
from tests.fixtures import (
    build_scrfd_model,
    make_arcface,
    make_clip,
    make_fan,
    make_hyperswap,
    make_inswapper,
    window_frame,
)
from tests.fixtures.rtsp import free_port
from tests.fixtures.triton import TritonServer, triton_repo_server

ROOT = Path(__file__).resolve().parents[1]
MAX_BATCH = 16
FILES = {"scrfd_10g": "det_10g.onnx", "arcface_w600k_r50": "w600k_r50.onnx", "inswapper_128": "inswapper_128.onnx"}
SERVED = {**FILES, "hyperswap_1a_256": "hyperswap_1a_256.onnx"}  # a swapper chosen by name, served too


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("models")
    build_scrfd_model(folder / "det_10g.onnx", seed=3)
    make_arcface(folder / "w600k_r50.onnx", seed=4)
    make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None)  # dynamic batch: Triton batches it
    make_hyperswap(folder / "hyperswap_1a_256.onnx", seed=6)
    return folder


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[TritonServer]:
    # max batch 16: two workers' requests of a frame's faces (up to 8 each) fit one batch.
    # A request may wait 20 ms for company (the repository's default is 2 ms): two workers
    # on a loaded 2-core machine drift apart by more than 2 ms, and their requests met in no
    # batch (200 requests in 200 executions) in one CI run.
    with triton_repo_server(tmp_path_factory, {name: models_dir / f for name, f in SERVED.items()},
                            max_batch=MAX_BATCH, queue_delay_us=20_000) as srv:
        yield srv


def _options(*urls: str, timeout: float = 30.0) -> RuntimeOptions:
    return RuntimeOptions(kind="triton", triton_urls=list(urls), triton_timeout=timeout, intra_threads=1)


def _feeds(runtime: OrtRuntime, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in runtime.inputs:
        shape = [batch if i == 0 and d is None else (d or 160) for i, d in enumerate(spec.shape)]
        feeds[spec.name] = rng.random(shape, dtype=np.float32)
    return feeds


# -- without a server ------------------------------------------------------------------

@pytest.mark.parametrize(("given", "expected"), [
    (["127.0.0.1:8001"], ["127.0.0.1:8001"]),
    (["gpu-a"], ["gpu-a:8001"]),
    (["grpc://gpu-a:9001/"], ["gpu-a:9001"]),
    ("gpu-a:8001, gpu-b:8001", ["gpu-a:8001", "gpu-b:8001"]),  # a YAML string of several
    (["[::1]:8001"], ["[::1]:8001"]),
])
def test_triton_urls_are_normalised(given: list[str] | str, expected: list[str]) -> None:
    assert RuntimeOptions(kind="triton", triton_urls=given).triton_urls == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(("urls", "says"), [
    (["http://gpu-a:8000"], "not an HTTP URL"),
    (["gpu-a:99999"], "port '99999' must be a number from 1 to 65535"),
    (["gpu-a:port"], "port 'port'"),
    ([":8001"], "has no host"),
    (["gpu a:8001"], "must look like host:port"),
    ([], "runtime.kind triton needs runtime.triton_urls"),
])
def test_bad_triton_urls_are_one_line_errors(urls: list[str], says: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        RuntimeOptions(kind="triton", triton_urls=urls)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_bad_triton_url_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["swap", "--source", "a.png", "--input", "b.mp4", "--output", str(tmp_path / "c.mp4"),
                 "--triton-url", "127.0.0.1:8001,http://gpu-b:8000"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "\n" not in err
    assert "--triton-url" in err and "'http://gpu-b:8000'" in err and "not an HTTP URL" in err


@pytest.mark.parametrize(("flags", "kind", "urls"), [
    (["--triton-url", "gpu-a:9001,gpu-b"], "triton", ["gpu-a:9001", "gpu-b:8001"]),
    (["--runtime", "triton", "--triton-url", "gpu-a"], "triton", ["gpu-a:8001"]),
    (["--runtime", "tensorrt"], "tensorrt", []),
    ([], "auto", []),  # ONNX Runtime, or per model the CPU runtime measured faster (engines.quantize.choose)
])
@pytest.mark.parametrize("command", ["swap", "live", "serve"])
def test_runtime_flags_set_the_config(command: str, flags: list[str], kind: str, urls: list[str]) -> None:
    from stream.cli.parser import build_parser, config_from_args

    needs = {"swap": ["--input", "a.mp4", "--output", "b.mp4"], "live": ["--input", "webcam:0"], "serve": []}
    cfg = config_from_args(build_parser().parse_args([command, *needs[command], *flags]))
    assert (cfg.runtime.kind, cfg.runtime.triton_urls) == (kind, urls)


def test_the_yaml_runtime_section_names_triton(tmp_path: Path) -> None:
    from stream.config import load_config
    from stream.errors import ConfigError

    preset = tmp_path / "triton.yaml"
    preset.write_text("runtime:\n  kind: triton\n  triton_urls: [gpu-a:8001, 'grpc://gpu-b:8001']\n"
                      "  triton_timeout: 5\n")
    cfg = load_config(str(preset))
    assert (cfg.runtime.kind, cfg.runtime.triton_urls, cfg.runtime.triton_timeout) == (
        "triton", ["gpu-a:8001", "gpu-b:8001"], 5)
    with pytest.raises(ConfigError, match="runtime.triton_timeout must be a positive number of seconds, got 0"):
        load_config(str(preset), ["runtime.triton_timeout=0"])


@pytest.mark.parametrize(("file", "name"), [
    ("det_10g.onnx", "scrfd_10g"), ("w600k_r50.onnx", "arcface_w600k_r50"), ("inswapper_128.onnx", "inswapper_128"),
    ("gfpgan_1.4.onnx", "gfpgan_1.4"), ("2dfan4.onnx", "2dfan4"), ("my_model.onnx", "my_model"),
])
def test_model_name_on_the_server_is_the_catalog_name(file: str, name: str) -> None:
    assert model_name(Path("/models") / file) == name


def test_importing_engines_imports_no_tritonclient() -> None:
    code = ("import sys, engines.registry, engines.backends.registry, engines.backends.base, stream.cli.parser; "
            "print('tritonclient' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_tritonclient_the_triton_runtime_says_what_to_install(monkeypatch: pytest.MonkeyPatch,
                                                                      models_dir: Path) -> None:
    monkeypatch.setitem(sys.modules, "tritonclient.grpc", None)  # as if not installed
    with pytest.raises(EngineError, match=r"pip install 'facestream\[triton\]'"):
        runtime_factory(_options("127.0.0.1:8001"))(models_dir / "w600k_r50.onnx")


# -- against the server ----------------------------------------------------------------

def test_answers_are_the_local_runtimes(server: TritonServer, models_dir: Path) -> None:
    for name, file in FILES.items():
        local = OrtRuntime(models_dir / file, RuntimeOptions(intra_threads=1))
        local.open()
        remote = TritonRuntime(models_dir / file, _options(server.grpc_url))
        remote.open()
        try:
            assert remote.model == name
            assert [s.name for s in remote.inputs] == [s.name for s in local.inputs]
            assert [s.name for s in remote.outputs] == [s.name for s in local.outputs]
            feeds = _feeds(local, batch=1)
            want, got = local.run(feeds), remote.run(feeds)
            assert set(got) == set(want)
            for key in want:
                np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-5)
        finally:
            remote.close()
            local.close()


def test_a_batch_above_the_servers_max_is_sent_as_several_requests(server: TritonServer, models_dir: Path) -> None:
    local = OrtRuntime(models_dir / "inswapper_128.onnx", RuntimeOptions(intra_threads=1))
    local.open()
    remote = TritonRuntime(models_dir / "inswapper_128.onnx", _options(server.grpc_url))
    remote.open()
    assert remote.max_batch == MAX_BATCH and remote.inputs[0].shape[0] is None
    n = MAX_BATCH + 3
    feeds = _feeds(local, batch=n, seed=1)
    got = remote.run(feeds)["output"]
    assert got.shape == (n, 3, 128, 128)
    np.testing.assert_allclose(got, local.run(feeds)["output"], rtol=1e-5, atol=1e-5)
    assert (remote.calls, remote.requests) == (1, 2)  # 16 + 3, both in flight at once
    out = np.zeros((n, 3, 128, 128), np.float32)
    assert remote.run_into(feeds, {"output": out})["output"] is out and np.array_equal(out, got)
    remote.close()


def test_tensors_that_differ_from_the_onnx_file_are_a_one_line_error(server: TritonServer, tmp_path: Path) -> None:
    make_arcface(tmp_path / "w600k_r50.onnx", seed=4, size=96)  # the server's takes 112x112
    make_inswapper(tmp_path / "inswapper_128.onnx", batch=None, names=("target", "latent", "output"))
    with pytest.raises(EngineError) as err:
        TritonRuntime(tmp_path / "w600k_r50.onnx", _options(server.grpc_url)).open()
    text = str(err.value)
    assert "\n" not in text and "'arcface_w600k_r50'" in text and "input 'input.1'" in text
    assert "FP32 [?,3,112,112] on the server but FP32 [?,3,96,96] in the ONNX file" in text
    with pytest.raises(EngineError) as err:
        TritonRuntime(tmp_path / "inswapper_128.onnx", _options(server.grpc_url)).open()
    assert "'inswapper_128' has no input 'latent'" in str(err.value)


def test_a_model_the_server_lacks_is_a_one_line_error(server: TritonServer, tmp_path: Path) -> None:
    make_fan(tmp_path / "2dfan4.onnx")
    with pytest.raises(EngineError) as err:
        TritonRuntime(tmp_path / "2dfan4.onnx", _options(server.grpc_url)).open()
    text = str(err.value)
    assert "\n" not in text and f"triton {server.grpc_url}: does not serve model '2dfan4'" in text
    assert "it serves: arcface_w600k_r50, hyperswap_1a_256, inswapper_128, scrfd_10g" in text


def test_the_factory_serves_what_the_server_has_and_runs_the_rest_locally(server: TritonServer, models_dir: Path,
                                                                          tmp_path: Path) -> None:
    make_fan(tmp_path / "2dfan4.onnx")
    factory = runtime_factory(_options(server.grpc_url))
    swapper, fan = factory(models_dir / "inswapper_128.onnx"), factory(tmp_path / "2dfan4.onnx")
    assert isinstance(swapper, TritonRuntime) and isinstance(fan, OrtRuntime)
    notes = factory.notes  # type: ignore[attr-defined]
    assert notes == [f"triton {server.grpc_url} does not serve '2dfan4': 2dfan4.onnx runs on the local ONNX Runtime"]
    fan.open()
    fan.run({"input": np.zeros((1, 3, 256, 256), np.float32)})


def test_a_server_that_is_not_there_fails_at_once(models_dir: Path) -> None:
    url = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(EngineError) as err:
        TritonRuntime(models_dir / "w600k_r50.onnx", _options(url)).open()
    assert time.monotonic() - started < 10  # refused: no wait for the 30 s timeout
    assert f"triton {url}: cannot reach a server for model 'arcface_w600k_r50'" in str(err.value)
    with pytest.raises(EngineError, match=f"triton {url}: cannot connect"):
        runtime_factory(_options(url))(models_dir / "w600k_r50.onnx")


def test_requests_are_spread_over_the_servers_up(server: TritonServer, models_dir: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    port = server.grpc_url.rsplit(":", 1)[1]
    dead = f"127.0.0.1:{free_port()}"
    remote = TritonRuntime(models_dir / "w600k_r50.onnx", _options(server.grpc_url, f"localhost:{port}", dead))
    with caplog.at_level(logging.WARNING, logger="engines.backends.triton.servers"):
        remote.open()
        blob = np.zeros((2, 3, 112, 112), np.float32)
        for _ in range(10):
            remote.run({"input.1": blob})
    sent = {s.url: s.requests for s in remote.servers.servers}
    assert sent == {server.grpc_url: 5, f"localhost:{port}": 5, dead: 0}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith(f"triton {dead}: unavailable (")
    assert "requests go to the other 2 server(s)" in lines[0]
    remote.close()


@pytest.mark.slow
def test_a_server_away_past_the_timeout_is_a_one_line_error(server: TritonServer, models_dir: Path) -> None:
    remote = TritonRuntime(models_dir / "w600k_r50.onnx", _options(server.grpc_url, timeout=2.0))
    remote.open()
    blob = {"input.1": np.zeros((1, 3, 112, 112), np.float32)}
    remote.run(blob)
    server.kill()
    try:
        started = time.monotonic()
        with pytest.raises(EngineError) as err:
            remote.run(blob)
        waited = time.monotonic() - started
    finally:
        server.start()
    text = str(err.value)
    assert "\n" not in text and text.startswith("triton: no server answered within 2 s (")
    assert server.grpc_url in text
    assert 1.5 < waited < 15  # it waited for the server to come back, then gave up


# -- from the command line, in processes -----------------------------------------------

def _frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="bgr24") for f in c.decode(video=0)]


def _swap_args(clip: Path, photo: Path, out: Path, models: Path, *extra: str) -> list[str]:
    return ["swap", "--source", str(photo), "--input", str(clip), "--output", str(out), "--engine", "neural",
            "--models-dir", str(models), "--x264-preset", "ultrafast", "-q", "--set", "runtime.intra_threads=1",
            *extra]


@pytest.mark.slow
def test_a_swap_through_triton_is_the_local_swap_frame_for_frame(server: TritonServer, models_dir: Path,
                                                                long_clip: Path, source_photo: Path,
                                                                tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    before = server.statistics("inswapper_128")["inference_count"]
    local, remote = tmp_path / "local.mp4", tmp_path / "triton.mp4"
    assert main(_swap_args(long_clip, source_photo, local, models_dir)) == 0
    assert main(_swap_args(long_clip, source_photo, remote, models_dir, "--runtime", "triton",
                           "--triton-url", server.grpc_url)) == 0
    assert server.statistics("inswapper_128")["inference_count"] > before  # the faces went through Triton
    a, b = _frames(local), _frames(remote)
    assert len(a) == len(b) > 0
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    said = capsys.readouterr()
    assert "runs on the local ONNX Runtime" not in said.out + said.err


@pytest.mark.slow
@pytest.mark.parametrize("model, extra", [
    ("hyperswap_1a_256", ("--swapper", "hyperswap_1a_256")),  # a swapper chosen by name
    ("inswapper_128", ("--swap-every", "3")),  # swapped every third frame, carried between
])
def test_a_swapper_by_name_or_at_a_cadence_through_triton_is_the_local_one(
        server: TritonServer, models_dir: Path, face_clip: Path, source_photo: Path, tmp_path: Path, model: str,
        extra: tuple[str, ...]) -> None:
    before = server.statistics(model)["inference_count"]
    local, remote = tmp_path / "local.mp4", tmp_path / "triton.mp4"
    assert main(_swap_args(face_clip, source_photo, local, models_dir, *extra)) == 0
    assert main(_swap_args(face_clip, source_photo, remote, models_dir, *extra, "--runtime", "triton",
                           "--triton-url", server.grpc_url)) == 0
    assert server.statistics(model)["inference_count"] > before
    a, b = _frames(local), _frames(remote)
    assert len(a) == len(b) > 0 and all(np.array_equal(x, y) for x, y in zip(a, b))


@pytest.mark.slow
def test_a_model_the_server_lacks_runs_locally_and_the_run_says_so(
        server: TritonServer, models_dir: Path, long_clip: Path, source_photo: Path, tmp_path: Path,
        capsys: pytest.CaptureFixture) -> None:
    with_fan = tmp_path / "with_fan"
    with_fan.mkdir()
    for f in FILES.values():
        (with_fan / f).symlink_to(models_dir / f)
    make_fan(with_fan / "2dfan4.onnx")  # the server has no 2dfan4
    before = server.statistics("inswapper_128")["inference_count"]
    assert main(_swap_args(long_clip, source_photo, tmp_path / "out.mp4", with_fan,
                           "--triton-url", server.grpc_url)) == 0
    said = capsys.readouterr().out
    assert f"triton {server.grpc_url} does not serve '2dfan4': 2dfan4.onnx runs on the local ONNX Runtime" in said
    assert "does not serve 'inswapper_128'" not in said
    assert server.statistics("inswapper_128")["inference_count"] > before


@pytest.mark.slow
def test_wrong_url_and_mismatched_model_are_one_line_errors_exit_1(server: TritonServer, face_clip: Path,
                                                                   source_photo: Path, models_dir: Path,
                                                                   tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    for f in FILES.values():
        (other / f).symlink_to(models_dir / f)
    (other / "w600k_r50.onnx").unlink()
    make_arcface(other / "w600k_r50.onnx", seed=4, size=96)  # the server's takes 112x112
    cases = [(f"127.0.0.1:{free_port()}", models_dir, "cannot connect"),
             (server.grpc_url, other, "model 'arcface_w600k_r50' input 'input.1' is FP32 [?,3,112,112] on the "
                                      "server but FP32 [?,3,96,96] in the ONNX file")]
    for url, models, says in cases:
        proc = subprocess.run([sys.executable, "-m", "stream.cli",
                               *_swap_args(face_clip, source_photo, tmp_path / "x.mp4", models, "--triton-url", url)],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
        err = proc.stderr.strip()
        assert proc.returncode == 1, err
        assert len(err.splitlines()) == 1 and says in err and "Traceback" not in err


LONG_FRAMES = 100


def _sparse_frame(i: int) -> np.ndarray:
    """Two faces of the group picture, small, on grey, moving: the stand-in detector finds a
    few faces here (on the whole picture it finds a hundred, and the run is slow)."""
    face = window_frame(0)
    frame = np.full((320, 320, 3), 128, np.uint8)
    frame[53 + i % 20:133 + i % 20, 53:133] = cv2.resize(face[100:220, 100:220], (80, 80))
    frame[160:240, 160 + i % 20:240 + i % 20] = cv2.resize(face[250:370, 300:420], (80, 80))
    return cv2.GaussianBlur(frame, (0, 0), 4)


@pytest.fixture(scope="module")
def long_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clips") / "long.mp4"
    make_clip(path, _sparse_frame, n=LONG_FRAMES, fps=25, audio=False, options=None)
    return path


def _worker(clip: Path, photo: Path, out: Path, models: Path, url: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "stream.cli", *_swap_args(clip, photo, out, models,
                                                                              "--triton-url", url)],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@contextlib.contextmanager
def _ended(*workers: subprocess.Popen[str]) -> Iterator[None]:
    """The workers are ended when the block is left, however it is left: one left running
    after a failed assertion would keep sending requests to the module's server, and the
    next test, which reads the server's own counts, would take them for its own run's."""
    try:
        yield
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.communicate()


@pytest.mark.slow
def test_two_workers_share_one_server_and_their_requests_are_batched_together(
        server: TritonServer, models_dir: Path, long_clip: Path, source_photo: Path, tmp_path: Path) -> None:
    before = server.statistics("inswapper_128")
    workers = [_worker(long_clip, source_photo, tmp_path / f"w{i}.mp4", models_dir, server.grpc_url) for i in range(2)]
    with _ended(*workers):
        for w in workers:
            _, err = w.communicate(timeout=240)
            assert w.returncode == 0, err
    after = server.statistics("inswapper_128")
    requests = (after["inference_stats"]["success"]["count"] - before["inference_stats"]["success"]["count"])
    executions = after["execution_count"] - before["execution_count"]
    # One worker has one inswapper request in flight at a time (its swap stage waits for
    # each): fewer executions than requests means requests of both ran in one batch.
    assert requests >= 2 * LONG_FRAMES and executions < requests, (requests, executions)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["stop", "kill"])
def test_a_server_restarted_mid_run_is_reported_once_and_the_run_finishes(
        server: TritonServer, models_dir: Path, long_clip: Path, source_photo: Path, tmp_path: Path, how: str) -> None:
    """Stopped (it unloads its models, then closes its port) or killed (a crash): either way
    one line when it goes, one when it is back, and every frame of the run is written."""
    out = tmp_path / "restarted.mp4"
    start = server.statistics("inswapper_128")["inference_count"]
    worker = _worker(long_clip, source_photo, out, models_dir, server.grpc_url)
    with _ended(worker):
        deadline = time.monotonic() + 120
        # The run is under way: no other client is left (each test ends its workers), so
        # the server's count moving is this worker's.
        while server.statistics("inswapper_128")["inference_count"] == start:
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        server.stop() if how == "stop" else server.kill()
        time.sleep(1.0)
        server.start()
        _, err = worker.communicate(timeout=240)
    assert worker.returncode == 0, err
    lost = [line for line in err.splitlines() if "unavailable" in line]
    back = [line for line in err.splitlines() if "back after" in line]
    assert len(lost) == 1 and f"triton {server.grpc_url}: unavailable" in lost[0], err
    assert len(back) == 1 and f"triton {server.grpc_url}: back after" in back[0], err
    assert len(_frames(out)) == LONG_FRAMES
    assert server.statistics("inswapper_128")["inference_count"] > 0  # the restarted server served the rest


@pytest.mark.slow
def test_the_bench_compares_local_and_triton_streams(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    proc = subprocess.run([sys.executable, "tools/bench_triton.py", "--streams", "2", "--frames", "8",
                           "--serve", "inswapper_128", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())
    assert [(r["mode"], r["streams"]) for r in rows] == [("local", 2), ("triton", 2)]
    for row in rows:
        assert row["fps_per_stream"] > 0 and row["swap_p95_ms"] > 0
        if row["mode"] == "triton":  # only the swapper is served: the rest ran on each stream's own runtime
            assert set(row["batches"]) == {"inswapper_128"}
            assert row["batches"]["inswapper_128"]["requests"] >= 8 * row["streams"]
    assert "inswapper req/exec" in proc.stdout
