"""HDR media made in code, for the tests and tools/bench_hdr.py: SDR pictures graded into
HDR10 (PQ, BT.2020, 10-bit 4:2:0) with mastering-display and content-light metadata.
Nothing is downloaded."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from stream.media.hdr import MasteringDisplay

# A common HDR10 grade: P3-D65 mastering display of 1000 cd/m².
MASTERING = MasteringDisplay(red=(0.68, 0.32), green=(0.265, 0.69), blue=(0.15, 0.06),
                             white=(0.3127, 0.329), min_nits=0.005, max_nits=1000.0)
MAX_CLL, MAX_FALL = 1000, 400
SDR_WHITE_NITS = 203.0  # BT.2408's reference white for SDR content placed in HDR

_M1, _M2 = 2610 / 16384, 2523 / 4096 * 128
_C1, _C2, _C3 = 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32
KR, KB = 0.2627, 0.0593  # BT.2020 non-constant luminance
# Linear BT.709 RGB -> BT.2020 RGB (ITU-R BT.2087).
BT709_TO_BT2020 = np.array([[0.6274, 0.3293, 0.0433], [0.0691, 0.9195, 0.0114], [0.0164, 0.0880, 0.8956]])


def pq_encode(nits: np.ndarray) -> np.ndarray:
    y = np.clip(nits / 10000.0, 0.0, 1.0) ** _M1
    return ((_C1 + _C2 * y) / (1 + _C3 * y)) ** _M2


def graded(bgr: np.ndarray, highlights: bool = True) -> np.ndarray:
    """An SDR picture (BT.709, gamma 2.4) as PQ-coded BT.2020 R'G'B' (float64, 0-1), its
    white at 203 cd/m²; `highlights`: the top rows become a ramp up to 1000 cd/m²."""
    linear = (bgr[..., ::-1].astype(np.float64) / 255.0) ** 2.4 * SDR_WHITE_NITS
    linear = linear @ BT709_TO_BT2020.T
    if highlights:
        rows = max(2, bgr.shape[0] // 8)
        ramp = np.linspace(SDR_WHITE_NITS, 1000.0, bgr.shape[1])
        linear[:rows] = ramp[None, :, None]
    return pq_encode(linear)


def yuv10_frame(rgb_code: np.ndarray, transfer: int = 16) -> av.VideoFrame:
    """R'G'B' (float, 0-1) as a limited-range BT.2020 NCL yuv420p10le frame, tagged with
    `transfer` (16: PQ, 18: HLG)."""
    h, w = rgb_code.shape[:2]
    r, g, b = rgb_code[..., 0], rgb_code[..., 1], rgb_code[..., 2]
    y = KR * r + (1 - KR - KB) * g + KB * b
    cb, cr = (b - y) / (2 * (1 - KB)), (r - y) / (2 * (1 - KR))
    cb, cr = (c.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3)) for c in (cb, cr))  # 4:2:0: each block's mean
    planes = [np.round(64 + 876 * y), np.round(512 + 896 * cb), np.round(512 + 896 * cr)]
    frame = av.VideoFrame(w, h, "yuv420p10le")
    for plane, values in zip(frame.planes, planes):
        view = np.frombuffer(plane, np.uint16).reshape(plane.height, plane.line_size // 2)
        view[:, : values.shape[1]] = np.clip(values, 0, 1023).astype(np.uint16)
    frame.colorspace, frame.color_range, frame.color_primaries, frame.color_trc = 9, 1, 9, transfer
    return frame


def write_hdr_clip(path: Path, pictures: list[np.ndarray], fps: int = 10, codec: str = "libx265",
                   metadata: bool = True) -> None:
    """An HDR10 clip of `pictures` (BGR, SDR): 10-bit, PQ, BT.2020, with mastering display
    and content light level metadata unless `metadata` is False."""
    params = "log-level=error"
    if metadata:
        params += f":hdr10=1:master-display={MASTERING.x265()}:max-cll={MAX_CLL},{MAX_FALL}" \
            if codec == "libx265" else f":master-display={MASTERING.x265()}:cll={MAX_CLL},{MAX_FALL}"
    h, w = pictures[0].shape[:2]
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=fps)
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p10le"
        cc = stream.codec_context
        cc.colorspace, cc.color_range, cc.color_primaries, cc.color_trc = 9, 1, 9, 16
        stream.options = {"preset": "ultrafast", "crf": "12", f"{codec.removeprefix('lib')}-params": params}
        for i, picture in enumerate(pictures):
            frame = yuv10_frame(graded(picture))
            frame.pts, frame.time_base = i, Fraction(1, fps)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
