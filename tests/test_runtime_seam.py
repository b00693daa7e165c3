"""The inference-runtime seam: models get their runtime from the job's factory, with the
config's runtime options and the job's host allocator; a runtime is chosen by name."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engines.backends import registry as runtime_registry
from engines.backends.base import RuntimeOptions
from engines.backends.ort import OrtRuntime
from engines.backends.registry import runtime_factory
from stream.config import load_config
from stream.errors import ConfigError
from stream.job.swap_job import SwapJob
from stream.runtime.allocator import NumpyAllocator
from tests.fixtures import build_scrfd_model, make_arcface, make_gfpgan, make_inswapper


class MarkedAllocator(NumpyAllocator):
    """A host allocator the test can recognise (stands in for the pinned one)."""

    name = "marked"

    def __init__(self) -> None:
        self.arrays = 0

    def empty(self, shape: tuple[int, ...], dtype: np.dtype | type) -> np.ndarray:
        self.arrays += 1
        return super().empty(shape, dtype)


def test_an_unknown_runtime_is_a_one_line_error_listing_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown runtime 'tensorrt-native'; known: auto, onnxruntime"):
        runtime_factory(RuntimeOptions(kind="tensorrt-native"))


def test_the_factory_hands_options_and_allocator_to_each_runtime(tmp_path: Path) -> None:
    options = RuntimeOptions(providers="cpu", intra_threads=1, device_id=2, trt_fp16=True)
    alloc = MarkedAllocator()
    rt = runtime_factory(options, alloc)(tmp_path / "m.onnx")
    assert isinstance(rt, OrtRuntime) and rt.options is options and rt.allocator is alloc
    assert rt.host_buffer("x", (2, 3)).shape == (2, 3) and alloc.arrays == 1


def test_the_job_builds_every_model_on_runtimes_of_the_configured_kind(
        tmp_path: Path, source_photo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    build_scrfd_model(tmp_path / "det_10g.onnx", seed=3)
    make_arcface(tmp_path / "w600k_r50.onnx", seed=4)
    make_inswapper(tmp_path / "inswapper_128.onnx", seed=5)
    make_gfpgan(tmp_path / "gfpgan_1.4.onnx")
    made: list[OrtRuntime] = []

    def recording(path, options, allocator):  # a new runtime kind, registered by name
        made.append(OrtRuntime(path, options, allocator))
        return made[-1]

    monkeypatch.setitem(runtime_registry.RUNTIMES, "recording", recording)
    cfg = load_config(None, ["engine=neural", f"models.dir={tmp_path}", "models.landmarker=null",
                             "runtime.kind=recording", "runtime.providers=cpu", "runtime.intra_threads=1",
                             "runtime.trt_cache_dir=/tmp/engines", "enhance.enabled=true"])
    alloc = MarkedAllocator()
    job = SwapJob(cfg, [str(source_photo)], allocator=alloc)
    job.open()
    assert sorted(rt.path.name for rt in made) == ["det_10g.onnx", "gfpgan_1.4.onnx", "inswapper_128.onnx",
                                                   "w600k_r50.onnx"]
    assert all(rt.allocator is alloc and rt.options.trt_cache_dir == "/tmp/engines" for rt in made)
    assert all(rt.is_open and rt.providers == ["CPUExecutionProvider"] for rt in made)


def test_an_unknown_runtime_kind_in_the_config_fails_when_the_job_opens(source_photo: Path) -> None:
    job = SwapJob(load_config(None, ["runtime.kind=nope"]), [str(source_photo)])
    with pytest.raises(ValueError, match="unknown runtime 'nope'"):
        job.open()


def test_bad_runtime_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="runtime.gpu_mem_limit"):
        load_config(None, ["runtime.gpu_mem_limit=0"])
