"""The face enhancers (GFPGAN 1.4, CodeFormer, GPEN-BFR 256/512, RestoreFormer++): face
restoration on an aligned crop, pasted back on the face's region.

They share the published pre- and post-processing and differ in their crop (size and
template) and in CodeFormer's second input, its fidelity `weight` (a float64 [1]); each one's
facts are its `EnhancerProfile` below. GFPGAN 1.4's:

Pre- and post-processing follow models.md (and GFPGAN's own `img2tensor`/`tensor2img`):
the crop is aligned to ffhq_512 from the face's five points, fed as RGB (x/255 - 0.5)/0.5,
and the output is clipped to [-1, 1] and mapped back by (x + 1)/2 * 255, rounded. The
paste-back uses the swapper's soft mask recipe (threshold, erode a tenth of the face, blur
a twentieth) on the face's bounding region only, never a full-frame warp.

The model costs about ten times the swapper, so in live mode it may run on every k-th
call of a track only (`every`); in between, the track's last enhanced crop is warped to
the face's current alignment and pasted again. Over n calls for one track the model runs
ceil(n / k) times. `EnhancerSwitch` keeps the model loaded only while enhancement is on.
"""
from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.backends.base import InferenceRuntime, TensorSpec
from engines.errors import EngineError
from engines.face import Face, ImageBGR, SwapResult
from engines.geometry.face_align import Affine, as_kps5, estimate_norm, warp_crop
from engines.geometry.region_warp import warp_affine_region
from engines.models.base import OnnxModel
from engines.models.enhancers import ENHANCERS, EnhancerProfile
from engines.models.inswapper import CROP_SIZE as SWAP_CROP_SIZE
from engines.models.paste import paste_region, prepare_paste_mask, white_square

log = logging.getLogger(__name__)

Blob: TypeAlias = npt.NDArray[np.floating]  # (1, 3, 512, 512), RGB in [-1, 1]
Points: TypeAlias = npt.NDArray[np.floating] | Face  # 5 points (5, 2), 68 landmarks (68, 2) or a Face

CROP_SIZE = 512  # GFPGAN's
INPUT, OUTPUT, WEIGHT = "input", "output", "weight"
MAX_TRACKS = 64  # cached crops kept at most (768 KiB each): tracks that vanish are evicted
_DOWNSCALE_FROM = 2.0  # crop pixels per frame pixel above which the crop is area-shrunk first


def _spec_ok(spec: TensorSpec, size: int) -> bool:
    """[1 or dynamic, 3, size or dynamic, size or dynamic], float32 or float16."""
    s = spec.shape
    return (spec.dtype in ("tensor(float)", "tensor(float16)") and len(s) == 4 and s[0] in (1, None)
            and s[1] == 3 and s[2] in (size, None) and s[3] in (size, None))


@dataclass
class _TrackCache:
    seen: int = 0  # forward calls for this track so far
    crop: ImageBGR | None = None  # the last enhanced 512 crop (BGR)


