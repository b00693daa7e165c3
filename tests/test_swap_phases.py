"""The swapper's three phases on the pipeline's threads: crops into ring B's buffers on the
analyse thread, one batched model call per frame on the swap thread (fed from those
buffers, its output into ring C's), decode and blend on the composite thread; frame N's
model call overlaps frame N+1's crops."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from engines.backends.base import RuntimeOptions, TensorSpec
from engines.backends.ort import OrtRuntime
from engines.face import Face
from engines.models.adapters import InSwapperSwapper
from engines.models.inswapper import InSwapper
from engines.registry import EngineSet
from stream.config import load_config
from stream.job.assembly import assemble
from stream.runtime.allocator import NumpyAllocator
from stream.runtime.slot import Slot
from tests.fixtures import make_inswapper, pattern_frame

H, W = 360, 640
FACES = ((150.0, 160.0, 110.0), (330.0, 170.0, 120.0), (500.0, 190.0, 100.0))  # cx, cy, size


def _template() -> np.ndarray:
    """68 points in [-0.5, 0.5] laid out like dlib's: eyes, nose tip and mouth corners where a
    face has them (the five points the swapper aligns on), the rest scattered."""
    rng = np.random.default_rng(3)
    pts = rng.uniform(-0.45, 0.45, (68, 2))
    pts[0], pts[16] = (-0.5, -0.5), (0.5, 0.5)
    pts[36:42] = (-0.2, -0.15) + rng.uniform(-0.03, 0.03, (6, 2))
    pts[42:48] = (0.2, -0.15) + rng.uniform(-0.03, 0.03, (6, 2))
    pts[30] = (0.0, 0.05)
    pts[48], pts[54] = (-0.17, 0.25), (0.17, 0.25)
    return pts.astype(np.float32)


TEMPLATE = _template()


class FixedDetector:
    """The same faces in every frame; `delay` s of work per call."""

    name = "fixed"

    def __init__(self, delay: float = 0.0) -> None:
        self.calls, self.delay = 0, delay

    def open(self) -> None: ...

    def forward(self, frame):
        self.calls += 1
        time.sleep(self.delay)
        return [((cx - 0.6 * s, cy - 0.5 * s, cx + 0.6 * s, cy + 0.7 * s), 1.0) for cx, cy, s in FACES]


class FixedLandmarker:
    name = "fixed"

    def __init__(self, delay: float = 0.0) -> None:
        self.calls, self.delay = 0, delay

    def open(self) -> None: ...

    def forward(self, frame, box):
        self.calls += 1
        cx, cy = (box[0] + box[2]) / 2, box[1] + 0.5 * (box[2] - box[0]) / 1.2
        s = (box[2] - box[0]) / 1.2
        return TEMPLATE * s + np.array([cx, cy], np.float32)

    def forward_many(self, frame, boxes):
        time.sleep(self.delay)
        return [self.forward(frame, b) for b in boxes]


class CountingAllocator(NumpyAllocator):
    """Numpy memory, every array it made kept so a test can tell its buffers apart."""

    name = "counting"

    def __init__(self) -> None:
        self.made: list[np.ndarray] = []

    def empty(self, shape, dtype) -> np.ndarray:
        arr = super().empty(shape, dtype)
        self.made.append(arr)
        return arr

    def owns(self, arr: np.ndarray) -> bool:
        return any(np.shares_memory(arr, m) for m in self.made)


class RecordingRuntime(OrtRuntime):
    """ONNX Runtime, each model call recorded: its thread, its feeds and its output arrays."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.seen: list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]] = []

    def run(self, feeds, outputs=None):
        result = super().run(feeds, outputs)
        self.seen.append((threading.current_thread().name, dict(feeds), result))
        return result

    def run_into(self, feeds, outputs):
        result = super().run_into(feeds, outputs)
        self.seen.append((threading.current_thread().name, dict(feeds), result))
        return result


class SlowRuntime:
    """The inswapper's I/O with a model that takes `delay` s (a GPU's copies and inference,
    standing still); each call's interval recorded."""

    def __init__(self, path: Path, delay: float) -> None:
        self.path, self.delay, self.calls = path, delay, 0
        self.inputs = [TensorSpec("target", (None, 3, 128, 128), "tensor(float)"),
                       TensorSpec("source", (None, 512), "tensor(float)")]
        self.outputs = [TensorSpec("output", (None, 3, 128, 128), "tensor(float)")]
        self.intervals: list[tuple[float, float]] = []
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def open(self) -> None:
        self._open = True

    def open_expecting(self, what: str) -> None:
        self.open()

    def run(self, feeds, outputs=None):
        t0 = time.perf_counter()
        time.sleep(self.delay)
        self.calls += 1
        out = {"output": np.clip(feeds["target"] * 0.5 + 0.25, 0, 1)}
        self.intervals.append((t0, time.perf_counter()))
        return out

    def host_buffer(self, name, shape, dtype=np.float32):
        return np.empty(shape, dtype)

    def close(self) -> None:
        self._open = False


