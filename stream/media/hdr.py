"""What a video says about its dynamic range: bit depth, transfer (SDR, PQ, HLG), and the
HDR10 side data (mastering display, content light level) that an output must carry on,
read from decoded frames and written as the encoders' own parameters."""
from __future__ import annotations

import struct
from dataclasses import dataclass

import av

# FFmpeg's enums (AVColorTransferCharacteristic, AVColorPrimaries, AVColorSpace) as ints.
TRC_PQ, TRC_HLG = 16, 18  # SMPTE ST 2084, ARIB STD-B67
PRI_BT709, PRI_BT2020, PRI_P3_D65 = 1, 9, 12
SPC_BT2020_NCL = 9

TRANSFER_NAMES = {TRC_PQ: "PQ", TRC_HLG: "HLG"}
PRIMARY_NAMES = {PRI_BT709: "BT.709", PRI_BT2020: "BT.2020", PRI_P3_D65: "Display P3"}

# Formats whose planes the deep path keeps as they are (stream.media.deep): 4:2:0, 10-bit.
DEEP_FORMATS = {"yuv420p10le"}

# The HDR10 metadata's fixed units: chromaticity in 1/50000, luminance in 1/10000 cd/m².
_XY_UNIT, _NITS_UNIT = 50000, 10000


@dataclass(frozen=True)
class MasteringDisplay:
    """SMPTE ST 2086: the display the video was graded on. Chromaticities (x, y) of the
    red, green and blue primaries and the white point; luminance range in cd/m²."""

    red: tuple[float, float]
    green: tuple[float, float]
    blue: tuple[float, float]
    white: tuple[float, float]
    min_nits: float
    max_nits: float

    def x265(self) -> str:
        """x265's (and x264's) `master-display` value: G(x,y)B(x,y)R(x,y)WP(x,y)L(max,min)."""
        def xy(point: tuple[float, float]) -> str:
            return f"({round(point[0] * _XY_UNIT)},{round(point[1] * _XY_UNIT)})"

        return (f"G{xy(self.green)}B{xy(self.blue)}R{xy(self.red)}WP{xy(self.white)}"
                f"L({round(self.max_nits * _NITS_UNIT)},{round(self.min_nits * _NITS_UNIT)})")

    def svtav1(self) -> str:
        """SVT-AV1's `mastering-display` value: G(x,y)B(x,y)R(x,y)WP(x,y)L(max,min), as decimals."""
        def xy(point: tuple[float, float]) -> str:
            return f"({point[0]:.5f},{point[1]:.5f})"

        return (f"G{xy(self.green)}B{xy(self.blue)}R{xy(self.red)}WP{xy(self.white)}"
                f"L({self.max_nits:.4f},{self.min_nits:.4f})")


@dataclass(frozen=True)
class ContentLight:
    """CTA-861.3: the brightest pixel (MaxCLL) and brightest frame average (MaxFALL), cd/m²."""

    max_cll: int
    max_fall: int


@dataclass(frozen=True)
class Dynamic:
    """A video's dynamic range as its first frame describes it.

    `bits`: bits per sample (8, 10, 12); `transfer`: FFmpeg's transfer enum (TRC_PQ and
    TRC_HLG are HDR); `primaries`, `colorspace`, `color_range`: FFmpeg's enums, as the
    stream has them; `pix_fmt`: the decoder's format; `mastering` and `light`: the HDR10
    side data, where the stream has them."""

    bits: int = 8
    transfer: int = 2
    primaries: int = 2
    colorspace: int = 2
    color_range: int = 0
    pix_fmt: str = "yuv420p"
    mastering: MasteringDisplay | None = None
    light: ContentLight | None = None

    @property
    def hdr(self) -> bool:
        """PQ or HLG: pictures meant for a display brighter than SDR's 100 cd/m²."""
        return self.transfer in TRANSFER_NAMES

    @property
    def deep(self) -> bool:
        """More than 8 bits, in a layout the deep path keeps (4:2:0, 10-bit)."""
        return self.bits > 8 and self.pix_fmt in DEEP_FORMATS

    @property
    def peak_nits(self) -> float:
        """The brightest light the pictures hold, for the tone map: MaxCLL, else the mastering
        display's peak, else 1000 cd/m² (HLG's nominal display; HDR10's usual grade)."""
        if self.light is not None and self.light.max_cll > 0:
            return float(self.light.max_cll)
        if self.mastering is not None and self.mastering.max_nits > 0:
            return self.mastering.max_nits
        return 1000.0

    def describe(self) -> str:
        """E.g. "HDR (PQ, BT.2020, 10-bit)" or "SDR, 10-bit"."""
        if not self.hdr:
            return f"SDR, {self.bits}-bit"
        unnamed = "BT.2020" if self.primaries == 2 else f"primaries {self.primaries}"  # unspecified: HDR's usual
        primaries = PRIMARY_NAMES.get(self.primaries, unnamed)
        return f"HDR ({TRANSFER_NAMES[self.transfer]}, {primaries}, {self.bits}-bit)"


