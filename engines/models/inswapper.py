"""inswapper_128 (fp32 and fp16 exports), and the swappers of its shape (hyperswap, simswap):
the source identity painted onto an aligned target crop.

What differs between them (crop size and template, normalisation, output range, the source
embedding's preparation) is each one's `SwapperProfile` (engines/models/swappers.py); this
class runs any of them.

Pre- and post-processing follow insightface's `INSwapper` exactly (crop aligned to
arcface_128, RGB in [0,1]; latent = normalised embedding @ emap, normalised again; output
scaled by 255, clipped and truncated to uint8). The paste-back builds the same soft mask as
insightface's (threshold, erode and blur in proportion to the face's size) but only on the
face's bounding region: the region is the warped crop's footprint plus the blur's reach, so
every pixel insightface's full-frame version changes lies inside it. There it is within
`region_warp.BOUND` grey levels of insightface's paste on any CPU (exact where this CPU's
OpenCV allows). With `full_frame_paste` (the reference mode) the paste-back runs as
insightface runs it, over the whole frame: exact on every CPU, at a full-frame cost per face.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias

import cv2
import numpy as np
import numpy.typing as npt

from engines.backends.base import InferenceRuntime, TensorSpec
from engines.backends.bound_outputs import BindsOutputs
from engines.errors import EngineError
from engines.face import Face, ImageBGR, SwapResult
from engines.geometry.carry import MAX_RESIDUAL, carry_warp, residual, ring
from engines.geometry.face_align import Affine, as_kps5, estimate_norm, warp_crop
from engines.geometry.region_warp import warp_affine_region
from engines.models.base import OnnxModel
from engines.models.masks import Masker
from engines.models.paste import paste_region, prepare_paste_mask, rects_meet, white_square
from engines.models.pixel_boost import boost_factor, explode, implode
from engines.models.swappers import PROFILES, SwapperProfile
from engines.protocols import BatchSpec

log = logging.getLogger(__name__)

Latent: TypeAlias = npt.NDArray[np.float32]  # (1, 512)
Blob: TypeAlias = npt.NDArray[np.float32]  # (N, 3, S, S), RGB normalised as the profile says

CROP_SIZE = 128  # inswapper's
LATENT_DIM = 512
TARGET, SOURCE, OUTPUT = "target", "source", "output"
INSWAPPER_128 = PROFILES["inswapper_128"]


@dataclass(frozen=True, eq=False)
class InSwapBatch:
    """A frame's faces prepared for the model: rows 0..count-1 of the batch buffers hold their
    target blobs and latents; `affines` are their frame->crop matrices, for the paste-back;
    `latents` their source latents (a face whose crop an earlier face's paste changed is
    swapped again from the frame as it then stands)."""

    affines: tuple[Affine, ...]
    latents: tuple[Latent, ...] = ()
    landmarks: tuple[npt.NDArray[np.float32] | None, ...] = ()  # in crop pixels, for the area mask
    tracks: tuple[int, ...] = ()  # the faces' track ids (-1: none), for the masks' cadence
    masks_due: tuple[bool, ...] = ()  # whose mask models run this frame

    @property
    def count(self) -> int:
        return len(self.affines)


@dataclass(frozen=True, eq=False)
class CropCut:
    """What a face's swap off the frame path needs, copied out of its frame: the aligned crop,
    the source latent, and the face's landmarks in the crop."""

    crop: ImageBGR
    latent: Latent
    points: npt.NDArray[np.float32]  # (68, 2), crop pixels
    inside: npt.NDArray[np.float32] | None = None  # where the crop came from the frame (None: all of it)


@dataclass(frozen=True, eq=False)
class CropSwap:
    """A face swapped on one frame, to be carried onto later ones: the swapped crop, the
    landmarks it was made for (crop pixels), its model masks (crop space) and where its crop
    came from inside that frame (None: all of it)."""

    crop: ImageBGR
    points: npt.NDArray[np.float32]
    masks: tuple[npt.NDArray[np.float32], ...] = ()
    inside: npt.NDArray[np.float32] | None = None
    target: ImageBGR | None = None  # the crop it was swapped from


# A carried swap is left out where the picture under it changed since (something came in front
# of the face, or left it; the mouth opened on teeth): where the target's crop then, carried
# as the swap is, and its crop now differ by more than GATE_FROM grey levels (after a blur over
# a sixteenth of the crop, less the median difference: a change of light moves every pixel),
# fully by GATE_FROM + GATE_SPAN. There the target shows until the next swap.
GATE_FROM = 35.0
GATE_SPAN = 35.0


