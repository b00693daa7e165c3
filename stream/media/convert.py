"""Frame conversion, both ways, defined once: decoded frames into BGR slot pictures
(`convert_into`), and BGR pictures into reused yuv420p frames for the encoders
(`YuvFramer`), plus the colour tags that say which YCbCr flavour a stream holds
(`colour_tags`, `apply_tags`). Neither conversion allocates a frame-sized array per
frame on its fast path, and both keep the colours: within about a level, also for
BT.709, full range and dithered pictures."""
from __future__ import annotations

from dataclasses import dataclass

import av
import cv2
import numpy as np
from av.video.reformatter import Interpolation

# FFmpeg's colour enums as PyAV's frames and codec contexts take and give them: plain ints.
# (PyAV's own `Colorspace` enum holds swscale's SWS_CS_* numbers, not AVColorSpace ones; only
# the reformatter takes those.)
SPC_RGB, SPC_BT709, SPC_UNSPECIFIED, SPC_BT470BG, SPC_SMPTE170M = 0, 1, 2, 5, 6  # AVColorSpace
RANGE_UNSPECIFIED, RANGE_MPEG, RANGE_JPEG = 0, 1, 2  # AVColorRange: MPEG is limited, JPEG full
PRI_BT709, PRI_UNSPECIFIED, PRI_SMPTE170M = 1, 2, 6  # AVColorPrimaries
TRC_BT709, TRC_UNSPECIFIED, TRC_SMPTE170M = 1, 2, 6  # AVColorTransferCharacteristic

# Colour spaces cv2's I420 conversion matches (BT.601, limited range); FFmpeg treats
# "unspecified" as BT.601 as well.
_BT601 = {SPC_UNSPECIFIED, SPC_BT470BG, SPC_SMPTE170M}

# (Kr, Kb) of the two matrices we write; Kg = 1 - Kr - Kb.
_KR_KB = {"bt601": (0.299, 0.114), "bt709": (0.2126, 0.0722)}

# swscale (FFmpeg 8) is biased when it writes packed RGB such as bgr24: 1 to 1.5 levels dark
# by default, up to 2 off with ACCURATE_RND. Its planar gbrp output with ACCURATE_RND is
# unbiased (means within 0.05 for 4:2:0, 4:2:2, 10-bit; BT.601/709; either range), so the
# slow path goes through gbrp and cv2.merge packs it.
_ACCURATE = Interpolation.BILINEAR | Interpolation.ACCURATE_RND


@dataclass(frozen=True)
class ColourTags:
    """The four colour tags of a YCbCr video stream, as FFmpeg's enum values (plain ints).

    `colorspace` (AVColorSpace) and `color_range` (AVColorRange) say how the pictures were
    converted: only BT.601 (also when unspecified) or BT.709, limited or full range, since
    those are what `YuvFramer` writes; `colour_tags` maps anything else onto them.
    `primaries` and `trc` describe the RGB itself; the conversions leave them alone and
    they are only passed on. The default is an untagged stream: BT.601 limited, which is
    what FFmpeg assumes for one, and written untagged again so that players show output
    and input alike.
    """

    colorspace: int = SPC_UNSPECIFIED
    color_range: int = RANGE_UNSPECIFIED
    primaries: int = PRI_UNSPECIFIED
    trc: int = TRC_UNSPECIFIED

    @classmethod
    def of(cls, matrix: str, full_range: bool = False) -> ColourTags:
        """Fully tagged: "bt601" (SMPTE 170M primaries and transfer) or "bt709"; limited or full range."""
        if matrix not in _KR_KB:
            raise ValueError(f"matrix must be one of {sorted(_KR_KB)}, not {matrix!r}")
        standard = (SPC_BT709, PRI_BT709, TRC_BT709) if matrix == "bt709" else (
            SPC_SMPTE170M, PRI_SMPTE170M, TRC_SMPTE170M)
        return cls(standard[0], RANGE_JPEG if full_range else RANGE_MPEG, standard[1], standard[2])

    @property
    def matrix(self) -> str:
        """The YCbCr matrix of these tags: "bt709" or "bt601"."""
        return "bt709" if self.colorspace == SPC_BT709 else "bt601"

    @property
    def full_range(self) -> bool:
        """True for full range (0-255), False for limited (Y 16-235, C 16-240)."""
        return self.color_range == RANGE_JPEG


