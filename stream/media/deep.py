"""A 10-bit input kept 10-bit: the decoded planes ride along with the 8-bit working picture,
and only the pixels the swap changed are written back into them.

The source copies each frame's own yuv420p10le planes (`keep_planes`, into the slot's
"deep" buffer) and its 8-bit picture as the stages got it ("before"). The sink compares the
swapped picture with "before": where nothing changed, the output holds the input's samples
exactly; where the swap did, the new colour is converted at 10-bit precision with the
input's own matrix and range (`DeepFramer`). So tags and samples agree, and the picture
outside the faces loses nothing to the 8-bit working space."""
from __future__ import annotations

import av
import cv2
import numpy as np

# (Kr, Kb) of the matrices a 10-bit input may be in, by AVColorSpace.
_KR_KB = {1: (0.2126, 0.0722), 9: (0.2627, 0.0593), 10: (0.2627, 0.0593)}
_BT601 = (0.299, 0.114)


def deep_buffers(height: int, width: int) -> dict[str, tuple[tuple[int, ...], type]]:
    """The extra ring-A buffers of a deep run: the packed 10-bit planes and the picture before."""
    return {"deep": ((height * 3 // 2, width), np.uint16), "before": ((height, width, 3), np.uint8)}


def _packed(buffer: np.ndarray, width: int, height: int) -> list[np.ndarray]:
    """Y, U, V views of a packed (H*3/2, W) 4:2:0 buffer."""
    flat = buffer.reshape(-1)
    half = (width // 2) * (height // 2)
    y = flat[: width * height].reshape(height, width)
    u = flat[width * height: width * height + half].reshape(height // 2, width // 2)
    v = flat[width * height + half: width * height + 2 * half].reshape(height // 2, width // 2)
    return [y, u, v]


def _plane_view(plane: av.video.plane.VideoPlane, width: int, height: int) -> np.ndarray:
    return np.frombuffer(plane, np.uint16)[: plane.line_size // 2 * height].reshape(height, -1)[:, :width]


def keep_planes(frame: av.VideoFrame, deep: np.ndarray, turn: int | None = None) -> None:
    """Copy a yuv420p10le frame's planes into `deep` (packed, of the upright size), turned
    by `turn` (a cv2 rotate code) when the stored picture is not upright."""
    fw, fh = frame.width, frame.height
    upright_w, upright_h = (fh, fw) if turn in (cv2.ROTATE_90_CLOCKWISE, cv2.ROTATE_90_COUNTERCLOCKWISE) else (fw, fh)
    targets = _packed(deep, upright_w, upright_h)
    sizes = ((fw, fh), (fw // 2, fh // 2), (fw // 2, fh // 2))
    for plane, (w, h), target in zip(frame.planes, sizes, targets):
        source = _plane_view(plane, w, h)
        if turn is None:
            np.copyto(target, source)
        else:
            cv2.rotate(source, turn, dst=target)


class DeepFramer:
    """Swapped 8-bit pictures back into their input's 10-bit 4:2:0 planes (reused frames)."""

    def __init__(self, width: int, height: int, colorspace: int, full_range: bool) -> None:
        self.width, self.height = width, height
        kr, kb = _KR_KB.get(colorspace, _BT601)
        kg = 1.0 - kr - kb
        luma = np.array([kb, kg, kr])  # B, G, R
        cb = (np.array([1.0, 0.0, 0.0]) - luma) / (2 * (1 - kb))
        cr = (np.array([0.0, 0.0, 1.0]) - luma) / (2 * (1 - kr))
        y_scale, c_scale, y_offset = (1023.0, 1023.0, 0.0) if full_range else (876.0, 896.0, 64.0)
        self._m = (np.array([[*(luma * y_scale), y_offset], [*(cb * c_scale), 512.0], [*(cr * c_scale), 512.0]])
                   / np.array([255.0, 255.0, 255.0, 1.0])).astype(np.float32)
        self._changed = np.empty((height, width * 3), np.uint8)
        self._frame = av.VideoFrame(width, height, "yuv420p10le")
        self.changed_pixels = 0  # in the last frame

    def fill(self, image: np.ndarray, before: np.ndarray, deep: np.ndarray) -> av.VideoFrame:
        """The input's planes `deep`, with the pixels where `image` differs from `before`
        (the picture the stages were given) converted from `image`."""
        w, h = self.width, self.height
        frame = self._frame
        frame.make_writable()  # the encoder may still hold the last frame's buffers
        planes = [_plane_view(plane, pw, ph) for plane, (pw, ph) in
                  zip(frame.planes, ((w, h), (w // 2, h // 2), (w // 2, h // 2)))]
        for target, source in zip(planes, _packed(deep, w, h)):
            np.copyto(target, source)
        self.changed_pixels = 0
        cv2.compare(image.reshape(h, w * 3), before.reshape(h, w * 3), cv2.CMP_NE, dst=self._changed)
        left, top, across, down = cv2.boundingRect(self._changed)  # of the changed bytes (3 a pixel)
        if across == 0:
            return frame
        # The changed box, on even coordinates (a chroma sample covers 2x2 pixels).
        y0, y1 = top & ~1, min(h, (top + down + 1) & ~1)
        x0, x1 = (left // 3) & ~1, min(w, ((left + across - 1) // 3 + 2) & ~1)
        box = self._changed[y0:y1, x0 * 3:x1 * 3].reshape(y1 - y0, x1 - x0, 3)
        pixels = box.max(axis=2) > 0
        self.changed_pixels = int(np.count_nonzero(pixels))
        picture = np.ascontiguousarray(image[y0:y1, x0:x1]).astype(np.float32)
        ycc = cv2.transform(picture, self._m)
        luma = planes[0][y0:y1, x0:x1]
        np.copyto(luma, np.clip(np.rint(ycc[..., 0]), 0, 1023).astype(np.uint16), where=pixels)
        # Chroma from each 2x2 block's mean colour, wherever any of its pixels changed.
        blocks = pixels.reshape((y1 - y0) // 2, 2, (x1 - x0) // 2, 2).any(axis=(1, 3))
        mean = cv2.resize(picture, ((x1 - x0) // 2, (y1 - y0) // 2), interpolation=cv2.INTER_AREA)
        chroma = np.clip(np.rint(cv2.transform(mean, self._m)), 0, 1023).astype(np.uint16)
        for plane, channel in ((planes[1], 1), (planes[2], 2)):
            np.copyto(plane[y0 // 2:y1 // 2, x0 // 2:x1 // 2], chroma[..., channel], where=blocks)
        return frame
