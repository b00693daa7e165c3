"""Configuration loading and the slot allocators (the pinned one with a stand-in for cupy)."""
from __future__ import annotations

import gc
import sys
import types
import weakref

import numpy as np
import pytest

from stream.config import load_config, preset_names
from stream.errors import ConfigError
from stream.runtime.allocator import NumpyAllocator, PinnedAllocator, default_allocator
from stream.runtime.ring import Ring


@pytest.mark.parametrize("preset", preset_names())
def test_every_preset_loads(preset: str) -> None:
    cfg = load_config(preset)
    assert cfg.detect.every >= 1 and cfg.encode.preset


def test_the_shipped_presets_are_found() -> None:
    assert {"fast", "quality"} <= set(preset_names())


def test_runtime_options_come_from_the_config() -> None:
    cfg = load_config(None, ["runtime.providers=cuda", "runtime.device_id=1", "runtime.trt_fp16=true",
                             "runtime.trt_cache_dir=/tmp/trt", "runtime.gpu_mem_limit=1000000"])
    assert cfg.runtime.providers == "cuda" and cfg.runtime.device_id == 1 and cfg.runtime.trt_fp16
    assert cfg.runtime.trt_cache_dir == "/tmp/trt" and cfg.runtime.gpu_mem_limit == 1000000
    with pytest.raises(ConfigError, match="runtime.device_id"):
        load_config(None, ["runtime.device_id=-1"])
    with pytest.raises(ConfigError, match="swap.blend"):
        load_config(None, ["swap.blend=smudge"])


def test_overrides_are_typed_and_win_over_the_preset() -> None:
    cfg = load_config("quality", ["detect.every=7", "swap.color_transfer=false", "encode.preset=fast",
                                  'select.mapping=[["a.png", "b.png"]]', "select.mode=mapping"])
    assert cfg.detect.every == 7 and cfg.swap.color_transfer is False
    assert cfg.encode.preset == "fast" and cfg.encode.crf == 18  # the rest from the preset
    assert cfg.swap.shape > load_config(None).swap.shape  # quality takes more of the source's proportions
    assert cfg.swap.shape_turned == load_config(None).swap.shape  # ... on faces that allow it
    # ... and blends in two bands: the fine detail's edge narrower, the light's wider, but on turned faces
    assert load_config(None).swap.fine_feather == 0 and 0 < cfg.swap.fine_feather < load_config(None).swap.feather
    assert cfg.swap.feather > load_config(None).swap.feather == cfg.swap.feather_turned
    assert load_config("quality", ["swap.feather_turned=null"]).swap.feather_turned is None  # a number or null
    assert cfg.select.mapping == [["a.png", "b.png"]]


@pytest.mark.parametrize("override, needle", [
    ("detect.every=0", "detect.every"),
    ("swap.blend=smudge", "swap.blend"),
    ("swap.detail=-1", "swap.detail"),
    ("swap.shading=1.5", "swap.shading"),
    ("swap.fine_feather=0.6", "swap.fine_feather"),
    ("swap.feather_turned=-0.1", "swap.feather_turned"),
    ("select.mode=everyone", "select.mode"),
    ("encode.crf=99", "encode.crf"),
    ("nosuch=1", "nosuch"),
    ("detect.nosuch=1", "detect.nosuch"),
    ("detect=3", "detect"),
    ("novalue", "section.field=value"),
])
def test_bad_overrides_name_the_field(override: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        load_config(None, [override])


@pytest.mark.parametrize("override, message", [
    ("swap.feather=abc", "swap.feather must be a number, got 'abc'"),
    ("swap.feather_turned=abc", "swap.feather_turned must be a number, got 'abc'"),  # a number or null
    ("detect.every=often", "detect.every must be a whole number, got 'often'"),
    ("detect.every=2.5", "detect.every must be a whole number, got 2.5"),
    ("track.occlusion=1", "track.occlusion must be true or false, got 1"),
    ("track.landmarks_every=0", "track.landmarks_every must be a whole number from 1 to 8, got 0"),
    ("track.occlusion_every=9", "track.occlusion_every must be a whole number from 1 to 8, got 9"),
    ("detect.refine_every=0", "detect.refine_every must be a whole number from 1 to 30, got 0"),
    ("detect.scan_every=0", "detect.scan_every must be a whole number from 1 to 8, got 0"),
    ("encode.preset=3", "encode.preset must be text, got 3"),
])
def test_a_value_of_the_wrong_kind_is_named_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert str(err.value) == message


def test_unknown_preset_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="fast"):
        load_config("turbo")


def test_numpy_allocator_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # "import cupy" fails, as on a CPU machine
    assert isinstance(default_allocator(), NumpyAllocator)


def test_pinned_allocator_builds_arrays_on_pinned_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # cupy is not installable without CUDA here; a stand-in with cupy's API records the calls.
    requested: list[int] = []

    def alloc_pinned_memory(nbytes: int) -> bytearray:
        requested.append(nbytes)
        return bytearray(nbytes)

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        alloc_pinned_memory=alloc_pinned_memory,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    alloc = default_allocator()
    assert isinstance(alloc, PinnedAllocator)
    ring = Ring("A", 3, {"image": ((72, 128, 3), np.uint8), "blob": ((2, 3, 16, 16), np.float32)},
                allocator=alloc)
    assert requested == [72 * 128 * 3, 2 * 3 * 16 * 16 * 4] * 3
    slot = ring.acquire()
    slot.buffers["image"][:] = 7
    slot.buffers["blob"][:] = 0.5
    assert slot.buffers["image"].shape == (72, 128, 3) and slot.buffers["blob"].dtype == np.float32
    assert int(slot.buffers["image"].sum()) == 7 * 72 * 128 * 3


def test_pinned_blocks_are_freed_with_their_ring(monkeypatch: pytest.MonkeyPatch) -> None:
    class Block(bytearray):  # a pinned block that can be watched (bytearray takes no weakref)
        pass

    blocks: list[weakref.ref] = []

    def alloc_pinned_memory(nbytes: int) -> Block:
        block = Block(nbytes)
        blocks.append(weakref.ref(block))
        return block

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        alloc_pinned_memory=alloc_pinned_memory,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    alloc = default_allocator()  # lives on, as a job's allocator does across its pipelines
    ring = Ring("B", 2, {"target": ((4, 3, 16, 16), np.float32)}, allocator=alloc)
    kept = ring.slots[0].buffers["target"]
    del ring
    gc.collect()
    # the block under an array still in use stays; the others went back to the pool
    assert [b() is not None for b in blocks] == [True, False]
    kept[:] = 1.0
    assert float(kept.sum()) == 4 * 3 * 16 * 16
