"""dlib's shape predictor (the 68-point landmark model), read from its own file and run
with numpy, every face of a frame at once.

dlib's own predictor takes about 1-2.5 ms a face on these cores and holds the GIL all the
while: in a staged run with six faces it held the GIL for about 40% of the run (py-spy
--gil), and the GIL, not the cores, set the pace of every stage. The same model run as
array gathers and sums lets the GIL go for most of its time, and takes the faces of a
frame together.

The model is an ensemble of regression trees (Kazemi and Sullivan, 2014), as dlib's
shape_predictor.h evaluates it: the shape starts as the mean shape in the face box's unit
square; at each cascade level, a similarity fitted from the mean shape to the current shape
places the level's feature pixels (each an offset from one of the current points), their
grey values are read from the picture (0 off it), and each tree of the level walks from
its root, left where pixel a minus pixel b is above its threshold, to a leaf whose vector
is added to the shape. The points are mapped from the unit square to the box and rounded
to whole pixels, as dlib's are. The leaves are added in dlib's order (tree by tree, in
float32); what differs from dlib is float rounding in the fitted similarity, which moves a
feature pixel now and then: tests/test_dlib_shape.py holds the points to dlib's own.

The file is dlib's serialization of the model (shape_predictor.h, serialize.h, matrix.h,
vector.h and float_details.h say how each field is written): every number is an integer
written as a control byte (its length in the low four bits, 0x80 for negative) and that
many bytes, least significant first, and a float is two of them (a mantissa and a power of
two). About 33 million of them: read one at a time in Python they take 16 s. The reader
finds where they start with array operations instead (`_token_starts`), a block of the
file at a time, in about 1.3 s (dlib reads it in 0.5 s). The arrays read are kept in the
user's cache (`$XDG_CACHE_HOME/facestream/dlib`, 70 MB), from where the next process
loads them in about 0.05 s (`load_shape_model`).
"""
from __future__ import annotations

import logging
import os
import tempfile
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

BLOCK = 1 << 22  # bytes of the file tokenised at a time (the reader's memory stays small)
CHUNK = 1024  # bytes each lane walks in `_token_starts`
SYNC = 32  # bytes within which the candidate walks of a chunk must meet
MAX_TOKEN = 9  # bytes: a control byte and at most eight


class ShapeFileError(ValueError):
    """The file is not a dlib shape predictor as this reader knows it."""