def _tag(source: object, name: str, default: int) -> int:
    value = getattr(source, name, None)
    return default if value is None else int(value)


def colour_tags(source: object) -> ColourTags:
    """The tags a sink should write for pictures decoded from `source`.

    `source` is a decoded `av.VideoFrame` (the most reliable: every decoder sets these), an
    `av.VideoStream` or its codec context, anything else with FFmpeg-style `colorspace`,
    `color_range`, `color_primaries` and `color_trc` ints (absent ones count as unspecified),
    or a ColourTags (returned as is). Normalised to what `YuvFramer` can write:
    - RGB and palette sources (PNG, GIF) have no matrix; they get the untagged default,
      as before (primaries and transfer kept);
    - yuvj* pixel formats (full range by definition) count as full range;
    - a matrix other than BT.601/BT.709 (BT.2020, SMPTE 240M, ...) becomes BT.709 and is
      tagged so: the decoded RGB, with its primaries and transfer tags, is unchanged.
    """
    if isinstance(source, ColourTags):
        return source
    if isinstance(source, av.VideoStream):
        source = source.codec_context
    colorspace = _tag(source, "colorspace", SPC_UNSPECIFIED)
    color_range = _tag(source, "color_range", RANGE_UNSPECIFIED)
    primaries = _tag(source, "color_primaries", PRI_UNSPECIFIED)
    trc = _tag(source, "color_trc", TRC_UNSPECIFIED)
    fmt = getattr(source, "format", None)
    name = getattr(fmt, "name", "") or ""
    if colorspace == SPC_RGB or getattr(fmt, "is_rgb", False) or name == "pal8":
        return ColourTags(primaries=primaries, trc=trc)
    if name.startswith("yuvj"):
        color_range = RANGE_JPEG
    if color_range not in (RANGE_MPEG, RANGE_JPEG):
        color_range = RANGE_UNSPECIFIED
    if colorspace not in _BT601 and colorspace != SPC_BT709:
        colorspace = SPC_BT709
    return ColourTags(colorspace, color_range, primaries, trc)


def apply_tags(codec_context: av.video.codeccontext.VideoCodecContext, tags: ColourTags) -> None:
    """Set `tags` on an encoder's codec context; before it opens (before the first
    `encode` or the container's `start_encoding`), since the encoder writes them into the
    stream header (H.264 VUI, the mp4 `colr` box) once. The encoder ignores frames' own tags."""
    codec_context.colorspace = tags.colorspace
    codec_context.color_range = tags.color_range
    codec_context.color_primaries = tags.primaries
    codec_context.color_trc = tags.trc


def _ycbcr_matrix(matrix: str, full_range: bool) -> np.ndarray:
    """3x4 matrix for cv2.transform: BGR (and 1) -> Y, Cb, Cr of `matrix`, 8-bit codes."""
    if matrix not in _KR_KB:
        raise ValueError(f"matrix must be one of {sorted(_KR_KB)}, not {matrix!r}")
    kr, kb = _KR_KB[matrix]
    kg = 1.0 - kr - kb
    luma = np.array([kb, kg, kr])  # B, G, R order
    cb = (np.array([1.0, 0.0, 0.0]) - luma) / (2.0 * (1.0 - kb))
    cr = (np.array([0.0, 0.0, 1.0]) - luma) / (2.0 * (1.0 - kr))
    y_scale, c_scale, y_offset = (1.0, 1.0, 0.0) if full_range else (219 / 255, 224 / 255, 16.0)
    return np.array([
        [*(luma * y_scale), y_offset],
        [*(cb * c_scale), 128.0],
        [*(cr * c_scale), 128.0],
    ], np.float32)


