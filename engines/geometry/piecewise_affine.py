"""Landmark-driven piecewise-affine warp: one Delaunay mesh per source, one remap per target face.

The mesh is a fixed set of landmark index triples computed once on the source face. For a
target face, every pixel of the target's region that falls inside a target triangle is sent
by that triangle's affine map (target -> source) to the matching source point; the maps of
the whole region are built with a few vectorised operations and the source is sampled with a
single `cv2.remap`.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.errors import EngineError
from engines.face import ImageBGR

Triangles: TypeAlias = npt.NDArray[np.int32]  # (T, 3) indices into the 68 landmarks
Points: TypeAlias = npt.NDArray[np.float32]  # (N, 2) x, y

# Triangle ids are rasterised into a uint8 label image (0 = no triangle) so that cv2.LUT can
# turn ids into per-pixel coefficients; a Delaunay mesh of 68 points has at most 131 triangles.
MAX_TRIANGLES = 255
# Twice the area (px^2) under which a target triangle counts as collapsed: its affine inverse
# would blow rasterisation slack up into samples far away, so it maps to its source centroid.
MIN_DOUBLE_AREA = 1.0
_SHIFT = 4  # fractional bits of the polygon vertices handed to cv2.fillConvexPoly
_ONE = 1 << _SHIFT

# Where the mesh squeezes the source much harder than the face as a whole (the far cheek and
# temple of a face turned away, whose half past the nose is a fifth as wide), one bilinear
# sample a pixel skips most of the source it stands for: a dotted dark line ran down a
# turned face's far cheek. With `squeezed`, forward_warp samples a triangle whose neighbouring
# pixels lie more than SQUEEZE_FROM source pixels apart along x or y (the classical swapper
# picks a source level that keeps them 1.25-1.8 apart) again, with as many samples a pixel
# along each axis as keep them within SQUEEZE_REACH (a power of two, at most
# MAX_SQUEEZE_SAMPLES), and takes the mean of those inside the triangle. A triangle less than
# MIN_SQUEEZED_HEIGHT px high is a crease, not a surface (a fold at a mouth's corner, closed
# lips over a smiling source's teeth, the cheek between the nose and the mouth of a face
# turned away): averaged over its source it drew a dark line, and its one sample a pixel,
# jumping across a source triangle tens of pixels wide, a dotted one. A crease that squeezes
# its source is left out instead: its pixels take the mean of their neighbours on the
# surfaces either side of it (`fill_creases`).
SQUEEZE_FROM = 2.5
SQUEEZE_REACH = 1.8
MAX_SQUEEZE_SAMPLES = 8
MIN_SQUEEZED_HEIGHT = 0.5
_SIDES = int(np.log2(MAX_SQUEEZE_SAMPLES)) + 1  # grid sides 1, 2, 4 ... MAX_SQUEEZE_SAMPLES
_REMAP_ROWS = 32000  # remap takes fewer than 32767 rows at a time


def prepare_triangulation(landmarks: Points) -> Triangles:
    """Delaunay triangulation of the (source) landmarks, as landmark index triples.

    Computed once per source face; the same index triples are then drawn on every target face.
    Raises EngineError when the points are not finite or too degenerate to triangulate.
    """
    pts = np.asarray(landmarks, dtype=np.float32)
    if pts.ndim != 2 or pts.shape[1] != 2 or len(pts) < 3 or not np.isfinite(pts).all():
        raise EngineError(
            f"cannot triangulate landmarks of shape {pts.shape}: need finite (N>=3, 2) points")
    lo = np.floor(pts.min(axis=0)) - 2
    hi = np.ceil(pts.max(axis=0)) + 2
    subdiv = cv2.Subdiv2D((int(lo[0]), int(lo[1]), int(hi[0] - lo[0]), int(hi[1] - lo[1])))
    subdiv.insert([(float(x), float(y)) for x, y in pts])
    corners = subdiv.getTriangleList().reshape(-1, 3, 2).astype(np.float32)
    if corners.size == 0:
        raise EngineError("cannot triangulate landmarks: all points coincide or are collinear")
    # Subdiv2D returns coordinates, not indices; map each corner back to its landmark. Corners
    # that match no landmark belong to Subdiv2D's virtual outer triangle and are dropped.
    index, matched = _corner_indices(corners.reshape(-1, 2), pts)
    index, matched = index.reshape(-1, 3), matched.reshape(-1, 3)
    keep = matched.all(axis=1)
    keep &= (index[:, 0] != index[:, 1]) & (index[:, 1] != index[:, 2])
    keep &= index[:, 0] != index[:, 2]
    tri = index[keep].astype(np.int32)
    if len(tri):
        p = pts[tri].astype(np.float64)
        e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
        double_area = np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
        tri = tri[double_area > 1e-6]
    if len(tri) == 0:
        raise EngineError("cannot triangulate landmarks: all points coincide or are collinear")
    if len(tri) >= MAX_TRIANGLES:
        raise EngineError(f"too many triangles ({len(tri)}) for {len(pts)} points")
    return np.ascontiguousarray(tri)


def _corner_indices(corners: Points, pts: Points) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """For each triangle corner (Subdiv2D's float32 copy of a point), the index of the point it
    is (the first of equal points) and whether it is one (within 0.01 px). Subdiv2D keeps the
    points' float32 values, so nearly every corner is found by its exact bits (a sorted search:
    a carried swap triangulates its face's points on every frame); the rest are matched by
    distance."""
    keys = np.ascontiguousarray(pts, np.float32).view(np.int64).ravel()
    wanted = np.ascontiguousarray(corners, np.float32).view(np.int64).ravel()
    order = np.argsort(keys, kind="stable")
    at = np.minimum(np.searchsorted(keys[order], wanted), len(keys) - 1)
    index = order[at]
    matched = keys[index] == wanted
    if not matched.all():
        rest = ~matched
        dist = np.linalg.norm(corners[rest][:, None, :] - pts[None, :, :], axis=-1)
        index[rest] = dist.argmin(axis=-1)
        matched[rest] = dist.min(axis=-1) < 1e-2
    return index, matched


@dataclass(frozen=True, eq=False)
class SourceMesh:
    """A source image with its landmarks and mesh, plus what every warp of it reuses.

    `bounds` holds four (1, 256) lookup rows indexed by triangle id (1-based): min x, min y,
    max x, max y of each source triangle (id 0: far outside the image).
    """

    image: ImageBGR
    points: Points
    triangles: Triangles
    bounds: npt.NDArray[np.float32]

    @functools.cached_property
    def corners(self) -> npt.NDArray[np.float64]:
        """Each triangle's corners in float64, (T, 3, 2): the source side of every warp's
        maps (`prepare_affines`), gathered once instead of for every face of every frame."""
        return np.asarray(self.points, np.float64)[self.triangles]


def prepare_mesh(image: ImageBGR, points: Points, triangles: Triangles) -> SourceMesh:
    """Bundle a source image, its landmarks and triangulation for repeated warps."""
    pts = np.ascontiguousarray(points, dtype=np.float32)
    tri = pts[triangles]
    bounds = np.full((4, 1, 256), -1e4, np.float32)
    bounds[0:2, 0, 1 : len(triangles) + 1] = tri.min(axis=1).T
    bounds[2:4, 0, 1 : len(triangles) + 1] = tri.max(axis=1).T
    return SourceMesh(image=image, points=pts, triangles=triangles, bounds=bounds)


def prepare_affines(
    triangles: Triangles, src_points: Points, dst_points: Points,
    src_corners: npt.NDArray[np.float64] | None = None,
) -> npt.NDArray[np.float64]:
    """Per-triangle affine maps dst -> src, in closed form for all triangles at once.

    Returns (T, 3, 2) coefficients c such that [x, y, 1] @ c[t] = (sx, sy) for a destination
    point (x, y) in triangle t. Collapsed destination triangles (twice the area below
    MIN_DOUBLE_AREA, or not finite) get a constant map to their source triangle's centroid.
    `src_corners`: `src_points[triangles]` in float64 when the caller has it (a SourceMesh's).
    """
    src = np.asarray(src_points, np.float64)[triangles] if src_corners is None else src_corners  # (T, 3, 2)
    dst = np.asarray(dst_points, np.float64)[triangles]
    edges_d = (dst[:, 1:] - dst[:, :1]).transpose(0, 2, 1)  # (T, 2, 2), columns e1, e2
    edges_s = (src[:, 1:] - src[:, :1]).transpose(0, 2, 1)
    det = edges_d[:, 0, 0] * edges_d[:, 1, 1] - edges_d[:, 0, 1] * edges_d[:, 1, 0]
    bad = ~(np.abs(det) >= MIN_DOUBLE_AREA)  # also catches NaN
    inverse = np.empty_like(edges_d)  # adjugate / det
    inverse[:, 0, 0] = edges_d[:, 1, 1]
    inverse[:, 0, 1] = -edges_d[:, 0, 1]
    inverse[:, 1, 0] = -edges_d[:, 1, 0]
    inverse[:, 1, 1] = edges_d[:, 0, 0]
    inverse /= np.where(bad, 1.0, det)[:, None, None]
    # s = s0 + L (p - d0) with L = [f1 f2] @ inverse([e1 e2]).
    linear = edges_s @ inverse
    linear[bad] = 0.0
    offset = src[:, 0] - (linear @ dst[:, 0, :, None])[:, :, 0]
    if bad.any():
        offset[bad] = src[bad].mean(axis=1)
    coef = np.empty((len(triangles), 3, 2))
    coef[:, 0:2] = linear.transpose(0, 2, 1)  # rows: multiplies x, multiplies y
    coef[:, 2] = offset
    return coef


def forward_warp(
    mesh: SourceMesh, dst_points: Points, size: tuple[int, int], squeezed: bool = False
) -> tuple[ImageBGR, npt.NDArray[np.uint8]]:
    """Warp the mesh's image so that its points land on `dst_points`, over a (w, h) region.

    `dst_points` are in region coordinates (pixel centres at integers, like the mesh's points
    in its image). Returns the warped patch (h, w, 3) uint8, black where no triangle covers
    the pixel, and `valid` (h, w) uint8, 255 where a triangle covers it. With `squeezed`, the
    pixels of triangles that squeeze the source hard are the mean of several samples
    (`resample_squeezed`).
    """
    dst = np.asarray(dst_points, np.float32)
    map_x, map_y, labels, coef = warp_maps(mesh, dst, size)
    patch = cv2.remap(mesh.image, map_x, map_y, cv2.INTER_LINEAR,
                      borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0))
    if squeezed:
        resample_squeezed(patch, labels, mesh, dst, coef)
    valid = cv2.compare(labels, 0, cv2.CMP_GT)
    return patch, valid


def warp_maps(mesh: SourceMesh, dst: Points, size: tuple[int, int]
              ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], npt.NDArray[np.uint8],
                         npt.NDArray[np.float64]]:
    """The sample maps of `forward_warp` over a (w, h) region: for each pixel, where in the
    mesh's image it samples (map_x, map_y, for cv2.remap; far outside the image where no
    triangle covers the pixel), each pixel's triangle id + 1 (0: none), and the triangles'
    maps (`prepare_affines`). Any plane laid like the mesh's image can be remapped with them."""
    w, h = size
    triangles = mesh.triangles
    n = len(triangles)
    # Rasterise triangle ids (1-based) into a label image of the region only.
    labels = np.zeros((h, w), np.uint8)
    fixed = np.round(dst[triangles] * _ONE).astype(np.int32)  # (T, 3, 2)
    fill, line = cv2.fillConvexPoly, cv2.LINE_8
    for tid, poly in enumerate(list(fixed), 1):  # (a list's items come quicker than an array's rows)
        fill(labels, poly, tid, line, _SHIFT)

    # One (1, 256) lookup table per coefficient: x-coefficient, y-coefficient and offset of
    # map_x, then of map_y. Id 0 (no triangle) maps far outside the source, so remap's
    # constant border makes it black.
    luts = np.empty((6, 1, 256), np.float32)
    luts[:, 0, 0] = (0.0, 0.0, -1e4, 0.0, 0.0, -1e4)
    coef = prepare_affines(triangles, mesh.points, dst, mesh.corners)
    luts[:, 0, 1 : n + 1] = coef.transpose(2, 1, 0).reshape(6, n)

    xs = np.arange(w, dtype=np.float32)[None, :]
    ys = np.arange(h, dtype=np.float32)[:, None]
    lut = cv2.LUT
    map_x = lut(labels, luts[0]) * xs
    map_x += lut(labels, luts[1]) * ys
    map_x += lut(labels, luts[2])
    map_y = lut(labels, luts[3]) * xs
    map_y += lut(labels, luts[4]) * ys
    map_y += lut(labels, luts[5])
    # Clamp to the source triangle's bounding box: a pixel on a triangle's rasterised edge
    # lies a fraction of a pixel outside it, and a thin target triangle magnifies that slack
    # into a sample far away; the clamp keeps every sample near its own triangle.
    bounds = mesh.bounds
    cv2.max(map_x, lut(labels, bounds[0]), dst=map_x)
    cv2.max(map_y, lut(labels, bounds[1]), dst=map_y)
    cv2.min(map_x, lut(labels, bounds[2]), dst=map_x)
    cv2.min(map_y, lut(labels, bounds[3]), dst=map_y)
    return map_x, map_y, labels, coef


def squeezed_samples(coef: npt.NDArray[np.float64], dst: Points,
                     triangles: Triangles) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.bool_]]:
    """Per triangle (its map `coef` onto `dst`): the samples a pixel needs along x and y
    (T, 2), and whether it is a crease that squeezes its source (T,). Samples: 0, 0 where
    neighbouring pixels lie within SQUEEZE_FROM source pixels along both, or where the
    triangle is a crease (less than MIN_SQUEEZED_HEIGHT px high); otherwise as many as keep
    neighbouring samples within SQUEEZE_REACH, rounded up to a power of two, at most
    MAX_SQUEEZE_SAMPLES."""
    linear = coef[:, 0:2]  # |d source / d x|, |d source / d y| (the norm, written out: faster)
    reach = np.sqrt(linear[..., 0] * linear[..., 0] + linear[..., 1] * linear[..., 1])
    need = 2 ** np.ceil(np.log2(np.maximum(reach / SQUEEZE_REACH, 1.0)) - 1e-6)
    need = np.minimum(need, MAX_SQUEEZE_SAMPLES).astype(np.int32)
    corners = np.asarray(dst, np.float64)[triangles]  # (T, 3, 2)
    e1, e2 = corners[:, 1] - corners[:, 0], corners[:, 2] - corners[:, 0]
    double_area = np.abs(e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0])
    sides = corners - corners[:, (2, 0, 1)]
    longest = np.sqrt((sides[..., 0] * sides[..., 0] + sides[..., 1] * sides[..., 1]).max(axis=1))
    crease = double_area < MIN_SQUEEZED_HEIGHT * np.maximum(longest, 1e-6)
    squeezing = (reach > SQUEEZE_FROM).any(axis=1)
    need[~squeezing | crease] = 0
    return need, crease & squeezing


