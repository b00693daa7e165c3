"""The Python-backend repository served by the real bundled tritonserver: every model loads,
its answers are ONNX Runtime's, concurrent requests are batched, and the fixture restarts
the server on the same ports and leaves no process behind."""
from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from tests.fixtures import build_scrfd_model, make_arcface, make_fan, make_gfpgan, make_inswapper
from tests.fixtures.triton import TritonServer, triton_repo_server

grpcclient = pytest.importorskip("tritonclient.grpc", reason="tritonclient[grpc] is in the test extra")


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("triton-models")
    return {
        "scrfd_10g": build_scrfd_model(folder / "det_10g.onnx", seed=3),
        "arcface_w600k_r50": make_arcface(folder / "w600k_r50.onnx", seed=4),
        "inswapper_128": make_inswapper(folder / "inswapper_128.onnx", seed=5, batch=None),
        "2dfan4": make_fan(folder / "2dfan4.onnx"),
        "gfpgan_1.4": make_gfpgan(folder / "gfpgan_1.4.onnx", scale=0.5, bias=0.25, size=64, batch="N"),
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, models: dict[str, Path]):
    with triton_repo_server(tmp_path_factory, models, max_batch=8) as running:
        yield running


def _feed(session: ort.InferenceSession, rng: np.random.Generator, batch: int = 1) -> dict[str, np.ndarray]:
    """A random input for every graph input: dynamic axes get `batch` first, 64 after."""
    feed = {}
    for i in session.get_inputs():
        shape = [d if isinstance(d, int) else (batch if n == 0 else 64) for n, d in enumerate(i.shape)]
        feed[i.name] = rng.random(shape, dtype=np.float32)
    return feed


def _infer(client, model: str, feed: dict[str, np.ndarray], outputs: list[str]) -> dict[str, np.ndarray]:
    inputs = []
    for name, array in feed.items():
        tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
        tensor.set_data_from_numpy(array)
        inputs.append(tensor)
    result = client.infer(model, inputs, outputs=[grpcclient.InferRequestedOutput(n) for n in outputs])
    return {n: result.as_numpy(n) for n in outputs}


def test_every_model_of_the_repository_is_loaded_and_ready(server: TritonServer, models: dict[str, Path]) -> None:
    index = {m["name"]: m.get("state") for m in server.repository_index()}
    assert index == {name: "READY" for name in models}
    client = grpcclient.InferenceServerClient(server.grpc_url)
    for name in models:
        assert client.is_model_ready(name)
    meta = client.get_model_metadata("inswapper_128", as_json=True)
    assert [(t["name"], t["datatype"], t["shape"]) for t in meta["inputs"]] == [
        ("target", "FP32", ["-1", "3", "128", "128"]), ("source", "FP32", ["-1", "512"])]


@pytest.mark.parametrize("name", ["scrfd_10g", "arcface_w600k_r50", "inswapper_128", "2dfan4", "gfpgan_1.4"])
def test_answers_equal_onnx_runtime_on_the_same_input(server: TritonServer, models: dict[str, Path],
                                                      name: str) -> None:
    session = ort.InferenceSession(str(models[name]), providers=["CPUExecutionProvider"])
    feed = _feed(session, np.random.default_rng(7), batch=2 if name in ("arcface_w600k_r50", "gfpgan_1.4") else 1)
    outputs = [o.name for o in session.get_outputs()]
    want = dict(zip(outputs, session.run(outputs, feed)))
    got = _infer(grpcclient.InferenceServerClient(server.grpc_url), name, feed, outputs)
    for out in outputs:
        assert got[out].shape == want[out].shape, out
        # the server's env has its own onnxruntime (numpy<2): float rounding may differ, values may not
        np.testing.assert_allclose(got[out], want[out], rtol=1e-5, atol=1e-6, err_msg=out)


def test_concurrent_requests_are_batched_and_each_gets_its_own_answer(server: TritonServer,
                                                                      models: dict[str, Path]) -> None:
    session = ort.InferenceSession(str(models["inswapper_128"]), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    feeds = [_feed(session, rng, batch=1 + i % 2) for i in range(24)]  # batches of 1 and 2, mixed
    before = server.statistics("inswapper_128")
    answers: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    gate = threading.Barrier(6)

    def client_thread(k: int) -> None:
        try:
            client = grpcclient.InferenceServerClient(server.grpc_url)
            gate.wait(30)
            for i in range(k, len(feeds), 6):
                answers[i] = _infer(client, "inswapper_128", feeds[i], ["output"])["output"]
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=client_thread, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(answers) == len(feeds)
    for i, feed in enumerate(feeds):  # the batch was split back in the requests' order
        np.testing.assert_allclose(answers[i], session.run(["output"], feed)[0], rtol=1e-5, atol=1e-6)
    # The server counts an execution after its responses are sent: the last one's figures may
    # land a moment after its client has its answer.
    want = sum(len(f["target"]) for f in feeds)
    deadline = time.monotonic() + 10
    while True:
        after = server.statistics("inswapper_128")
        items = int(after["inference_count"]) - int(before["inference_count"])
        if items >= want or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    executions = int(after["execution_count"]) - int(before["execution_count"])
    assert items == want
    assert executions < len(feeds)  # requests from different clients shared executions
    assert any(int(b["batch_size"]) > 2 for b in after["batch_stats"])


@pytest.mark.slow
def test_restart_on_the_same_ports_and_no_process_left(server: TritonServer) -> None:
    grpc_url = server.grpc_url
    pgid = server.proc.pid
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)  # the server and its backend stubs are all gone
    assert not server.ready()
    server.start()
    assert server.grpc_url == grpc_url
    assert grpcclient.InferenceServerClient(grpc_url).is_model_ready("arcface_w600k_r50")


def test_a_killed_server_leaves_no_shared_memory_behind(server: TritonServer) -> None:
    regions = server._group_regions()
    assert regions and all(Path("/dev/shm", name).exists() for name in regions)  # one per backend stub
    server.kill()
    assert [name for name in regions if Path("/dev/shm", name).exists()] == []
    server.start()
    assert server.model_ready("arcface_w600k_r50")


@pytest.mark.slow
def test_a_port_taken_before_the_server_binds_it_is_replaced(server: TritonServer) -> None:
    other = TritonServer(server.repo)
    taken = other.grpc_url
    with socket.socket() as blocker:  # someone else binds the probed port first
        blocker.bind(("127.0.0.1", other.grpc_port))
        blocker.listen()
        with other:
            assert other.grpc_url != taken
            assert grpcclient.InferenceServerClient(other.grpc_url).is_server_ready()