def _bits(fmt: av.VideoFormat | None) -> int:
    if fmt is None or not fmt.components:
        return 8
    return max(int(c.bits) for c in fmt.components)


def _rational(values: tuple[int, ...], i: int) -> float:
    den = values[i + 1]
    return values[i] / den if den else 0.0


def mastering_of(data: bytes) -> MasteringDisplay | None:
    """AVMasteringDisplayMetadata's bytes (primaries r, g, b and white point as rationals,
    then min and max luminance, then two has_* flags) as a MasteringDisplay; None when it
    is too short or says nothing."""
    if len(data) < 88:
        return None
    values = struct.unpack_from("<20i2i", data)
    xy = [(_rational(values, i), _rational(values, i + 2)) for i in range(0, 16, 4)]
    has_primaries, has_luminance = values[20], values[21]
    if not (has_primaries and has_luminance):
        return None
    return MasteringDisplay(red=xy[0], green=xy[1], blue=xy[2], white=xy[3],
                            min_nits=_rational(values, 16), max_nits=_rational(values, 18))


def light_of(data: bytes) -> ContentLight | None:
    """AVContentLightMetadata's bytes (MaxCLL, MaxFALL as unsigned ints)."""
    if len(data) < 8:
        return None
    max_cll, max_fall = struct.unpack_from("<2I", data)
    return ContentLight(int(max_cll), int(max_fall))


def dynamic_of(frame: av.VideoFrame | None) -> Dynamic:
    """The dynamic range `frame` (a decoded picture) describes; an SDR 8-bit one for None."""
    if frame is None:
        return Dynamic()
    mastering: MasteringDisplay | None = None
    light: ContentLight | None = None
    for side in frame.side_data:
        if side.type == av.sidedata.sidedata.Type.MASTERING_DISPLAY_METADATA:
            mastering = mastering_of(bytes(side))
        elif side.type == av.sidedata.sidedata.Type.CONTENT_LIGHT_LEVEL:
            light = light_of(bytes(side))
    return Dynamic(bits=_bits(frame.format), transfer=int(frame.color_trc or 2),
                   primaries=int(frame.color_primaries or 2), colorspace=int(frame.colorspace or 2),
                   color_range=int(frame.color_range or 0), pix_fmt=frame.format.name,
                   mastering=mastering, light=light)


def encoder_hdr_options(codec: str, dynamic: Dynamic) -> dict[str, str]:
    """The options that put `dynamic`'s HDR10 side data into `codec`'s stream (SEI in HEVC
    and H.264, metadata OBUs in AV1): nothing for SDR or a codec that takes none."""
    if not dynamic.hdr or (dynamic.mastering is None and dynamic.light is None):
        return {}
    if codec in ("libx265", "libx264"):
        params = ["hdr10=1"] if codec == "libx265" else []
        if dynamic.mastering is not None:
            params.append(f"master-display={dynamic.mastering.x265()}")
        if dynamic.light is not None:
            key = "max-cll" if codec == "libx265" else "cll"
            params.append(f"{key}={dynamic.light.max_cll},{dynamic.light.max_fall}")
        return {f"{codec.removeprefix('lib')}-params": ":".join(params)}
    if codec == "libsvtav1":
        params = []
        if dynamic.mastering is not None:
            params.append(f"mastering-display={dynamic.mastering.svtav1()}")
        if dynamic.light is not None:
            params.append(f"content-light={dynamic.light.max_cll},{dynamic.light.max_fall}")
        return {"svtav1-params": ":".join(params)}
    return {}