def _plane_view(plane: av.video.plane.VideoPlane, width: int, height: int) -> np.ndarray:
    """The visible (height, width) uint8 pixels of a plane, as a view past its line padding."""
    return np.frombuffer(plane, np.uint8)[: plane.line_size * height].reshape(height, plane.line_size)[:, :width]


def copy_yuv420p_planes(frame: av.VideoFrame, i420: np.ndarray) -> None:
    """Copy a yuv420p frame's planes into one packed (H*3/2, W) I420 buffer.

    Decoded planes carry line padding (`line_size` >= width), so each plane is viewed
    as (rows, line_size) and its visible columns copied; the views allocate nothing.
    """
    height, width = frame.height, frame.width
    flat = i420.reshape(-1)
    offset = 0
    for plane, (w, h) in zip(frame.planes, ((width, height), (width // 2, height // 2),
                                             (width // 2, height // 2))):
        np.copyto(flat[offset:offset + w * h].reshape(h, w), _plane_view(plane, w, h))
        offset += w * h


def convert_into(frame: av.VideoFrame, image: np.ndarray, i420: np.ndarray | None) -> bool:
    """Decoded frame -> BGR into `image`, in the frame's own colour space and range.

    BT.601 limited-range yuv420p of the picture's size goes through `i420` (a reused
    (H*3/2, W) buffer) and cv2, without a frame-sized allocation. Anything else (BT.709,
    full range, 10-bit, 4:2:2, RGB, another size) goes through swscale, which reads the
    frame's colorspace and color_range tags, scaled to the picture's size. True when the
    fast path was taken.
    """
    h, w = image.shape[:2]
    if (
        i420 is not None
        and i420.shape == (h * 3 // 2, w)
        and frame.format.name == "yuv420p"
        and frame.width == w
        and frame.height == h
        and frame.colorspace in _BT601
        and frame.color_range != RANGE_JPEG
    ):
        copy_yuv420p_planes(frame, i420)
        cv2.cvtColor(i420, cv2.COLOR_YUV2BGR_I420, dst=image)
        return True
    # Odd widths stay about a level off on gradients: swscale stretches their chroma, whose
    # last sample covers half a block, over the whole row.
    rgb = frame.reformat(width=w, height=h, format="gbrp", interpolation=_ACCURATE)
    g, b, r = (_plane_view(plane, w, h) for plane in rgb.planes)
    cv2.merge([b, g, r], dst=image)
    return False


class YuvFramer:
    """Converts (H, W, 3) BGR uint8 pictures of one size into yuv420p VideoFrames.

    `matrix` ("bt601" or "bt709") and `full_range` pick the YCbCr flavour; the sink must
    tag its stream the same way (`apply_tags` with `ColourTags.of(matrix, full_range)`, or
    with the tags the framer's arguments came from). The frames carry the colorspace and
    color_range they were made with (encoders read the codec context's, not these).

    Y is computed per pixel and Cb/Cr from the mean colour of each 2x2 block, so a dithered
    picture, whose neighbouring pixels differ wildly, keeps its mean colour. All of it is
    cv2 into buffers allocated once, then into one reused VideoFrame (or the caller's).
    """

    def __init__(self, width: int, height: int, matrix: str = "bt601", full_range: bool = False) -> None:
        self.width, self.height = width, height
        self.matrix, self.full_range = matrix, full_range
        self._m = _ycbcr_matrix(matrix, full_range)
        self._colorspace = SPC_BT709 if matrix == "bt709" else SPC_SMPTE170M
        self._range = RANGE_JPEG if full_range else RANGE_MPEG
        # yuv420p's chroma planes of an odd size are rounded up, each last sample covering a
        # half block. Odd sizes therefore convert an edge-replicated copy one pixel wider or
        # taller, whose last blocks average just the real pixels (swscale, the alternative,
        # leaves full-range chroma half a level low and the edge samples off by up to 2).
        even_w, even_h = width + width % 2, height + height % 2
        self._padded = np.empty((even_h, even_w, 3), np.uint8) if (even_w, even_h) != (width, height) else None
        # Y: cv2's I420 conversion has BT.601 limited luma right (its chroma is one pixel's,
        # and is not used) and is the fastest. For the other flavours, cv2.transform writes as
        # many channels as the matrix has rows and only its 3x3 case is fixed-point SIMD (a
        # 1-row one is four times slower), so Y comes from a full Y/Cb/Cr picture.
        self._i420: np.ndarray | None = None
        self._ycc: np.ndarray | None = None
        if (matrix, full_range) == ("bt601", False):
            self._i420 = np.empty((even_h * 3 // 2, even_w), np.uint8)
        else:
            self._ycc = np.empty((even_h, even_w, 3), np.uint8)
        self._mean = np.empty((even_h // 2, even_w // 2, 3), np.uint8)
        self._mean_ycc = np.empty((even_h // 2, even_w // 2, 3), np.uint8)
        self._frame = self.new_frame()

    def __call__(self, image: np.ndarray) -> av.VideoFrame:
        """`image` in this framer's reused frame."""
        return self.fill(image, self._frame)

    def new_frame(self) -> av.VideoFrame:
        """A yuv420p frame of this size, for callers that keep several in rotation."""
        frame = av.VideoFrame(self.width, self.height, "yuv420p")
        frame.colorspace, frame.color_range = self._colorspace, self._range
        return frame

    def fill(self, image: np.ndarray, frame: av.VideoFrame) -> av.VideoFrame:
        """Write `image` (H, W, 3 BGR) into `frame` (yuv420p of this size) and return it."""
        width, height = self.width, self.height
        if image.shape != (height, width, 3):
            # cv2 would quietly allocate a new dst of the other size and leave ours stale.
            raise ValueError(f"picture is {image.shape}, the framer ({height}, {width}, 3)")
        source = image
        if self._padded is not None:
            extra_h, extra_w = self._padded.shape[0] - height, self._padded.shape[1] - width
            cv2.copyMakeBorder(image, 0, extra_h, 0, extra_w, cv2.BORDER_REPLICATE, dst=self._padded)
            source = self._padded
        half_w, half_h = self._mean.shape[1], self._mean.shape[0]
        if self._i420 is not None:
            cv2.cvtColor(source, cv2.COLOR_BGR2YUV_I420, dst=self._i420)
            luma = self._i420[:height, :width]
        else:
            assert self._ycc is not None
            cv2.transform(source, self._m, dst=self._ycc)
            luma = self._ycc[:height, :width, 0]
        # U and V are affine in B, G, R, so the chroma of a block's mean colour is the mean of
        # its chroma. INTER_AREA at exactly half size is the 2x2 mean, rounded half up; that
        # +1/8 level on average is the same on B, G and R, and Cb/Cr weights sum to zero.
        cv2.resize(source, (half_w, half_h), dst=self._mean, interpolation=cv2.INTER_AREA)
        cv2.transform(self._mean, self._m, dst=self._mean_ycc)
        # The encoder may still hold a reference to last frame's buffers; make_writable
        # then gives this frame fresh ones instead of overwriting those.
        frame.make_writable()
        y, u, v = (_plane_view(plane, w, h) for plane, (w, h) in zip(
            frame.planes, ((width, height), (half_w, half_h), (half_w, half_h))))
        np.copyto(y, luma)
        cv2.mixChannels([self._mean_ycc], [u, v], [1, 0, 2, 1])
        frame.colorspace, frame.color_range = self._colorspace, self._range
        return frame
