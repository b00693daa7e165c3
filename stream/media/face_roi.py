"""Finer quantisation where the swapped faces are: regions of interest for x264 and x265.

At the default crf a 40 px face loses what carries its identity to the encoder: its eyes,
brows and mouth span a few 16x16 macroblocks, and quantisation flattens them (the quality
suite's small clip, distance to the source 0.592 written losslessly, 0.605 at crf 20).
FFmpeg's H.264/H.265 wrappers read a frame's regions of interest (AVRegionOfInterest side
data, made here by the `addroi` filter, the only way PyAV lets a frame carry it) as
quantiser offsets for the macroblocks they cover, so the faces get the bits and the rest of
the picture stays as the crf has it.

A face is given `face_qp` steps (x264's QP scale: 6 steps halve the quantiser's step) at
SMALL_FACE px wide and under, fading to none at LARGE_FACE: at about 100 px and more the
encoder's loss does not move the identity distance (0.532 -> 0.532, 0.573 -> 0.572 on two
of the suite's clips at 5 steps), and the file would grow for nothing.

A region's qoffset (-1..1) is a share of the encoder's QP range: FFmpeg's libx264 and
libx265 multiply it by 51 at 8 bits (51 + 6 for each bit more), so -8/51 is 8 steps.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from fractions import Fraction

import av

from engines.face import Box
from stream.errors import reason_of
from stream.runtime.slot import Pasted

log = logging.getLogger(__name__)

SMALL_FACE = 64.0  # px: a face this wide or narrower gets the whole offset
LARGE_FACE = 112.0  # px: from this width, none
QP_SCALE = 51.0  # FFmpeg's libx264/libx265 at 8 bits: a region's qoffset (-1..1) times 51 QP steps
# The region around a face's box (its width and height): the swap reaches up the forehead.
MARGIN_SIDE, MARGIN_TOP, MARGIN_BOTTOM = 0.15, 0.35, 0.1
ROI_CODECS = {"libx264", "libx265"}
# x264 applies the offsets through its adaptive quantisation; ultrafast turns that off.
NO_AQ_PRESETS = {"ultrafast"}


def face_offset(width: float, face_qp: float) -> float:
    """QP steps (<= 0) for a face `width` px wide."""
    share = min(max((LARGE_FACE - width) / (LARGE_FACE - SMALL_FACE), 0.0), 1.0)
    return -face_qp * share


def face_regions(boxes: Sequence[Box], face_qp: float, width: int, height: int
                 ) -> list[tuple[int, int, int, int, float]]:
    """(x, y, w, h, qoffset) for each face that gets an offset, clipped to the picture."""
    regions = []
    for x0, y0, x1, y1 in boxes:
        w, h = x1 - x0, y1 - y0
        offset = face_offset(w, face_qp)
        if offset >= 0 or w <= 0 or h <= 0:
            continue
        left, top = max(int(x0 - MARGIN_SIDE * w), 0), max(int(y0 - MARGIN_TOP * h), 0)
        right, bottom = min(int(x1 + MARGIN_SIDE * w + 1), width), min(int(y1 + MARGIN_BOTTOM * h + 1), height)
        if right > left and bottom > top:
            regions.append((left, top, right - left, bottom - top, max(offset / QP_SCALE, -1.0)))
    return regions


def uses_regions(codec: str, preset: str, face_qp: float) -> bool:
    """Whether an encoder of `codec` at `preset` honours face regions (and any are asked for)."""
    return face_qp > 0 and codec in ROI_CODECS and preset not in NO_AQ_PRESETS


def with_regions(frame: av.VideoFrame, regions: Sequence[tuple[int, int, int, int, float]],
                 time_base: Fraction) -> av.VideoFrame:
    """`frame` (yuv420p) with `regions` attached for the encoder: the same picture, a new
    frame referencing its planes. A filter graph of one `addroi` per region, built for the
    frame (its regions are its own; about 0.4 ms)."""
    if not regions:
        return frame
    graph = av.filter.Graph()
    # The frame's colour tags on the source, or FFmpeg takes them for a change mid-stream.
    node = graph.add("buffer", f"width={frame.width}:height={frame.height}:pix_fmt={frame.format.name}"
                               f":time_base={time_base.numerator}/{time_base.denominator}"
                               f":colorspace={frame.colorspace}:range={frame.color_range}")
    for x, y, w, h, q in regions:
        roi = graph.add("addroi", f"x={x}:y={y}:w={w}:h={h}:qoffset={q:.4f}")
        node.link_to(roi)
        node = roi
    sink = graph.add("buffersink")
    node.link_to(sink)
    graph.configure()
    graph.push(frame)
    out = graph.pull()
    return out


class FaceRegions:
    """An encoder's face regions: `attach(frame, payload)` gives the frame the boxes of the
    faces the composite stage pasted (`Pasted`), or the frame as it was where the encoder
    cannot use them, the faces are large or none were pasted."""

    def __init__(self, name: str, codec: str, preset: str, face_qp: float, width: int, height: int,
                 time_base: Fraction) -> None:
        self.name = name
        self.face_qp = face_qp if uses_regions(codec, preset, face_qp) else 0.0
        self.width, self.height, self.time_base = width, height, time_base

    def attach(self, frame: av.VideoFrame, payload: object) -> av.VideoFrame:
        if not self.face_qp or not isinstance(payload, Pasted) or not payload.boxes:
            return frame
        regions = face_regions(payload.boxes, self.face_qp, self.width, self.height)
        try:
            return with_regions(frame, regions, self.time_base)
        except (av.FFmpegError, ValueError) as exc:  # an FFmpeg without addroi: plain frames
            log.warning("%s: faces are encoded like the rest (%s)", self.name, reason_of(exc))
            self.face_qp = 0.0
            return frame