def _token_starts(buf: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Where the integers start in buf[start:...], following the chain from `start` (each
    token's length is in its first byte) up to the first start at or past `stop`, which is
    the last element returned.

    The chain is walked in parallel: the span is cut into CHUNK-byte chunks, and from each
    chunk's first MAX_TOKEN bytes (one of which is the true chain's first start in it) a
    walk starts. A walk that steps on a byte no integer can start with is off the chain and
    dropped (most bytes are such: 16 of 256 can start one), and the others meet within a
    few tokens, so where all of a chunk's walks left meet within SYNC bytes, the chain
    passes there (in the 68-point model, every chunk's walks meet). Then one walk per
    chunk, from each meeting point to the next, gives every start. A chunk whose walks do
    not meet is walked by the chunk before it."""
    lengths = (buf & 15) + np.uint8(1)
    edges = np.arange(start + CHUNK, stop - SYNC - MAX_TOKEN, CHUNK, dtype=np.int32)
    if len(edges):
        # A walk that steps on a byte no integer starts with is off the chain: it is dropped.
        starts_one = ((buf & 0x70) == 0) & (lengths >= 2) & (lengths <= MAX_TOKEN)
        lanes = (edges[:, None] + np.arange(MAX_TOKEN, dtype=np.int32)[None, :]).ravel()
        on = np.ones(len(lanes), bool)
        target = np.repeat(edges + SYNC, MAX_TOKEN)
        while True:
            behind = lanes < target
            if not behind.any():
                break
            on &= starts_one[lanes] | ~behind
            lanes += lengths[lanes] * behind
        lanes, on = lanes.reshape(-1, MAX_TOKEN), on.reshape(-1, MAX_TOKEN)
        meeting = np.where(on, lanes, -1).max(axis=1)
        met = ((lanes == meeting[:, None]) | ~on).all(axis=1) & on.any(axis=1)
        sync = meeting[met].astype(np.int32)
    else:
        sync = np.empty(0, np.int32)
    first = np.concatenate((np.array([start], np.int32), sync))
    ends = np.concatenate((sync, np.array([stop], np.int32)))
    # Each lane walks on past its end (to be cut off below) until every lane has passed its
    # own, held at the buffer's last byte. An integer takes 2 bytes or more, so a chunk
    # takes at most CHUNK / 2 steps (more where the chunk after it had no meeting point).
    cap = np.int32(len(buf) - 1)
    pos = first.copy()
    walked = np.empty((CHUNK // 2 + 16, len(first)), np.int32)
    t = 0
    while True:
        if t == len(walked):
            walked = np.concatenate((walked, np.empty_like(walked)))
        walked[t] = pos
        t += 1
        pos += lengths[pos]
        np.minimum(pos, cap, out=pos)
        if t % 8 == 0 and (pos >= ends).all():
            break
    walked = np.concatenate((walked[:t], pos[None]))
    inside = walked < ends
    reached = walked[inside.sum(axis=0), np.arange(len(first))]  # each lane's first start past its end
    if (reached[:-1] != ends[:-1]).any():
        raise ShapeFileError("the integers' lengths do not chain")
    return np.concatenate((walked.T[inside.T], reached[-1:]))  # lane by lane: in file order


_LOW_BYTES = np.array([(1 << (8 * k)) - 1 for k in range(9)], np.uint64)


def _values(buf: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The integers at `starts` (dlib's pack_int); int32 where they all fit in three bytes."""
    ctrl = buf[starts]
    size = ctrl & 15
    if (ctrl & 0x70).any() or (size > 8).any() or (size == 0).any():
        raise ShapeFileError("a byte that starts no integer (is it a dlib file?)")
    top = int(size.max(initial=0))
    kind = np.int32 if top <= 3 else np.uint64
    value = np.zeros(len(starts), kind)
    for i in range(top):
        value |= buf[starts + (1 + i)].astype(kind) << kind(8 * i)
    value &= _LOW_BYTES[size].astype(kind)
    if kind is np.uint64:
        if (value >> np.uint64(63)).any():
            raise ShapeFileError("an integer past 63 bits")
        value = value.astype(np.int64)
    return np.where(ctrl & 0x80, -value, value)


class _Tokens:
    """dlib's integers of a file, in order, decoded a block at a time."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("rb")
        self._buf = np.zeros(BLOCK + 2 * MAX_TOKEN + 16, np.uint8)
        self._have = 0  # valid bytes in _buf
        self._at = 0  # the next token's start in _buf
        self._eof = False
        self._queue: list[np.ndarray] = []
        self._queued = 0
        self.offset = 0  # the file's offset of _buf[0]

    def close(self) -> None:
        self._file.close()

    def _fill(self) -> bool:
        """Tokenise the next block onto the queue; False at the file's end."""
        if self._eof and self._at >= self._have:
            return False
        keep = self._have - self._at  # a token cut by the block's end
        self._buf[:keep] = self._buf[self._at:self._have]
        self.offset += self._at
        view = memoryview(self._buf)[keep:keep + BLOCK]  # type: ignore[arg-type]
        got = self._file.readinto(view)
        self._have = keep + got
        self._eof = got < BLOCK
        self._buf[self._have:] = 0
        stop = self._have if self._eof else self._have - MAX_TOKEN
        if stop <= 0:
            self._at = 0
            return self._have > 0 and not self._eof
        starts = _token_starts(self._buf, 0, stop)
        last = int(starts[-1])
        if self._eof and last != self._have:
            raise ShapeFileError(f"the file ends inside an integer (byte {self.offset + self._have})")
        self._queue.append(_values(self._buf, starts[:-1]))
        self._queued += len(starts) - 1
        self._at = last
        return True

    def take(self, n: int) -> np.ndarray:
        while self._queued < n:
            if not self._fill():
                raise ShapeFileError(f"the file ends early (byte {self.offset + self._have})")
        joined = np.concatenate(self._queue) if len(self._queue) > 1 else self._queue[0]
        out, rest = joined[:n], joined[n:]
        self._queue, self._queued = ([rest] if len(rest) else []), len(rest)
        return out

    def one(self) -> int:
        return int(self.take(1)[0])

    def at_end(self) -> bool:
        while not self._queued:
            if not self._fill():
                return True
        return False


def _floats(pairs: np.ndarray) -> np.ndarray:
    """dlib's floats from their (mantissa, exponent) integers, pairs[..., 0] and [..., 1]."""
    mantissa, exponent = pairs[..., 0], pairs[..., 1]
    if (np.abs(exponent) > 1100).any():  # infinity and NaN are written as exponents of 32000+
        raise ShapeFileError("a float that is not finite")
    return np.ldexp(mantissa.astype(np.float64), exponent.astype(np.int32)).astype(np.float32)


@dataclass
class ShapeModel:
    """A shape predictor's arrays: for cascade level c, tree t, feature pixel f and split
    node n (breadth first from the root)."""

    mean_shape: np.ndarray  # (parts, 2) float32, the start, in the box's unit square
    split_a: np.ndarray  # (levels, trees * nodes) int64: a split's first feature pixel
    split_b: np.ndarray  # (levels, trees * nodes) int64: its second
    threshold: np.ndarray  # (levels, trees * nodes) float32
    leaves: np.ndarray  # (levels, trees * leaves, parts * 2) float32
    anchor: np.ndarray  # (levels, pixels) int64: the point each feature pixel hangs from
    offset: np.ndarray  # (levels, pixels, 2) float32: its offset in the mean shape's frame
    depth: int  # splits on a tree's way to a leaf

    @property
    def parts(self) -> int:
        return len(self.mean_shape)


def read_shape_model(path: str | Path) -> ShapeModel:
    """The model in dlib's shape-predictor file at `path` (ShapeFileError naming it and the
    problem when it is not one)."""
    path = Path(path)
    try:
        tokens = _Tokens(path)
    except OSError as e:
        raise ShapeFileError(f"{path}: cannot be read ({e.strerror or e})") from None
    try:
        return _read(tokens)
    except ShapeFileError as e:
        raise ShapeFileError(f"{path}: {e}") from None
    finally:
        tokens.close()


def _column(tokens: _Tokens) -> int:
    """A matrix<float,0,1>'s header (dlib writes -rows, -columns): its length."""
    rows, cols = tokens.one(), tokens.one()
    if rows > 0 or cols != -1:
        raise ShapeFileError(f"expected a column vector, found a {-rows}x{-cols} matrix")
    return -rows


def _read(tokens: _Tokens) -> ShapeModel:
    if (version := tokens.one()) != 1:
        raise ShapeFileError(f"not a shape predictor of a version this reader knows (version {version})")
    n = _column(tokens)
    if n <= 0 or n % 2 or n > 2000:
        raise ShapeFileError(f"a mean shape of {n} numbers")
    mean_shape = _floats(tokens.take(2 * n).reshape(-1, 2)).reshape(-1, 2)
    levels = tokens.one()
    if not 0 < levels <= 100:
        raise ShapeFileError(f"{levels} cascade levels")
    split_a, split_b, thresholds = [], [], []
    leaves = np.empty(0, np.float32)
    nodes = depth = trees = 0
    for level in range(levels):
        count = tokens.one()
        if level == 0:
            trees = count
            nodes = tokens.one()
            depth = int(nodes + 1).bit_length() - 1
            if trees <= 0 or nodes <= 0 or 2 ** depth - 1 != nodes:
                raise ShapeFileError(f"{trees} trees of {nodes} splits (a tree must be whole)")
            first = np.concatenate(([nodes], tokens.take(4 * nodes + 1)))
        elif count != trees:
            raise ShapeFileError(f"cascade level {level} has {count} trees, the first {trees}")
        # A tree: its splits (a count, then a, b and the threshold's two integers each), its
        # leaves (a count, then each a column of n floats). The same number of each in every
        # tree, so a level is one block of integers.
        per_tree = 1 + 4 * nodes + 1 + (nodes + 1) * (2 + 2 * n)
        if level == 0:
            rest = tokens.take(per_tree * trees - len(first))
            block = np.concatenate((first, rest)).reshape(trees, per_tree)
        else:
            block = tokens.take(per_tree * trees).reshape(trees, per_tree)
        splits = block[:, 1:1 + 4 * nodes].reshape(trees, nodes, 4)
        leaf_part = block[:, 2 + 4 * nodes:].reshape(trees, nodes + 1, 2 + 2 * n)
        if (block[:, 0] != nodes).any() or (block[:, 1 + 4 * nodes] != nodes + 1).any():
            raise ShapeFileError(f"cascade level {level}: trees of different sizes")
        if (leaf_part[:, :, 0] != -n).any() or (leaf_part[:, :, 1] != -1).any():
            raise ShapeFileError(f"cascade level {level}: a leaf that is not {n} numbers")
        split_a.append(splits[:, :, 0].ravel())
        split_b.append(splits[:, :, 1].ravel())
        thresholds.append(_floats(splits[:, :, 2:]).ravel())
        if level == 0:  # the model's largest part (70 MB for the 68 points): filled in place
            leaves = np.empty((levels, trees * (nodes + 1), n), np.float32)
        leaves[level] = _floats(leaf_part[:, :, 2:].reshape(trees, nodes + 1, n, 2)).reshape(trees * (nodes + 1), n)
        del block, splits, leaf_part
    if tokens.one() != levels:
        raise ShapeFileError("the feature pixels' anchors are not one list a level")
    anchors = []
    for _ in range(levels):
        pixels = tokens.one()
        anchors.append(tokens.take(pixels))
    if tokens.one() != levels:
        raise ShapeFileError("the feature pixels' offsets are not one list a level")
    offsets = []
    for level in range(levels):
        if tokens.one() != len(anchors[level]):
            raise ShapeFileError(f"cascade level {level}: anchors and offsets differ in number")
        offsets.append(_floats(tokens.take(4 * len(anchors[level])).reshape(-1, 2)).reshape(-1, 2))
    if not tokens.at_end():
        raise ShapeFileError("bytes after the model")
    if len({len(a) for a in anchors}) != 1:
        raise ShapeFileError("levels with different numbers of feature pixels")
    anchor = np.stack(anchors)
    a, b = np.stack(split_a), np.stack(split_b)
    pixels = anchor.shape[1]
    if anchor.min() < 0 or anchor.max() >= n // 2 or min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= pixels:
        raise ShapeFileError("an index out of range")
    return ShapeModel(mean_shape=mean_shape, split_a=a, split_b=b, threshold=np.stack(thresholds),
                      leaves=leaves, anchor=anchor, offset=np.stack(offsets), depth=depth)


CACHE_FORMAT = 1  # raised when what the cache holds changes


def cache_dir() -> Path:
    """`$XDG_CACHE_HOME/facestream/dlib` (by default `~/.cache/facestream/dlib`)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "facestream" / "dlib"


def _cache_file(path: Path) -> Path:
    st = path.stat()
    return cache_dir() / f"{path.stem}.{st.st_size}.{st.st_mtime_ns}.v{CACHE_FORMAT}.npz"


def load_shape_model(path: str | Path) -> ShapeModel:
    """`read_shape_model`, through the cache: the arrays read from a file are saved once (as
    a numpy archive named by the file's name, size and modification time) and loaded from
    there afterwards. A cache that cannot be written, or read back, costs only the time to
    read the file itself."""
    path = Path(path)
    try:
        cached = _cache_file(path)
    except OSError:
        return read_shape_model(path)  # (the reader names the file and the problem)
    try:
        with np.load(cached, allow_pickle=False) as z:
            model = ShapeModel(**{f.name: (int(z[f.name]) if f.name == "depth" else z[f.name])
                                  for f in fields(ShapeModel)})
        _check(model)
        return model
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        log.info("%s: not used (%s); the model is read again", cached, e)
    model = read_shape_model(path)
    part: str | None = None
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cached.parent, suffix=".part", delete=False) as out:
            part = out.name
            np.savez(out, **{f.name: getattr(model, f.name) for f in fields(ShapeModel)})
        os.replace(part, cached)  # whole or not at all, whoever else writes it meanwhile
    except OSError as e:
        log.info("%s: cannot be written (%s)", cached, e)
        if part is not None:
            Path(part).unlink(missing_ok=True)
    return model


def _check(m: ShapeModel) -> None:
    """A cached model's arrays fit together (ValueError otherwise)."""
    levels, pixels = m.anchor.shape
    nodes = 2 ** m.depth - 1
    trees = m.split_a.shape[1] // nodes if m.split_a.ndim == 2 else 0
    ok = (m.mean_shape.ndim == 2 and m.mean_shape.shape[1] == 2 and trees > 0
          and m.split_a.shape == m.split_b.shape == m.threshold.shape == (levels, trees * nodes)
          and m.leaves.shape == (levels, trees * (nodes + 1), m.mean_shape.size)
          and m.offset.shape == (levels, pixels, 2) and m.leaves.dtype == np.float32
          and 0 <= min(m.split_a.min(), m.split_b.min()) and max(m.split_a.max(), m.split_b.max()) < pixels
          and 0 <= m.anchor.min() and m.anchor.max() < m.parts)
    if not ok:
        raise ValueError("its arrays do not fit together")


class ShapePredictor:
    """dlib's shape predictor over numpy: `predict(gray, boxes)`, the points of every box at
    once. Keeps nothing between calls but each thread's bordered copy of the picture, so
    calls from several threads may overlap.

    Per cascade level, for all faces at once: the similarity from the mean shape is linear
    in the shape (two numbers a, b: the rotation-and-scale [[a, -b], [b, a]]), so the
    feature pixels' places are a few products and sums; the picture is read with a zero border,
    so a pixel off it reads 0 as in dlib; every split of every tree is compared at once
    (the grey levels and their differences are whole numbers, so `difference > threshold`
    is `difference > floor(threshold)`, in int16), and a tree's 15 answers, as a 15-bit
    number, give its leaf from a table. The leaves are added as dlib adds them, one tree after
    another in float32: the trees' thresholds make the shape sensitive to the last bit of a
    sum (summed pairwise, 9% of the points of 60 boxes on a face moved, by up to 7 px), and
    in dlib's order the points are dlib's (tests/test_dlib_shape.py)."""

    def __init__(self, path: str | Path) -> None:
        m = load_shape_model(path)
        levels, pixels = m.anchor.shape
        nodes = 2 ** m.depth - 1
        self.parts = m.parts
        self.depth = m.depth
        self._nodes, self._pixels = nodes, pixels
        self._trees = m.split_a.shape[1] // nodes
        self._mean_flat = m.mean_shape.reshape(-1).astype(np.float32)
        mean = m.mean_shape.astype(np.float64)
        fx, fy = (mean - mean.mean(axis=0)).T
        spread = float((fx ** 2 + fy ** 2).sum())
        # a = sum(x fx + y fy) / spread, b = sum(y fx - x fy) / spread (the shape's own mean
        # drops out: fx and fy sum to zero).
        self._to_a = np.stack((fx, fy), 1).ravel() / spread
        self._to_b = np.stack((-fy, fx), 1).ravel() / spread
        dx, dy = m.offset[..., 0].astype(np.float64), m.offset[..., 1].astype(np.float64)
        # The feature pixels' offsets turned and scaled: a * this[0] + b * this[1] = (x0, y0,
        # x1, y1, ...).
        self._turn = np.stack((np.stack((dx, dy), -1).reshape(levels, -1),
                               np.stack((-dy, dx), -1).reshape(levels, -1)), 1)
        self._anchor = np.stack((2 * m.anchor, 2 * m.anchor + 1), -1).reshape(levels, -1)
        self._splits = np.concatenate((m.split_a, m.split_b), axis=1)  # a's, then b's
        self._threshold = np.clip(np.floor(m.threshold), -512, 512).astype(np.int16)
        self._leaves = m.leaves
        self._leaf0 = np.arange(self._trees, dtype=np.int64) * (nodes + 1)
        self._leaf_of = _leaf_table(m.depth) if nodes <= 16 else None
        self._bit = (2.0 ** np.arange(nodes)).astype(np.float32)
        self._sum_rows = _sum_rows if _sums_in_order() else _accumulate_rows
        self._local = threading.local()

    def predict(self, gray: np.ndarray, boxes: Sequence[tuple[int, int, int, int]]) -> np.ndarray:
        """The points (faces, parts, 2), float32 whole pixels, of each box (left, top, right,
        bottom, dlib's inclusive corners) in the 2-D uint8 picture `gray`."""
        faces = len(boxes)
        if faces == 0:
            return np.empty((0, self.parts, 2), np.float32)
        if gray.ndim != 2 or gray.dtype != np.uint8:
            raise ValueError(f"the picture must be 2-D uint8, got {gray.dtype} {gray.shape}")
        h, w = gray.shape
        padded = self._padded(h, w)
        padded[1:-1, 1:-1] = gray
        flat_gray = padded.ravel()
        box = np.asarray(boxes, np.float64).reshape(faces, 4)
        size = np.tile(box[:, 2:] - box[:, :2], self._pixels)
        origin = np.tile(box[:, :2] + 1.5, self._pixels)  # +1: the border; +0.5: rounding
        top = np.tile(np.array((w + 1, h + 1), np.float64), self._pixels)
        row = np.array((1.0, w + 2.0))
        shape = np.repeat(self._mean_flat[None], faces, axis=0)
        stack = np.empty(((self._trees + 1) * faces, shape.shape[1]), np.float32)
        for level in range(len(self._anchor)):
            # Products and numpy's own sums, not BLAS (whose kernels, and so the last bit of a
            # sum, depend on the CPU): the points are the same on any machine.
            shape64 = shape.astype(np.float64)
            a = np.add.reduce(shape64 * self._to_a, axis=1)[:, None]
            b = np.add.reduce(shape64 * self._to_b, axis=1)[:, None]
            turn = self._turn[level]
            at = shape[:, self._anchor[level]] + (a * turn[0] + b * turn[1])
            p = np.floor(at * size + origin)
            np.clip(p, 0.0, top, out=p)
            index = (p.reshape(faces, -1, 2) @ row).astype(np.intp)
            grey = np.take(flat_gray, index, mode="clip").astype(np.int16)
            pair = np.take(grey, self._splits[level], axis=1, mode="clip")
            split = pair.shape[1] // 2
            above = pair[:, :split] - pair[:, split:] > self._threshold[level]
            leaf = self._leaves_reached(above.reshape(faces, self._trees, self._nodes))
            # Row 0 the shape, then tree by tree each face's leaf, summed down the rows: in
            # dlib's order, ((shape + tree 0) + tree 1) + ... (see _sums_in_order).
            np.take(self._leaves[level], (leaf + self._leaf0).T.ravel(), axis=0, out=stack[faces:], mode="clip")
            stack[:faces] = shape
            shape = self._sum_rows(stack.reshape(self._trees + 1, -1)).reshape(faces, -1)
        box_size = box[:, None, 2:] - box[:, None, :2]
        return np.floor(shape.reshape(faces, -1, 2) * box_size + box[:, None, :2] + 0.5).astype(np.float32)

    def _padded(self, h: int, w: int) -> np.ndarray:
        """This thread's (h + 2, w + 2) picture with a zero border, kept between calls (a
        frame-sized buffer made afresh for every frame is mapped and zeroed each time);
        the caller fills its inside."""
        buf = getattr(self._local, "padded", None)
        if buf is None or buf.shape != (h + 2, w + 2):
            buf = self._local.padded = np.zeros((h + 2, w + 2), np.uint8)
        return buf

    def _leaves_reached(self, above: np.ndarray, walk: bool = False) -> np.ndarray:
        """Each tree's leaf (faces, trees) from its splits' answers (faces, trees, nodes):
        left (node 2i+1) where `above`, else right (2i+2), from the root down."""
        if self._leaf_of is not None and not walk:
            code = above.astype(np.float32) @ self._bit  # whole numbers below 2**16: exact
            return self._leaf_of[code.astype(np.intp)]
        node = np.zeros(above.shape[:2], np.int64)
        for _ in range(self.depth):
            node = 2 * node + 2 - np.take_along_axis(above, node[..., None], axis=-1)[..., 0]
        return node - self._nodes


def _leaf_table(depth: int) -> np.ndarray:
    """The leaf a tree of `depth` reaches for each pattern of its splits' answers (bit i set:
    node i's answer is left)."""
    nodes = 2 ** depth - 1
    code = np.arange(2 ** nodes, dtype=np.int64)
    node = np.zeros_like(code)
    for _ in range(depth):
        node = 2 * node + 2 - ((code >> node) & 1)
    return (node - nodes).astype(np.int64)


def _sum_rows(rows: np.ndarray) -> np.ndarray:
    """The rows of a C-ordered 2-D array added in order: numpy reduces down the first axis
    row by row (each column's sum in order; the columns side by side), 25 us for 500
    rows of 408."""
    return np.add.reduce(rows, axis=0)


def _accumulate_rows(rows: np.ndarray) -> np.ndarray:
    """The same by definition (each partial sum is the last one plus the next row), 25
    times slower: for a numpy that reduced otherwise."""
    return np.add.accumulate(rows, axis=0)[-1]


def _sums_in_order() -> bool:
    """Whether this numpy's `_sum_rows` adds the rows in order (numbers whose sum depends
    on the order: pairwise, they would come out otherwise)."""
    rows = np.full((65, 8), 2.0 ** -24, np.float32)
    rows[0] = 1.0
    return bool(np.array_equal(_sum_rows(rows), _accumulate_rows(rows)))
