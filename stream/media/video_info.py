"""What a video source says about itself before the first frame: size, timing, audio."""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from stream.media.convert import ColourTags
from stream.media.hdr import Dynamic


@dataclass(frozen=True)
class VideoInfo:
    """The shape and timing of a video stream.

    `rate` is the average frame rate (Fraction(0) when the container does not say);
    `time_base` is the unit of the frames' pts; `frames` is the container's frame count,
    or an estimate from `duration * rate`, or 0 when unknown; `duration` is in seconds
    (0.0 when unknown); `has_audio` says whether the container holds an audio stream.
    `rotation` is what the source turned its stored frames by (counter-clockwise degrees,
    from the file's display matrix) so they are upright: `width` and `height` are the
    upright picture's. `colour` holds the tags of the pictures the source gives (the input's,
    or BT.709 where it tone-maps), which a file output writes; `dynamic` the input's bit
    depth, transfer and HDR10 metadata (stream.media.dynamic_range decides what becomes of them).
    """

    width: int
    height: int
    rate: Fraction
    time_base: Fraction
    frames: int = 0
    duration: float = 0.0
    has_audio: bool = False
    rotation: int = 0
    colour: ColourTags = field(default_factory=ColourTags)  # the pictures' matrix, range, primaries, transfer
    dynamic: Dynamic = field(default_factory=Dynamic)

    @property
    def frame_duration(self) -> Fraction:
        """Nominal seconds per frame (1/30 when the rate is unknown)."""
        return 1 / self.rate if self.rate > 0 else Fraction(1, 30)