class ListSource:
    wait_s = 0.0

    def __init__(self, frames: list[np.ndarray]) -> None:
        self.frames, self.i = frames, 0

    def read_into(self, slot: Slot) -> bool:
        if self.i >= len(self.frames):
            return False
        slot.buffers["image"][...] = self.frames[self.i]
        slot.seq, slot.pts, slot.time_base = self.i, None, None
        slot.capture_time = time.monotonic()
        self.i += 1
        return True

    def close(self) -> None: ...


class KeepSink:
    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []

    def write(self, slot: Slot) -> None:
        self.frames.append(slot.image.copy())

    def close(self) -> None: ...


def _swapper(runtime) -> tuple[InSwapperSwapper, np.ndarray]:
    model = InSwapper(runtime)
    model.open()
    latent = model.prepare_source(np.random.default_rng(1).standard_normal(512).astype(np.float32))
    return InSwapperSwapper(model, embedder=None), latent  # type: ignore[arg-type]


def _run(swapper, latent, frames: int, allocator=None, delay: float = 0.0, staged: bool = True):
    engines = EngineSet("fixed", FixedDetector(delay), FixedLandmarker(delay), None, swapper,  # type: ignore[arg-type]
                        FixedDetector())
    cfg = load_config(None, ["detect.every=1", f"pipeline.staged={'true' if staged else 'false'}"])
    source = ListSource([pattern_frame(i, W, H) for i in range(frames)])
    sink = KeepSink()
    pipeline = assemble(cfg, engines, [latent], [], (H, W), source, sink, live=False,
                        allocator=allocator or CountingAllocator())
    metrics = pipeline.runner.run(staged=staged)
    return pipeline, metrics, sink


@pytest.fixture(scope="module")
def model_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("swap-phases")
    return {"dynamic": make_inswapper(folder / "dyn.onnx", seed=5, batch=None),
            "batch1": make_inswapper(folder / "b1.onnx", seed=5, batch=1)}


def test_one_batched_model_call_per_frame_fed_from_ring_b_and_written_into_ring_c(
        model_files: dict[str, Path]) -> None:
    runtime = RecordingRuntime(model_files["dynamic"], RuntimeOptions(providers="cpu", io_binding=True))
    swapper, latent = _swapper(runtime)
    alloc = CountingAllocator()
    frames = 6
    pipeline, metrics, _ = _run(swapper, latent, frames, alloc)
    assert metrics.faces_swapped == frames * len(FACES)
    assert len(runtime.seen) == frames  # one call per frame for its three faces
    ring_b, ring_c = pipeline.rings[1], pipeline.rings[2]
    b_targets = [s.buffers["target"] for s in ring_b.slots]
    b_sources = [s.buffers["source"] for s in ring_b.slots]
    c_outputs = [s.buffers["output"] for s in ring_c.slots]
    max_faces = load_config(None).pipeline.max_faces
    assert all(b.shape == (max_faces, 3, 128, 128) and b.dtype == np.float32 for b in b_targets)
    for thread, feeds, result in runtime.seen:
        assert thread == "fs-swap"
        assert feeds["target"].shape == (len(FACES), 3, 128, 128)
        # the model read the ring slot's own memory, which the pipeline's allocator made
        assert any(np.shares_memory(feeds["target"], b) for b in b_targets)
        assert any(np.shares_memory(feeds["source"], b) for b in b_sources)
        assert alloc.owns(feeds["target"]) and alloc.owns(feeds["source"])
        # and wrote its output into a ring-C slot's buffer, also the allocator's
        assert any(np.shares_memory(result["output"], c) for c in c_outputs)
        assert alloc.owns(result["output"])


def test_a_batch_1_export_runs_once_per_face_into_the_same_buffers(model_files: dict[str, Path]) -> None:
    runtime = RecordingRuntime(model_files["batch1"], RuntimeOptions(providers="cpu", io_binding=True))
    swapper, latent = _swapper(runtime)
    alloc = CountingAllocator()
    _, metrics, _ = _run(swapper, latent, 3, alloc)
    assert metrics.faces_swapped == 3 * len(FACES) and len(runtime.seen) == 3 * len(FACES)
    assert all(f["target"].shape[0] == 1 and alloc.owns(f["target"]) and alloc.owns(r["output"])
               for _, f, r in runtime.seen)