def _pixels_of(labels: npt.NDArray[np.uint8], flags: npt.NDArray[np.bool_]) -> npt.NDArray[np.uint8]:
    """Where `labels` (each pixel's triangle id + 1) names a triangle whose flag is set: 1
    there, else 0 (uint8; a table lookup, a sixth of the time of numpy's indexing)."""
    mine = np.zeros((1, 256), np.uint8)
    mine[0, 1 : len(flags) + 1] = flags
    return cv2.LUT(labels, mine)


def _nonzero(mask: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """`np.nonzero` of a 2-D uint8 mask (rows, columns; row by row, as numpy orders them)."""
    found = cv2.findNonZero(mask)
    if found is None:
        empty = np.empty(0, np.intp)
        return empty, empty
    at = found.reshape(-1, 2)
    return at[:, 1].astype(np.intp), at[:, 0].astype(np.intp)


def fill_creases(patch: ImageBGR, labels: npt.NDArray[np.uint8], folds: npt.NDArray[np.bool_]) -> None:
    """In place in `patch`: each pixel of a folded triangle (`folds`, per triangle; `labels`
    each pixel's triangle id + 1) becomes the mean of its 3 x 3 neighbours that lie on other
    triangles; one with none keeps its value. A crease is a line a pixel or two wide, so its
    neighbours are the surfaces on either side of it."""
    crease = _pixels_of(labels, folds)
    ys, xs = _nonzero(crease)
    if ys.size == 0:
        return
    h, w = labels.shape
    y0, y1 = max(int(ys.min()) - 1, 0), min(int(ys.max()) + 2, h)
    x0, x1 = max(int(xs.min()) - 1, 0), min(int(xs.max()) + 2, w)
    box = (slice(y0, y1), slice(x0, x1))
    weight = ((labels[box] > 0) & (crease[box] == 0)).astype(np.float32)
    sums = cv2.boxFilter(patch[box].astype(np.float32) * weight[..., None], -1, (3, 3), normalize=False,
                         borderType=cv2.BORDER_CONSTANT)
    counts = cv2.boxFilter(weight, -1, (3, 3), normalize=False, borderType=cv2.BORDER_CONSTANT)
    cy, cx = ys - y0, xs - x0
    seen = counts[cy, cx] > 0
    means = sums[cy, cx] / np.maximum(counts[cy, cx], 1.0)[:, None]
    patch[ys[seen], xs[seen]] = np.clip(means[seen] + 0.5, 0, 255).astype(np.uint8)


def resample_squeezed(patch: ImageBGR, labels: npt.NDArray[np.uint8], mesh: SourceMesh,
                      dst: Points, coef: npt.NDArray[np.float64]) -> None:
    """In place in `patch` (the warp of `mesh` onto `dst`, one sample a pixel; `labels` each
    pixel's triangle id + 1, `coef` the triangles' maps): each pixel of a triangle that needs
    more samples (`squeezed_samples`) becomes the mean of those of its fx x fy samples, spread
    over the pixel, that fall inside its triangle (a pixel none falls in keeps its value);
    then the pixels of creases that squeeze their source take their neighbours' mean
    (`fill_creases`)."""
    need, folds = squeezed_samples(coef, dst, mesh.triangles)
    squeezed = need[:, 0] > 0
    ys, xs = _nonzero(_pixels_of(labels, squeezed)) if squeezed.any() else ((), ())
    if len(ys):
        tri = labels[ys, xs].astype(np.intp) - 1
        counts = need[tri]
        # One pass: every pixel takes as many samples as the one that needs most, its own
        # grid repeated (the counts are powers of two, so each of its samples is taken as often).
        total = int((counts[:, 0] * counts[:, 1]).max())
        means, seen = _pixel_means(mesh, coef, dst, tri, xs, ys, counts, total)
        patch[ys[seen], xs[seen]] = means[seen]
    if folds.any():
        fill_creases(patch, labels, folds)


def _sample_offsets() -> npt.NDArray[np.float32]:
    """For each grid of fx x fy samples (row log2 fx * _SIDES + log2 fy), its samples'
    offsets from the pixel's centre, x then y: (2, rows, MAX_SQUEEZE_SAMPLES ** 2), the grid
    repeated to fill the row."""
    k = np.arange(MAX_SQUEEZE_SAMPLES ** 2)
    out = np.empty((2, _SIDES ** 2, len(k)), np.float32)
    for i in range(_SIDES):
        for j in range(_SIDES):
            fx, fy = 2 ** i, 2 ** j
            grid = k % (fx * fy)
            out[0, i * _SIDES + j] = (grid % fx + 0.5) / fx - 0.5
            out[1, i * _SIDES + j] = (grid // fx + 0.5) / fy - 0.5
    return out


_SAMPLE_OFFSETS = _sample_offsets()


def _pixel_means(mesh: SourceMesh, coef: npt.NDArray[np.float64], dst: Points,
                 tri: npt.NDArray[np.intp], xs: npt.NDArray[np.intp], ys: npt.NDArray[np.intp],
                 counts: npt.NDArray[np.int32], total: int
                 ) -> tuple[ImageBGR, npt.NDArray[np.bool_]]:
    """For each pixel (xs, ys) of triangle `tri`: the mean of those of its fx x fy samples
    (fx, fy its row of `counts`; `total` samples, the grid repeated) that fall inside its
    triangle (corners in `dst`), through the triangle's map (`coef`), (N, 3) uint8; and
    whether any did (N,)."""
    row = np.log2(counts[:, 0]).astype(np.intp) * _SIDES + np.log2(counts[:, 1]).astype(np.intp)
    sx = xs.astype(np.float32)[:, None] + _SAMPLE_OFFSETS[0, row, :total]  # (N, total)
    sy = ys.astype(np.float32)[:, None] + _SAMPLE_OFFSETS[1, row, :total]
    # Inside the target triangle: on the same side of each edge as its third corner.
    corners = np.asarray(dst, np.float32)[mesh.triangles[tri]]  # (N, 3, 2)
    inside = np.ones(sx.shape, bool)
    for a, b, c in ((0, 1, 2), (1, 2, 0), (2, 0, 1)):
        ex, ey = (corners[:, b] - corners[:, a]).T
        side = ex * (corners[:, c, 1] - corners[:, a, 1]) - ey * (corners[:, c, 0] - corners[:, a, 0])
        edge = ex[:, None] * (sy - corners[:, a, 1, None]) - ey[:, None] * (sx - corners[:, a, 0, None])
        inside &= edge * side[:, None] >= 0
    m = coef[tri].astype(np.float32)  # (N, 3, 2): x, y and 1 -> source x, y
    maps = [m[:, 0, axis, None] * sx + m[:, 1, axis, None] * sy + m[:, 2, axis, None] for axis in (0, 1)]
    samples = np.concatenate([
        cv2.remap(mesh.image, maps[0][i:i + _REMAP_ROWS], maps[1][i:i + _REMAP_ROWS],
                  cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        for i in range(0, len(tri), _REMAP_ROWS)])
    weight = inside.astype(np.float32)
    taken = weight.sum(axis=1)
    # Whole numbers below 2 ** 24 (at most 64 samples of 255): exact in float32 in any order,
    # so the batched product gives the einsum's sums, faster.
    sums = np.matmul(weight[:, None, :], samples.astype(np.float32))[:, 0]
    means = np.clip(sums / np.maximum(taken, 1.0)[:, None] + 0.5, 0, 255).astype(np.uint8)
    return means, taken > 0