class GfpganEnhancer(OnnxModel):
    """An enhancer (GFPGAN 1.4 by default) behind the enhancer role: a face in, its restored
    face region out.

    `every` = k > 1 runs the model on the 1st, (k+1)th, (2k+1)th ... call for each track
    (`Face.track_id` >= 0) and re-pastes that track's last result, re-warped to the face's
    current alignment, on the calls in between. Untracked faces (track id < 0) run the
    model every time: there is no earlier result known to be the same face.
    """

    def __init__(self, runtime: InferenceRuntime, every: int = 1,
                 profile: EnhancerProfile = ENHANCERS["gfpgan_1.4"]) -> None:
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"enhancer cadence 'every' must be a whole number >= 1, got {every!r}")
        self.path = runtime.path
        self.every = every
        self.profile = profile
        self.name = profile.name
        self.size = profile.size
        self._output = OUTPUT
        super().__init__(runtime)
        self.reused = 0  # re-pastes of a cached crop (calls that skipped the model)
        self._dtype: type[np.floating] = np.float32
        self._tracks: OrderedDict[int, _TrackCache] = OrderedDict()

    @property
    def loaded(self) -> bool:
        return self.runtime.is_open

    def open(self) -> None:
        """Load the model and check its I/O: a one-line EngineError naming the file otherwise."""
        name, size = self.profile.name, self.size
        if not self.open_runtime(f"a {self.profile.title} ONNX file"):
            return
        ins = {i.name: i for i in self.runtime.inputs}
        outs = [o for o in self.runtime.outputs if _spec_ok(o, size)
                and (self.profile.output is None or o.name == self.profile.output)]
        wanted = {INPUT, WEIGHT} if self.profile.weight is not None else {INPUT}
        ok = set(ins) == wanted and _spec_ok(ins[INPUT], size) and bool(outs)
        if not ok:
            found = (f"inputs {[(i.name, list(i.shape)) for i in self.runtime.inputs]}, "
                     f"outputs {[(o.name, list(o.shape)) for o in self.runtime.outputs]}")
            self.runtime.close()
            weight = f" and {WEIGHT} [1] (float64)" if self.profile.weight is not None else ""
            raise EngineError(
                f"model file {str(self.path)!r} is not a {self.profile.title} model: expected input {INPUT} "
                f"[1,3,{size},{size}]{weight} and output {OUTPUT} [1,3,{size},{size}], found {found}")
        self._output = OUTPUT if any(o.name == OUTPUT for o in outs) else outs[0].name
        self._dtype = np.float16 if ins[INPUT].dtype == "tensor(float16)" else np.float32
        log.info("%s: %s, every %d", self.path.name, name, self.every)

    def close(self) -> None:
        """Release the session (its memory, on the device too) and the cached crops."""
        self.runtime.close()
        self._tracks.clear()

    # ---- per face ----

    def prepare_crop(self, frame_bgr: ImageBGR, points: Points) -> tuple[Blob, Affine]:
        """The `input` blob (1, 3, S, S), RGB (x/255 - 0.5)/0.5, and the frame->crop matrix M.

        The blob lives in the runtime's reusable host buffer (pinned memory when the
        pipeline gives the runtime a pinned allocator): it is valid until the next call.
        """
        M = estimate_norm(as_kps5(points), self.size, self.profile.template)
        crop = warp_crop(frame_bgr, M, self.size)
        blob = self.runtime.host_buffer(INPUT, (1, 3, self.size, self.size), self._dtype)
        # (x/255 - 0.5)/0.5 == x/127.5 - 1, written straight into the buffer (no new blob).
        np.multiply(crop[:, :, ::-1].transpose(2, 0, 1), np.float32(1.0 / 127.5), out=blob[0], casting="unsafe")
        blob -= 1
        return blob, M

    def forward_blob(self, blob: Blob) -> npt.NDArray[np.floating]:
        """Run the model: its output (1, 3, S, S), nominally in [-1, 1]. CodeFormer also gets
        its fidelity weight."""
        if not self.runtime.is_open:
            self.open()
        feeds = {INPUT: blob}
        if self.profile.weight is not None:
            feeds[WEIGHT] = np.array([self.profile.weight], np.float64)
        return self.runtime.run(feeds, [self._output])[self._output]

    @staticmethod
    def decode_output(pred: npt.NDArray[np.floating]) -> ImageBGR:
        """Model output to an S x S BGR uint8 crop: clip to [-1, 1], (x + 1)/2 * 255, rounded."""
        rgb = np.clip(np.asarray(pred[0], np.float32), -1.0, 1.0).transpose(1, 2, 0)
        out = np.rint((rgb + 1.0) * 127.5).astype(np.uint8)
        return np.ascontiguousarray(out[:, :, ::-1])

    def forward_crop(self, frame_bgr: ImageBGR, points: Points) -> tuple[ImageBGR, Affine]:
        """The enhanced 512 crop (BGR) and M; always runs the model."""
        blob, M = self.prepare_crop(frame_bgr, points)
        return self.decode_output(self.forward_blob(blob)), M

    def forward(self, frame_bgr: ImageBGR, face: Points) -> SwapResult | None:
        """The enhanced face blended into a copy of its region (the frame is not modified).

        Honours the cadence (`every`) per track; None when the crop misses the frame.
        """
        track = face.track_id if isinstance(face, Face) else -1
        if self.every == 1 or track < 0:
            crop, M = self.forward_crop(frame_bgr, face)
            return self.blend_crop(frame_bgr, crop, M)
        state = self._tracks.get(track)
        if state is None:
            state = self._tracks[track] = _TrackCache()
            while len(self._tracks) > MAX_TRACKS:
                self._tracks.popitem(last=False)
        self._tracks.move_to_end(track)
        run_model = state.seen % self.every == 0 or state.crop is None
        state.seen += 1
        if run_model:
            state.crop, M = self.forward_crop(frame_bgr, face)
        else:
            # The last result of this track, warped with the face's current alignment.
            M = estimate_norm(as_kps5(face), self.size, self.profile.template)
            self.reused += 1
        assert state.crop is not None
        return self.blend_crop(frame_bgr, state.crop, M)

    def forget(self, track_id: int) -> None:
        """Drop a track's cached crop (its track has ended)."""
        self._tracks.pop(track_id, None)

    # ---- paste-back, on the face's region only ----

    def blend_crop(self, frame_bgr: ImageBGR, crop_bgr: ImageBGR, M: Affine) -> SwapResult | None:
        """Blend a crop (aligned by M) into a copy of the face's region with the swapper's soft mask.

        Returns the region, the blended region (`patch`) and `valid` (255 where the blend
        weight is non-zero, the only pixels where `patch` may differ from the frame).
        """
        size = crop_bgr.shape[0]
        # A `size` crop under M covers the frame where a 128 crop under M * 128/size does, so
        # the swapper's bound of the region its paste-back can touch holds here too.
        region = paste_region(frame_bgr.shape, M * (SWAP_CROP_SIZE / size), SWAP_CROP_SIZE)
        if region is None:
            return None
        scale = math.sqrt(abs(float(np.linalg.det(M[:, :2]))))  # crop pixels per frame pixel
        if scale > _DOWNSCALE_FROM:
            # A face much smaller than the crop: bilinear sampling of the 512 crop would skip
            # pixels (aliasing the restored detail); average them down first. cv2.resize maps
            # pixel centres, x' = (x + 0.5) r - 0.5, hence the half-pixel term.
            n = max(int(math.ceil(size / scale)), 8)
            r = n / size
            crop_bgr = cv2.resize(crop_bgr, (n, n), interpolation=cv2.INTER_AREA)
            M = M * r
            M[:, 2] += 0.5 * (r - 1.0)
            size = n
        x0, y0, x1, y1 = region
        rw, rh = x1 - x0, y1 - y0
        IM = cv2.invertAffineTransform(M)
        mask = prepare_paste_mask(warp_affine_region(IM, region, [(white_square(size), 0.0)])[0])
        IM[:, 2] -= (x0, y0)  # frame -> region coordinates
        # Edge pixels replicated, not black: the blur's outer tail then fades in the crop's own
        # border colour instead of a dark seam (the mask alone decides the weights).
        fake = cv2.warpAffine(crop_bgr, IM, (rw, rh), borderMode=cv2.BORDER_REPLICATE)
        if mask is None:
            return None
        alpha = mask.reshape(rh, rw, 1)
        roi = frame_bgr[y0:y1, x0:x1]
        # Rounded (the swapper truncates, as insightface does): a blur weight of 0.99999 must
        # not turn 255 into 254, nor bias the re-pasted face half a level darker every frame.
        patch = (alpha * fake + (1 - alpha) * roi.astype(np.float32) + 0.5).astype(np.uint8)
        valid = np.where(mask > 0, np.uint8(255), np.uint8(0))
        return SwapResult(region=region, patch=patch, valid=valid)

    def paste(self, frame: ImageBGR, face: Face | None, result: SwapResult) -> None:
        """Write `result` into `frame` in place, inside `result.region` only (where valid)."""
        result.paste_into(frame)


