"""The swaps a live run makes off the frame path (stream/stages/carry.py) go through the
inference-runtime seam like every other model call: the same carried faces on ONNX Runtime,
OpenVINO's CPU device and TensorRT (its stand-in: no GPU here; tests/fixtures/fake_tensorrt.py).
Triton's is tests/test_triton_runtime.py's swap at a cadence against the local one."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from engines.backends.base import InferenceRuntime, RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.face import Face
from engines.models.inswapper import InSwapper
from stream.runtime.metrics import Metrics
from stream.stages.carry import CarriedSwapper
from tests.fixtures import make_inswapper
from tests.fixtures.fake_tensorrt import V10, install_fake_gpu
from tools.cost_models import mean_face_68


class _Swapper:
    """InSwapper behind the Swapper/CarrySwapper roles with a fixed latent as its source."""

    def __init__(self, runtime: InferenceRuntime) -> None:
        self.swapper = InSwapper(runtime)
        self.name = "inswapper"

    @property
    def calls(self) -> int:
        return self.swapper.calls

    def open(self) -> None:
        self.swapper.open()

    def cut(self, frame, face, source):
        return self.swapper.cut_face(frame, face, source)

    def swap_cut(self, cut):
        return self.swapper.swap_cut(cut)

    def carry_many(self, frame, faces, swaps):
        return self.swapper.carry_many(frame, faces, swaps)

    def paste(self, frame, face, result) -> None:
        result.paste_into(frame)


def _frames(n: int) -> tuple[list[np.ndarray], list[Face]]:
    """A textured 320x240 picture with one face's landmarks drifting right, n frames."""
    rng = np.random.default_rng(0)
    base = (rng.random((240, 320, 3)) * 255).astype(np.uint8)
    shape = mean_face_68()
    shape = (shape - shape.mean(axis=0)) / np.ptp(shape[:, 0]) * 110
    frames, faces = [], []
    for i in range(n):
        pts = (shape + np.array([140 + 3 * i, 125])).astype(np.float32)
        box = (float(pts[:, 0].min()), float(pts[:, 1].min()), float(pts[:, 0].max()), float(pts[:, 1].max()))
        frames.append(base.copy())
        faces.append(Face(box, pts, track_id=0))
    return frames, faces


def _carried(runtime: InferenceRuntime) -> np.ndarray:
    """Six frames through a live CarriedSwapper on `runtime` (each waits for the worker's first
    swap to be there, not for later ones): the first frame as pasted, which shows the swap made
    on it (the later ones, whichever swap the worker had made by then)."""
    swapper = _Swapper(runtime)
    swapper.open()
    latent = np.ones((1, 512), np.float32) / np.sqrt(512)
    carried = CarriedSwapper(swapper, None, live=True, metrics=Metrics())
    frames, faces = _frames(6)
    out = []
    try:
        for frame, face in zip(frames, faces):
            batch = carried.prepare_batch(frame, [face], [latent], {})
            swapped = carried.forward_batch(batch, {}, {})
            deadline = time.monotonic() + 60
            while carried.store.get(0) is None and time.monotonic() < deadline:
                time.sleep(0.01)  # the first swap: later frames carry it whatever the worker does
            results = carried.finish_batch(frame, batch, swapped)
            assert results[0] is not None
            carried.paste(frame, face, results[0])
            out.append(frame)
    finally:
        carried.close()
    assert carried.metrics.swaps_made >= 1 and runtime.calls >= 1
    return out[0]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_inswapper(tmp_path_factory.mktemp("carry") / "inswapper_128.onnx", seed=5)


def test_carried_swaps_run_on_openvino_as_on_onnx_runtime(model: Path) -> None:
    pytest.importorskip("openvino")
    from engines.backends.openvino import OpenVinoRuntime

    want = _carried(OrtRuntime(model, RuntimeOptions(providers="cpu", intra_threads=1)))
    got = _carried(OpenVinoRuntime(model, RuntimeOptions(kind="openvino", device="CPU", intra_threads=1)))
    # Their kernels differ in the last bits: a grey level where a value sits on a rounding edge.
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 2


def test_carried_swaps_run_on_tensorrt(model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engines.backends.trt.runtime import TrtRuntime

    fake, _ = install_fake_gpu(monkeypatch, V10)
    want = _carried(OrtRuntime(model, RuntimeOptions(providers="cpu", intra_threads=1)))
    got = _carried(TrtRuntime(model, RuntimeOptions(kind="tensorrt", trt_cache_dir=str(tmp_path))))
    assert len(fake.builds) == 1  # the swaps ran on the engine it built
    np.testing.assert_array_equal(got, want)