def changed_gate(then: ImageBGR, now: ImageBGR) -> npt.NDArray[np.float32]:
    """1 where the picture `now` differs from `then` (same crop) past the gate, 0 where not."""
    diff = cv2.absdiff(then, now).max(axis=2).astype(np.float32)
    diff -= float(np.median(diff))
    k = max(3, then.shape[0] // 16) | 1
    diff = cv2.blur(diff, (k, k))
    return np.clip((diff - GATE_FROM) * (1.0 / GATE_SPAN), 0.0, 1.0)


def inside_frame(frame_shape: tuple[int, ...], M: Affine, size: int) -> npt.NDArray[np.float32] | None:
    """Where a crop (frame->crop matrix M) took its pixels from inside the frame: 1 there, 0
    where it was filled (black), softened over a few pixels; None when all of it came from the
    frame. A face swapped at the frame's edge carries no black band inwards as it comes in."""
    h, w = frame_shape[:2]
    IM = cv2.invertAffineTransform(M)
    ends = np.array([[0, 0], [size - 1, 0], [0, size - 1], [size - 1, size - 1]], np.float64) @ IM[:, :2].T + IM[:, 2]
    if (ends >= 0).all() and (ends[:, 0] <= w - 1).all() and (ends[:, 1] <= h - 1).all():
        return None
    xs, ys = np.meshgrid(np.arange(size, dtype=np.float32), np.arange(size, dtype=np.float32))
    fx = IM[0, 0] * xs + IM[0, 1] * ys + IM[0, 2]
    fy = IM[1, 0] * xs + IM[1, 1] * ys + IM[1, 2]
    inside = ((fx >= 0) & (fx <= w - 1) & (fy >= 0) & (fy <= h - 1)).astype(np.float32)
    k = max(3, size // 32) | 1
    return cv2.GaussianBlur(cv2.erode(inside, np.ones((k, k), np.uint8)), (k, k), 0)


def _dims_match(spec: TensorSpec, dims: tuple[int, ...]) -> bool:
    """Shape [N, *dims] with N fixed at 1 or dynamic, and a float type."""
    return (spec.dtype in ("tensor(float)", "tensor(float16)") and len(spec.shape) == len(dims) + 1
            and spec.shape[0] in (1, None) and tuple(spec.shape[1:]) == dims)


def _a(name: str) -> str:
    """`name` with its indefinite article ("an inswapper_128", "a hyperswap_1a_256")."""
    return f"{'an' if name[:1] in 'aeiou' else 'a'} {name}"


class InSwapper(OnnxModel):
    """A crop swapper (inswapper_128 by default) behind the swapper role: target crop + source
    latent in, swapped crop out. `converter`: the runtime of the profile's embedding converter
    (simswap's crossface), when it has one."""

    def __init__(self, runtime: InferenceRuntime, recrop_after_paste: bool = False,
                 full_frame_paste: bool = False, profile: SwapperProfile = INSWAPPER_128,
                 converter: InferenceRuntime | None = None, pixel_boost: int = 0,
                 masker: Masker | None = None) -> None:
        self.path = runtime.path
        super().__init__(runtime)
        if profile.converter and converter is None:
            raise ValueError(f"{profile.name} needs its embedding converter ({profile.converter})")
        self.profile = profile
        self.name = profile.family
        self.size = profile.size  # the model's input and output
        # Pixel boost (engines/models/pixel_boost.py): the face cropped at k times the model's
        # size and swapped as k*k tiles; the paste-back works on the whole crop.
        self.boost = boost_factor(pixel_boost, profile.size, profile.name)
        self.tiles = self.boost * self.boost
        self.crop_size = profile.size * self.boost
        self.masker = masker if masker is not None and masker.options.types else None
        self.converter = converter
        self._mean = np.asarray(profile.mean, np.float32).reshape(3, 1, 1)
        self._inv_std = (1.0 / np.asarray(profile.std, np.float32)).reshape(3, 1, 1)
        # insightface's loop crops each face from the frame the faces before it left: a face
        # whose crop an earlier paste changed is swapped again from there (one more call).
        self.recrop_after_paste = recrop_after_paste
        # Warp, erode and blur over the whole frame, as insightface does: the same OpenCV
        # calls on the same arrays, so the same pixels whatever the CPU dispatches to.
        self.full_frame_paste = full_frame_paste
        self.emap: npt.NDArray[np.float32] = np.zeros((0, 0), np.float32)
        self.batch: int | None = 1  # None when the export takes any batch size
        self._dtypes: dict[str, type[np.floating]] = {TARGET: np.float32, SOURCE: np.float32, OUTPUT: np.float32}

    def open(self) -> None:
        """Load the model, check its I/O and read `emap` (the graph's last initializer) where
        the profile's source needs it."""
        name, size = self.profile.name, self.size
        if not self.open_runtime(f"{_a(name)} ONNX file"):
            return
        ins = {i.name: i for i in self.runtime.inputs}
        outs = {o.name: o for o in self.runtime.outputs}
        ok = (len(ins) == 2 and set(outs) == {OUTPUT, *self.profile.extra_outputs}
              and TARGET in ins and _dims_match(ins[TARGET], (3, size, size))
              and SOURCE in ins and _dims_match(ins[SOURCE], (LATENT_DIM,))
              and _dims_match(outs[OUTPUT], (3, size, size)))
        if not ok:
            self.runtime.close()
            found = (f"inputs {[(i.name, list(i.shape)) for i in self.runtime.inputs]}, "
                     f"outputs {[(o.name, list(o.shape)) for o in self.runtime.outputs]}")
            extra = "".join(f" and {o}" for o in self.profile.extra_outputs)
            raise EngineError(
                f"model file {str(self.path)!r} is not {_a(name)} model: expected inputs "
                f"target [1,3,{size},{size}] and source [1,{LATENT_DIM}] and output "
                f"output [1,3,{size},{size}]{extra}, found {found}")
        if self.profile.source == "emap":
            self.emap = self._read_emap()
        if self.converter is not None:
            self._open_converter()
        if self.masker is not None:
            self.masker.open()
        dynamic = ins[TARGET].shape[0] is None and ins[SOURCE].shape[0] is None
        self.batch = None if dynamic else 1
        # The fp16 export keeps float32 I/O; a pure-fp16 one gets its feeds cast.
        specs = {**ins, **outs}
        self._dtypes = {name: np.float16 if specs[name].dtype == "tensor(float16)" else np.float32
                        for name in (TARGET, SOURCE, OUTPUT)}
        log.info("%s: %s, batch %s", self.path.name, name, "dynamic" if self.batch is None else self.batch)

    def _open_converter(self) -> None:
        """The embedding converter: one [N,512] input, one [N,512] output."""
        conv = self.converter
        assert conv is not None
        if conv.is_open:
            return
        what = _a(self.profile.converter or "converter")
        conv.open_expecting(f"{what} ONNX file")
        ins, outs = conv.inputs, conv.outputs
        if not (len(ins) == 1 and len(outs) >= 1 and _dims_match(ins[0], (LATENT_DIM,))
                and _dims_match(outs[0], (LATENT_DIM,))):
            conv.close()
            self.runtime.close()
            found = (f"inputs {[(i.name, list(i.shape)) for i in ins]}, "
                     f"outputs {[(o.name, list(o.shape)) for o in outs]}")
            raise EngineError(f"model file {str(conv.path)!r} is not {what} model: expected "
                              f"one input [1,{LATENT_DIM}] and an output [1,{LATENT_DIM}], found {found}")

    def _read_emap(self) -> npt.NDArray[np.float32]:
        import onnx
        from onnx import numpy_helper

        try:
            model = onnx.load(str(self.path))
            emap = numpy_helper.to_array(model.graph.initializer[-1])
        except Exception as exc:  # a protobuf or external-data failure: one line for the user
            self.runtime.close()
            raise EngineError(f"model file {str(self.path)!r}: cannot read emap ({exc})") from exc
        del model  # the weights are in the session already; only emap is kept
        if emap.shape != (LATENT_DIM, LATENT_DIM):
            self.runtime.close()
            raise EngineError(f"model file {str(self.path)!r}: expected the last initializer (emap) to be "
                              f"{LATENT_DIM}x{LATENT_DIM}, found shape {list(emap.shape)}")
        # float16 in an fp16 export: numpy upcasts it to float32 in insightface's dot anyway.
        return np.ascontiguousarray(emap, dtype=np.float32)

    # ---- source: once per source face ----

    def prepare_source(self, embedding: npt.NDArray[np.floating]) -> Latent:
        """The model's `source` input for a raw ArcFace embedding: (1, 512) float32. inswapper:
        the normalised embedding @ emap, normalised again (insightface); hyperswap: the
        normalised embedding; simswap: the converter's output for the raw embedding, normalised.

        Depends on the source face only: compute it once per source and cache it.
        """
        if not self.runtime.is_open:
            self.open()
        emb = np.asarray(embedding, dtype=np.float32).ravel()
        if emb.shape != (LATENT_DIM,):
            raise ValueError(f"expected a {LATENT_DIM}-d embedding, got shape {emb.shape}")
        if self.profile.source == "converted":
            assert self.converter is not None
            name = self.converter.inputs[0].name
            out = self.converter.run({name: emb.reshape(1, -1)})
            latent = np.asarray(next(iter(out.values())), np.float32).reshape(1, -1)
            return latent / np.linalg.norm(latent)
        latent = (emb / np.linalg.norm(emb)).reshape((1, -1))
        if self.profile.source == "normed":
            return latent.astype(np.float32)
        latent = np.dot(latent, self.emap)
        latent /= np.linalg.norm(latent)
        return latent

    # ---- per frame ----

    def prepare_crop(self, frame_bgr: ImageBGR,
                     kps5: npt.NDArray[np.floating] | Face) -> tuple[Blob, Affine]:
        """The `target` blob (T, 3, S, S) (T = 1, or the pixel boost's tiles), normalised as the
        profile says, and the frame->crop matrix M."""
        blob = np.empty((self.tiles, 3, self.size, self.size), np.float32)
        return blob, self.prepare_crop_into(frame_bgr, kps5, blob)

    def prepare_crop_into(self, frame_bgr: ImageBGR, kps5: npt.NDArray[np.floating] | Face,
                          rows: npt.NDArray[np.floating]) -> Affine:
        """Write one face's `target` blob into `rows` (T, 3, S, S) in place; returns M."""
        crop, M = self.face_crop(frame_bgr, kps5)
        self.blobs_into(crop, rows)
        return M

    def face_crop(self, frame_bgr: ImageBGR, kps5: npt.NDArray[np.floating] | Face) -> tuple[ImageBGR, Affine]:
        """The face's aligned crop (crop_size px) and the frame->crop matrix M."""
        M = estimate_norm(as_kps5(kps5), self.crop_size, self.profile.template)
        return warp_crop(frame_bgr, M, self.crop_size), M

    def blobs_into(self, crop: ImageBGR, rows: npt.NDArray[np.floating]) -> None:
        """A face's BGR crop as the model's T input rows (its pixel boost's tiles)."""
        if self.boost == 1:
            self.blob_into(crop, rows[0])
            return
        for tile, row in zip(implode(crop, self.boost), rows):
            self.blob_into(tile, row)

    def crops_of(self, tiles: list[ImageBGR]) -> list[ImageBGR]:
        """Decoded model outputs, T per face, as one crop per face (the tiles put back)."""
        if self.boost == 1:
            return tiles
        k, t = self.boost, self.tiles
        return [explode(np.stack(tiles[i:i + t]), k) for i in range(0, len(tiles), t)]

    def blob_into(self, crop: ImageBGR, row: npt.NDArray[np.floating]) -> None:
        """A BGR crop as the model's input, written into `row` (3, S, S)."""
        # insightface's cv2.dnn.blobFromImage(crop, 1/255, swapRB=True), without a new array:
        # a float32 product with float32(1/255) is bit-identical to it for every uint8 value.
        np.multiply(crop[:, :, ::-1].transpose(2, 0, 1), np.float32(1.0 / 255.0), out=row,
                    dtype=np.float32, casting="unsafe")
        if not self.profile.plain_input:
            row -= self._mean
            row *= self._inv_std

    def forward_blob(self, blob: Blob, latent: Latent) -> npt.NDArray[np.floating]:
        """Run the model: `output` (N, 3, 128, 128) for N target blobs and N (or 1) latents."""
        if not self.runtime.is_open:
            self.open()
        n = blob.shape[0]
        if latent.shape[0] != n:
            latent = np.repeat(latent.reshape(1, -1), n, axis=0)
        tgt = np.ascontiguousarray(blob, dtype=self._dtypes[TARGET])
        src = np.ascontiguousarray(latent, dtype=self._dtypes[SOURCE])
        if self.batch is None or n == 1:
            return self.runtime.run({TARGET: tgt, SOURCE: src}, [OUTPUT])[OUTPUT]
        # The published export is batch-1: one run per face.
        return np.concatenate([self.runtime.run({TARGET: tgt[i:i + 1], SOURCE: src[i:i + 1]}, [OUTPUT])[OUTPUT]
                               for i in range(n)])

    def decode_output(self, pred: npt.NDArray[np.floating]) -> list[ImageBGR]:
        """Model output to S x S BGR uint8 crops: x 255, clip, truncate (as insightface); an
        output in -1..1 (hyperswap) is first brought to 0..1 (x * 0.5 + 0.5)."""
        out = []
        for one in pred:
            rgb = one.transpose((1, 2, 0))
            if self.profile.signed_output:
                rgb = rgb * np.float32(0.5) + np.float32(0.5)
            out.append(np.ascontiguousarray(np.clip(255 * rgb, 0, 255).astype(np.uint8)[:, :, ::-1]))
        return out

    def forward_crop(self, frame_bgr: ImageBGR, kps5: npt.NDArray[np.floating] | Face,
                     latent: Latent) -> tuple[ImageBGR, Affine]:
        """The swapped 128x128 BGR crop and M: insightface's `get(..., paste_back=False)`."""
        blob, M = self.prepare_crop(frame_bgr, kps5)
        return self.crops_of(self.decode_output(self.forward_blob(blob, latent)))[0], M

    def forward(self, frame_bgr: ImageBGR, kps5: npt.NDArray[np.floating] | Face,
                latent: Latent) -> SwapResult | None:
        """Swap one face: the blended face region of the frame (the frame is not modified).

        `kps5` is the five alignment points (5, 2), or 68 landmarks (68, 2), or a `Face`.
        None when the face's crop does not overlap the frame.
        """
        if self.masker is not None:
            return self.forward_many(frame_bgr, [kps5], [latent])[0]
        crop, M = self.forward_crop(frame_bgr, kps5, latent)
        return self.blend_crop(frame_bgr, crop, M)

    def forward_many(self, frame_bgr: ImageBGR, kps5_list: Sequence[npt.NDArray[np.floating] | Face],
                     latents: Sequence[Latent]) -> list[SwapResult | None]:
        """Swap several faces of one frame; one model call when the export allows batches.

        The faces are composited in order, as insightface's per-frame loop pastes them: each
        result is blended onto the frame as it stands after the results before it, so pasting
        the results in order gives that loop's frame (see `finish_batch`).
        """
        if len(kps5_list) != len(latents):
            raise ValueError(f"{len(kps5_list)} faces but {len(latents)} latents")
        if not kps5_list:
            return []
        spec = self.batch_spec(len(kps5_list))
        inputs = {name: np.empty(shape, dtype) for name, (shape, dtype) in spec.inputs.items()}
        batch = self.prepare_batch(frame_bgr, kps5_list, latents, inputs)
        return self.finish_batch(frame_bgr, batch, self.forward_batch(batch, inputs, {}))

    # ---- per frame, in three phases (prepare, forward, finish: see engines.protocols.Swapper) ----

    def batch_spec(self, max_faces: int) -> BatchSpec:
        """Batch buffers for up to `max_faces` faces: target blobs and latents in, output out,
        in the model's own I/O types."""
        if not self.runtime.is_open:
            self.open()
        rows = max(1, max_faces) * self.tiles
        crop = (rows, 3, self.size, self.size)
        masks = self.masker.batch_inputs(max(1, max_faces)) if self.masker is not None else {}
        return BatchSpec(inputs={TARGET: (crop, np.dtype(self._dtypes[TARGET])),
                                 SOURCE: ((rows, LATENT_DIM), np.dtype(self._dtypes[SOURCE])), **masks},
                         outputs={OUTPUT: (crop, np.dtype(self._dtypes[OUTPUT]))})

    def prepare_batch(self, frame_bgr: ImageBGR, kps5_list: Sequence[npt.NDArray[np.floating] | Face],
                      latents: Sequence[Latent], inputs: Mapping[str, np.ndarray]) -> InSwapBatch:
        """Each face's target blob and latent written into row i of `inputs` (the CPU half
        before the model); the frame is only read."""
        if len(kps5_list) != len(latents):
            raise ValueError(f"{len(kps5_list)} faces but {len(latents)} latents")
        tgt, src = inputs[TARGET], inputs[SOURCE]
        t = self.tiles
        if len(kps5_list) * t > min(tgt.shape[0], src.shape[0]):
            raise ValueError(f"{len(kps5_list)} faces but the batch buffers hold "
                             f"{min(tgt.shape[0], src.shape[0]) // t}")
        affines, landmarks, tracks, due = [], [], [], []
        for i, (kps5, latent) in enumerate(zip(kps5_list, latents)):
            if self.masker is None:
                affines.append(self.prepare_crop_into(frame_bgr, kps5, tgt[i * t:(i + 1) * t]))
            else:  # the masks' models see the same crop
                crop, M = self.face_crop(frame_bgr, kps5)
                self.blobs_into(crop, tgt[i * t:(i + 1) * t])
                track = kps5.track_id if isinstance(kps5, Face) else -1
                due.append(self.masker.prepare_into(crop, i, inputs, track))
                tracks.append(track)
                affines.append(M)
                lm = kps5.landmarks if isinstance(kps5, Face) else None
                landmarks.append(None if lm is None else
                                 cv2.transform(np.asarray(lm, np.float32).reshape(-1, 1, 2), M).reshape(-1, 2))
            src[i * t:(i + 1) * t] = np.asarray(latent, np.float32).reshape(1, -1)
        return InSwapBatch(tuple(affines), tuple(latents), tuple(landmarks), tuple(tracks), tuple(due))

    def forward_batch(self, batch: InSwapBatch, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> Any:
        """The swapper on the prepared rows and, where masks need models, those models: the
        swapper's output, or (it, the mask models' outputs)."""
        pred = self._forward_swap(batch, inputs, outputs)
        if self.masker is None or not self.masker.models or batch.count == 0:
            return pred
        return pred, self.masker.run(batch.masks_due, inputs)

    def _forward_swap(self, batch: InSwapBatch, inputs: Mapping[str, np.ndarray],
                      outputs: Mapping[str, np.ndarray]) -> npt.NDArray[np.floating]:
        """The model on the prepared rows: one call for the batch (one per face for a batch-1
        export). The output is written into `outputs[OUTPUT]` where the runtime can write
        there (engines.backends.bound_outputs), else it is the runtime's own array. With a
        pixel boost each face is T rows (its tiles)."""
        n = batch.count * self.tiles
        if n == 0:
            return np.empty((0, 3, self.size, self.size), np.float32)
        if not self.runtime.is_open:
            self.open()
        tgt, src = inputs[TARGET][:n], inputs[SOURCE][:n]
        out = outputs[OUTPUT][:n] if OUTPUT in outputs else None
        if self.batch is None or n == 1:
            return self._run(tgt, src, out)
        # The published export is batch-1: one run per face.
        views = [None if out is None else out[i:i + 1] for i in range(n)]
        parts = [self._run(tgt[i:i + 1], src[i:i + 1], view) for i, view in enumerate(views)]
        if out is not None and all(p is v for p, v in zip(parts, views)):
            return out
        return np.concatenate(parts)

    def _run(self, tgt: Blob, src: Latent, out: np.ndarray | None) -> npt.NDArray[np.floating]:
        feeds = {TARGET: tgt, SOURCE: src}
        if out is not None and isinstance(self.runtime, BindsOutputs):
            return self.runtime.run_into(feeds, {OUTPUT: out})[OUTPUT]
        return self.runtime.run(feeds, [OUTPUT])[OUTPUT]

    def finish_batch(self, frame_bgr: ImageBGR, batch: InSwapBatch, swapped: Any) -> list[SwapResult | None]:
        """Decode each face's output and composite the faces in order (the CPU half after the
        model); `frame_bgr` is only read.

        Face k is blended onto the frame as it stands after faces 0..k-1 (insightface's loop
        `res = swapper.get(res, face, source)`), so a later face's soft mask edge never puts
        original pixels back over an earlier swap: pasting the results in order composites
        them one after another. Every face's swap comes from the batched call, made on crops
        of the unmodified frame; with `recrop_after_paste`, a face whose crop an earlier paste
        changed is swapped again from the frame as it then stands (one more model call for
        that face), so the frame equals insightface's loop exactly. With `full_frame_paste`
        every face after the first is blended onto the running frame, met or not: no pixel
        of the result then rests on the region bound.
        """
        pred, model_masks = swapped if isinstance(swapped, tuple) else (swapped, {})
        crops = self.crops_of(self.decode_output(pred[:batch.count * self.tiles]))
        results: list[SwapResult | None] = []
        running: ImageBGR | None = None  # the frame with the results so far pasted, once two meet
        for k, (crop, M) in enumerate(zip(crops, batch.affines)):
            running = self._running(frame_bgr, running, M, results)
            if running is not None and self.recrop_after_paste and k < len(batch.latents):
                crop = self._swap_again_if_changed(frame_bgr, running, crop, M, batch.latents[k])
            mask = None
            if self.masker is not None:
                lm = batch.landmarks[k] if k < len(batch.landmarks) else None
                track = batch.tracks[k] if k < len(batch.tracks) else -1
                mask = self.masker.crop_mask(self.crop_size, lm, model_masks, k, track)
            result = self.blend_crop(frame_bgr if running is None else running, crop, M, mask)
            if result is not None and running is not None:
                result.paste_into(running)
            results.append(result)
        return results

    def _running(self, frame_bgr: ImageBGR, running: ImageBGR | None, M: Affine,
                 results: Sequence[SwapResult | None]) -> ImageBGR | None:
        """The frame the next face (frame->crop M) is blended onto, as `results` so far left it:
        `running` once made; made (a copy with them pasted) when this face's region meets one
        of theirs, or with `full_frame_paste` once there is one; None while the frame as
        decoded will do."""
        if running is not None:
            return running
        earlier = [r for r in results if r is not None]
        if not earlier:
            return None
        region = self.prepare_region(frame_bgr.shape, M)
        if not (self.full_frame_paste or (region is not None and any(rects_meet(region, r.region) for r in earlier))):
            return None
        running = frame_bgr.copy()
        for r in earlier:
            r.paste_into(running)
        return running

    def _swap_again_if_changed(self, frame_bgr: ImageBGR, running: ImageBGR, crop: ImageBGR, M: Affine,
                               latent: Latent) -> ImageBGR:
        """`crop`, or the face swapped again when its input crop from the running frame differs
        from the one the batch was made from."""
        now = warp_crop(running, M, self.crop_size)
        if np.array_equal(now, warp_crop(frame_bgr, M, self.crop_size)):
            return crop
        blob = np.empty((self.tiles, 3, self.size, self.size), np.float32)
        self.blobs_into(now, blob)
        return self.crops_of(self.decode_output(self.forward_blob(blob, latent)))[0]

    # ---- swapped on one frame, carried onto the next ones (stream/stages/carry.py) ----

    def cut_face(self, frame_bgr: ImageBGR, face: Face, latent: Latent) -> CropCut | None:
        """The face's crop and landmarks, copied out of the frame (cheap: the frame path);
        None when the face has no 68 landmarks."""
        if face.landmarks is None or np.shape(face.landmarks) != (68, 2):
            return None
        crop, M = self.face_crop(frame_bgr, face)
        points = cv2.transform(np.asarray(face.landmarks, np.float32).reshape(-1, 1, 2), M).reshape(-1, 2)
        return CropCut(crop, latent, points, inside_frame(frame_bgr.shape, M, self.crop_size))

    def swap_cut(self, cut: CropCut) -> CropSwap:
        """The model on a cut face (the slow part, off the frame path), and its model masks."""
        blob = np.empty((self.tiles, 3, self.size, self.size), np.float32)
        self.blobs_into(cut.crop, blob)
        crop = self.crops_of(self.decode_output(self.forward_blob(blob, cut.latent)))[0]
        masks = self.masker.model_masks(cut.crop) if self.masker is not None else ()
        return CropSwap(crop, cut.points, masks, cut.inside, cut.crop)

    def carry_many(self, frame_bgr: ImageBGR, faces: Sequence[Face],
                   swaps: Sequence[CropSwap | None]) -> list[SwapResult | None]:
        """Each face's swap (made on an earlier frame, or this one) warped from the landmarks it
        was made for onto the face's landmarks now, in this frame's crop, and blended as
        `finish_batch` blends: face k onto the frame as faces 0..k-1 left it. None for a face
        with no swap, or one that moved too far for its swap to be carried."""
        size = self.crop_size
        anchors = ring(-1.0, -1.0, float(size), float(size))
        results: list[SwapResult | None] = []
        running: ImageBGR | None = None
        for face, swap in zip(faces, swaps):
            if swap is None or face.landmarks is None:
                results.append(None)
                continue
            M = estimate_norm(as_kps5(face), size, self.profile.template)
            now = cv2.transform(np.asarray(face.landmarks, np.float32).reshape(-1, 1, 2), M).reshape(-1, 2)
            if residual(swap.points, now) > MAX_RESIDUAL:
                results.append(None)
                continue
            # Once carried onto another frame: left out where its crop was filled past the frame's
            # edge, and where the picture under it changed since (GATE_FROM). On its own frame
            # it is pasted as it was made.
            carried = {} if np.array_equal(swap.points, now) else {
                name: plane for name, plane in (("inside", swap.inside), ("target", swap.target)) if plane is not None}
            moved = carry_warp(swap.crop, np.concatenate([swap.points, anchors]), np.concatenate([now, anchors]),
                               (size, size), swap.masks + tuple(carried.values()))
            if moved is None:
                results.append(None)
                continue
            crop, _, planes = moved
            n = len(swap.masks)
            carried = dict(zip(carried, planes[n:]))
            kept = [*planes[:n]]  # the model masks, carried
            if "inside" in carried:
                kept.append(carried["inside"])
            if "target" in carried:
                kept.append(1.0 - changed_gate(carried["target"], warp_crop(frame_bgr, M, size)))
            if self.masker is not None:
                mask = self.masker.carried_mask(size, now, kept)
            else:
                mask = np.minimum.reduce(kept) if kept else None
            running = self._running(frame_bgr, running, M, results)
            result = self.blend_crop(frame_bgr if running is None else running, crop, M, mask)
            if result is not None and running is not None:
                result.paste_into(running)
            results.append(result)
        return results

    # ---- paste-back, on the face's region only ----

    def prepare_region(self, frame_shape: tuple[int, ...], M: Affine) -> tuple[int, int, int, int] | None:
        """The frame rectangle (x0, y0, x1, y1) that insightface's paste-back of the crop can
        change (`engines.models.paste.paste_region`)."""
        return paste_region(frame_shape, M, self.crop_size)

    def blend_crop(self, frame_bgr: ImageBGR, crop_bgr: ImageBGR, M: Affine,
                   crop_mask: npt.NDArray[np.float32] | None = None) -> SwapResult | None:
        """Blend a swapped crop into a copy of the face's region, with insightface's soft mask.

        Returns the region, the blended region (`patch`) and `valid` (255 where the blend
        weight is non-zero, the only pixels where `patch` may differ from the frame).
        """
        if self.full_frame_paste:
            return self._blend_full_frame(frame_bgr, crop_bgr, M, crop_mask)
        region = self.prepare_region(frame_bgr.shape, M)
        if region is None:
            return None
        x0, y0, x1, y1 = region
        rw, rh = x1 - x0, y1 - y0
        IM = cv2.invertAffineTransform(M)
        # The full-frame warp's own sample coordinates, for the region's pixels only: the
        # result equals insightface's full-frame paste restricted to the region.
        planes = [(crop_bgr, 0.0), (white_square(self.crop_size), 0.0)]
        if crop_mask is not None:  # the face masks, warped with the crop
            planes.append((crop_mask, 0.0))
        fake, white, *chosen = warp_affine_region(IM, region, planes)
        mask = prepare_paste_mask(white)
        if mask is None:
            return None  # the crop only grazes the frame: nothing insightface would keep
        if chosen:
            mask *= chosen[0].reshape(mask.shape)
        alpha = mask.reshape(rh, rw, 1)
        roi = frame_bgr[y0:y1, x0:x1]
        patch = (alpha * fake + (1 - alpha) * roi.astype(np.float32)).astype(np.uint8)
        valid = np.where(mask > 0, np.uint8(255), np.uint8(0))
        return SwapResult(region=region, patch=patch, valid=valid)

    def _blend_full_frame(self, frame_bgr: ImageBGR, crop_bgr: ImageBGR, M: Affine,
                          crop_mask: npt.NDArray[np.float32] | None = None) -> SwapResult | None:
        """insightface's paste-back as its `INSwapper.get` runs it: the crop and a white square
        warped into the whole frame, the mask thresholded, eroded and blurred there, then
        blended. The result is cut to the pixels the mask weighs (its bounding box): the
        blend leaves every other pixel exactly as it was."""
        h, w = frame_bgr.shape[:2]
        IM = cv2.invertAffineTransform(M)
        fake = cv2.warpAffine(crop_bgr, IM, (w, h), borderValue=0.0)
        mask = prepare_paste_mask(cv2.warpAffine(white_square(self.crop_size), IM, (w, h), borderValue=0.0))
        if mask is None:
            return None
        if crop_mask is not None:
            mask *= cv2.warpAffine(crop_mask, IM, (w, h), borderValue=0.0)
        weighed = mask > 0
        rows, cols = np.flatnonzero(weighed.any(axis=1)), np.flatnonzero(weighed.any(axis=0))
        if rows.size == 0:
            return None
        x0, y0, x1, y1 = int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1
        alpha = mask[y0:y1, x0:x1, None]
        # Elementwise, so computing it on the box gives the full frame's values there.
        patch = (alpha * fake[y0:y1, x0:x1] + (1 - alpha) * frame_bgr[y0:y1, x0:x1].astype(np.float32)
                 ).astype(np.uint8)
        valid = np.where(weighed[y0:y1, x0:x1], np.uint8(255), np.uint8(0))
        return SwapResult(region=(x0, y0, x1, y1), patch=patch, valid=valid)

    def paste(self, frame: ImageBGR, face: Face | None, result: SwapResult) -> None:
        """Write `result` into `frame` in place, inside `result.region` only (where valid)."""
        result.paste_into(frame)