class EnhancerSwitch:
    """Enhancement on or off at run time: the model is loaded only while it is on.

    Turning it off closes the enhancer, which drops its session (so its memory, on a GPU
    too, is freed); turning it on again reloads it. `forward` and the switch share a lock,
    so a UI thread may flip it while the swap stage is running faces through it.
    """

    def __init__(self, enhancer: GfpganEnhancer, enabled: bool = False) -> None:
        self.enhancer = enhancer
        self._lock = threading.Lock()
        self._enabled = False
        if enabled:
            self.enable()

    @property
    def enabled(self) -> bool:
        return self._enabled

    def enable(self) -> None:
        """Load the model (a bad file raises here, and the switch stays off)."""
        with self._lock:
            self.enhancer.open()
            self._enabled = True

    def disable(self) -> None:
        """Release the model and its cached crops."""
        with self._lock:
            self._enabled = False
            self.enhancer.close()

    def set(self, enabled: bool) -> None:
        if enabled:
            self.enable()
        else:
            self.disable()

    def forward(self, frame_bgr: ImageBGR, face: Face) -> SwapResult | None:
        """The enhanced face region, or None while enhancement is off."""
        with self._lock:
            if not self._enabled:
                return None
            return self.enhancer.forward(frame_bgr, face)

    def paste(self, frame: ImageBGR, face: Face | None, result: SwapResult) -> None:
        self.enhancer.paste(frame, face, result)
