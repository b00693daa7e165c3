"""dlib's 68-point shape predictor read from its own file and run with numpy
(engines.dlib.shape): dlib's points, every box of a frame at once, and a clear error for a
file that is not a shape predictor."""
from __future__ import annotations

import cv2
import dlib
import numpy as np
import pytest

import engines.dlib.shape as dlib_shape
from engines.dlib.landmarker import DlibLandmarker
from engines.dlib.models import model_path, shared_model
from engines.dlib.shape import (
    ShapeFileError,
    ShapePredictor,
    _accumulate_rows,
    _Tokens,
    cache_dir,
    load_shape_model,
    read_shape_model,
)
from engines.frame_views import FrameViews
from stream.media.demo_clips import astronaut, group_picture


@pytest.fixture(scope="module")
def predictor() -> ShapePredictor:
    model, _ = shared_model("landmarks")
    return model


def _boxes() -> list[tuple[np.ndarray, list[tuple[int, int, int, int]]]]:
    """(grey picture, boxes): each face HOG finds in the installed pictures, that box moved
    and resized at random (boxes a tracker gives), and boxes cut by the picture's edges."""
    hog, _ = shared_model("hog")
    rng = np.random.default_rng(7)
    out = []
    for bgr in (astronaut(), group_picture()):
        gray = cv2.cvtColor(bgr, cv2.COLOR_BGR2GRAY)
        h, w = gray.shape
        boxes = []
        for r in hog(gray, 1):
            x0, y0, x1, y1 = r.left(), r.top(), r.right(), r.bottom()
            boxes.append((x0, y0, x1, y1))
            for dx, dy, ds in rng.integers(-12, 13, (8, 3)):
                boxes.append((x0 + dx, y0 + dy, x1 + dx + ds, y1 + dy + ds))
        boxes += [(-40, -30, 60, 70), (w - 70, h - 50, w + 30, h + 50), (w // 2, -80, w // 2 + 90, 10)]
        out.append((gray, boxes))
    return out


def test_the_points_are_dlibs_on_the_installed_faces(predictor: ShapePredictor) -> None:
    """The same points as dlib's own predictor. The leaves are added in dlib's order and the
    rest is numpy's own arithmetic (no BLAS), so on the machines we have every point is the
    same; the test allows a few faces to differ (a last bit of the fitted similarity, on
    another CPU's dlib build, can send a tree the other way, and the shape with it)."""
    dlib_predictor = dlib.shape_predictor(model_path("landmarks"))
    same = total = 0
    errors = []
    for gray, boxes in _boxes():
        got = predictor.predict(gray, boxes)
        for box, points in zip(boxes, got):
            theirs = np.array([(p.x, p.y) for p in dlib_predictor(gray, dlib.rectangle(*box)).parts()], np.float32)
            total += 1
            same += bool(np.array_equal(points, theirs))
            errors.append(float(np.abs(points - theirs).mean()))
    assert total >= 60
    assert same >= 0.95 * total, f"{same} of {total} faces have dlib's points"
    assert np.mean(errors) < 0.05


def test_a_batch_gives_each_box_what_it_gives_alone(predictor: ShapePredictor) -> None:
    (gray, boxes), _ = _boxes()
    together = predictor.predict(gray, boxes)
    alone = np.stack([predictor.predict(gray, [b])[0] for b in boxes])
    assert together.shape == (len(boxes), 68, 2) and together.dtype == np.float32
    assert np.array_equal(together, alone)
    assert predictor.predict(gray, []).shape == (0, 68, 2)


def test_the_leaf_table_and_the_walk_down_the_tree_agree(predictor: ShapePredictor) -> None:
    above = np.random.default_rng(1).random((3, 500, 15)) < 0.5
    table = predictor._leaves_reached(above)
    walked = predictor._leaves_reached(above, walk=True)
    assert np.array_equal(table, walked) and table.min() >= 0 and table.max() <= 15
    # All left: the leftmost leaf; all right: the rightmost.
    assert predictor._leaves_reached(np.ones((1, 1, 15), bool))[0, 0] == 0
    assert predictor._leaves_reached(np.zeros((1, 1, 15), bool))[0, 0] == 15


def test_leaves_added_by_definition_in_order_give_the_same_points(predictor: ShapePredictor) -> None:
    """The rows' sum that numpy does down the first axis is the sum in order (checked when a
    predictor is made; otherwise it accumulates, which is in order by definition)."""
    (gray, boxes), _ = _boxes()
    quick = predictor.predict(gray, boxes)
    predictor._sum_rows = _accumulate_rows
    try:
        slow = predictor.predict(gray, boxes)
    finally:
        predictor._sum_rows = dlib_shape._sum_rows if dlib_shape._sums_in_order() else _accumulate_rows
    assert np.array_equal(quick, slow)


def test_the_landmarker_gives_the_predictors_points_for_each_box(predictor: ShapePredictor) -> None:
    bgr = group_picture()
    frame = FrameViews(bgr)
    hog, _ = shared_model("hog")
    boxes = [(r.left(), r.top(), r.right() + 1, r.bottom() + 1) for r in hog(frame.gray, 1)]
    lm = DlibLandmarker()
    many = lm.forward_many(frame, boxes)
    assert len(many) == len(boxes) >= 4 and lm.calls == len(boxes)
    for box, points in zip(boxes, many):
        assert np.array_equal(points, lm.forward(frame, box))
        x0, y0, x1, y1 = box
        centre = points.mean(axis=0)
        assert x0 < centre[0] < x1 and y0 < centre[1] < y1
    assert lm.forward_many(frame, []) == []


def _pack(value: int) -> bytes:
    """dlib's pack_int: a control byte (length, 0x80 for negative), then the magnitude's
    bytes, least significant first (at least one)."""
    magnitude = abs(value)
    raw = magnitude.to_bytes(max(1, (magnitude.bit_length() + 7) // 8), "little")
    return bytes([len(raw) | (0x80 if value < 0 else 0)]) + raw


@pytest.mark.parametrize("block, chunk", [(1 << 22, 1024), (4096, 64), (777, 32)])
def test_the_integers_are_read_whoever_cuts_the_file_where(tmp_path, monkeypatch, block: int, chunk: int) -> None:
    """dlib's integers of every length, read back in order, with the file's blocks and the
    parallel walks' chunks cutting them anywhere."""
    rng = np.random.default_rng(3)
    sizes = rng.integers(0, 64, 20000)
    values = [int(v) * (-1 if s else 1) for v, s in zip(rng.integers(0, 2 ** 62, 20000) >> sizes,
                                                           rng.integers(0, 2, 20000))]
    values += [0, 1, -1, 255, 256, -(2 ** 63 - 1), 2 ** 63 - 1]
    path = tmp_path / "ints.dat"
    path.write_bytes(b"".join(_pack(v) for v in values))
    monkeypatch.setattr(dlib_shape, "BLOCK", block)
    monkeypatch.setattr(dlib_shape, "CHUNK", chunk)
    tokens = _Tokens(path)
    try:
        got = [int(v) for v in tokens.take(12345)] + [int(v) for v in tokens.take(len(values) - 12345)]
        assert tokens.at_end()
    finally:
        tokens.close()
    assert got == values


@pytest.mark.slow
def test_a_file_that_is_not_a_shape_predictor_is_named_with_its_problem(tmp_path, predictor: ShapePredictor) -> None:
    data = open(model_path("landmarks"), "rb").read()
    (tmp_path / "cut.dat").write_bytes(data[: len(data) // 2])
    with pytest.raises(ShapeFileError, match=r"cut\.dat: the file ends"):
        ShapePredictor(tmp_path / "cut.dat")
    (tmp_path / "extra.dat").write_bytes(data + _pack(7))
    with pytest.raises(ShapeFileError, match=r"extra\.dat: bytes after the model"):
        ShapePredictor(tmp_path / "extra.dat")
    (tmp_path / "resnet.dat").write_bytes(open(model_path("embedding"), "rb").read(1 << 20))
    with pytest.raises(ShapeFileError, match=r"resnet\.dat: "):
        ShapePredictor(tmp_path / "resnet.dat")
    (tmp_path / "noise.dat").write_bytes(np.random.default_rng(0).integers(0, 256, 1 << 16, np.uint8).tobytes())
    with pytest.raises(ShapeFileError, match=r"noise\.dat: "):
        ShapePredictor(tmp_path / "noise.dat")
    (tmp_path / "v2.dat").write_bytes(_pack(2) + data[2:])
    with pytest.raises(ShapeFileError, match=r"v2\.dat: not a shape predictor of a version this reader knows"):
        ShapePredictor(tmp_path / "v2.dat")
    with pytest.raises(ShapeFileError, match=r"missing\.dat: cannot be read"):
        ShapePredictor(tmp_path / "missing.dat")


def _same_model(a, b) -> bool:
    return a.depth == b.depth and all(np.array_equal(getattr(a, k), getattr(b, k)) for k in
                                      ("mean_shape", "split_a", "split_b", "threshold", "leaves", "anchor", "offset"))


@pytest.mark.slow
def test_the_model_read_once_is_loaded_from_the_cache_afterwards(tmp_path, monkeypatch) -> None:
    """The first process reads dlib's file (1.3 s) and keeps the arrays in the user's cache;
    the next loads them (0.05 s). A changed file, a damaged cache or one that cannot be
    written cost only the reading."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = tmp_path / "shape.dat"
    source.write_bytes(open(model_path("landmarks"), "rb").read())
    first = load_shape_model(source)
    kept = list(cache_dir().glob("shape.*.npz"))
    assert cache_dir() == tmp_path / "cache" / "facestream" / "dlib" and len(kept) == 1
    assert not list(cache_dir().glob("*.part"))
    read = []
    monkeypatch.setattr(dlib_shape, "read_shape_model", lambda p: read.append(p) or read_shape_model(p))
    assert _same_model(load_shape_model(source), first) and read == []  # from the cache
    kept[0].write_bytes(kept[0].read_bytes()[:1000])  # damaged: read again, and kept again
    assert _same_model(load_shape_model(source), first) and len(read) == 1
    assert _same_model(load_shape_model(source), first) and len(read) == 1
    with open(source, "ab") as f:  # the file changed: its cache is another
        f.write(_pack(7))
    with pytest.raises(ShapeFileError, match="bytes after the model"):
        load_shape_model(source)
    monkeypatch.setenv("XDG_CACHE_HOME", str(source))  # a file where the folder should be
    source.write_bytes(open(model_path("landmarks"), "rb").read())
    assert _same_model(load_shape_model(source), first) and len(read) == 3