def test_crops_on_the_analyse_thread_model_on_swap_blend_on_composite(
        model_files: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    threads: dict[str, set[str]] = {"crop": set(), "blend": set()}
    prepare_crop_into, blend_crop = InSwapper.prepare_crop_into, InSwapper.blend_crop

    def crop(*args, **kwargs):
        threads["crop"].add(threading.current_thread().name)
        return prepare_crop_into(*args, **kwargs)

    def blend(self, *args, **kwargs):
        threads["blend"].add(threading.current_thread().name)
        return blend_crop(self, *args, **kwargs)

    monkeypatch.setattr(InSwapper, "prepare_crop_into", crop)
    monkeypatch.setattr(InSwapper, "blend_crop", blend)
    runtime = RecordingRuntime(model_files["dynamic"], RuntimeOptions(providers="cpu"))
    swapper, latent = _swapper(runtime)
    _, metrics, _ = _run(swapper, latent, 4)
    assert metrics.faces_swapped == 4 * len(FACES)
    assert threads == {"crop": {"fs-analyse"}, "blend": {"fs-composite"}}
    assert {thread for thread, _, _ in runtime.seen} == {"fs-swap"}


def test_frame_n_inference_overlaps_frame_n_plus_1_crops(model_files: dict[str, Path],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = SlowRuntime(model_files["dynamic"], delay=0.1)
    swapper, latent = _swapper(runtime)
    prepared: list[tuple[float, float]] = []
    prepare_batch = InSwapper.prepare_batch

    def timed(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return prepare_batch(self, *args, **kwargs)
        finally:
            prepared.append((t0, time.perf_counter()))

    monkeypatch.setattr(InSwapper, "prepare_batch", timed)
    frames = 6
    _, metrics, _ = _run(swapper, latent, frames, delay=0.03)
    # every frame has faces: the k-th crop batch and the k-th model call are frame k's
    assert len(prepared) == frames and len(runtime.intervals) == frames
    overlaps = [n for n in range(frames - 1)
                if prepared[n + 1][0] < runtime.intervals[n][1] and runtime.intervals[n][0] < prepared[n + 1][1]]
    assert overlaps, f"model calls {runtime.intervals}, crops {prepared}"


@pytest.mark.parametrize("kind", ["dynamic", "batch1"])
def test_the_three_phases_give_forward_many_exactly(model_files: dict[str, Path], kind: str) -> None:
    runtime = OrtRuntime(model_files[kind], RuntimeOptions(providers="cpu", io_binding=True))
    swapper, latent = _swapper(runtime)
    model = swapper.swapper
    frame = pattern_frame(3, W, H)
    faces = [Face((0, 0, 1, 1), TEMPLATE * s + np.array([cx, cy], np.float32)) for cx, cy, s in FACES]
    expected = model.forward_many(frame, faces, [latent] * len(faces))
    spec = swapper.batch_spec(5)
    inputs = {k: np.full(shape, np.nan, dtype) for k, (shape, dtype) in spec.inputs.items()}
    outputs = {k: np.full(shape, np.nan, dtype) for k, (shape, dtype) in spec.outputs.items()}
    batch = swapper.prepare_batch(frame, faces, [latent] * len(faces), inputs)
    swapped = swapper.forward_batch(batch, inputs, outputs)
    assert np.shares_memory(swapped, outputs["output"])  # the bound runtime wrote there
    got = swapper.finish_batch(frame, batch, swapped)
    assert len(got) == len(expected) == len(faces)
    for a, b in zip(got, expected):
        assert a is not None and b is not None
        assert a.region == b.region and np.array_equal(a.patch, b.patch) and np.array_equal(a.valid, b.valid)
    single = model.forward(frame, faces[0], latent)
    assert single is not None and np.array_equal(single.patch, got[0].patch)
    with pytest.raises(ValueError, match="6 faces but the batch buffers hold 5"):
        swapper.prepare_batch(frame, faces * 2, [latent] * 6, inputs)


def test_run_into_writes_where_bound_and_returns_its_own_arrays_otherwise(model_files: dict[str, Path]) -> None:
    rng = np.random.default_rng(0)
    feeds = {"target": rng.random((2, 3, 128, 128), np.float32), "source": rng.random((2, 512), np.float32)}
    plain = OrtRuntime(model_files["dynamic"], RuntimeOptions(providers="cpu"))
    bound = OrtRuntime(model_files["dynamic"], RuntimeOptions(providers="cpu", io_binding=True))
    expected = plain.run(feeds)["output"]
    out = np.zeros((2, 3, 128, 128), np.float32)
    assert bound.run_into(feeds, {"output": out})["output"] is out and np.array_equal(out, expected)
    mine = np.zeros((2, 3, 128, 128), np.float32)
    got = plain.run_into(feeds, {"output": mine})["output"]
    assert np.array_equal(got, expected) and not np.shares_memory(got, mine)
    assert bound.calls == 1 and plain.calls == 2
