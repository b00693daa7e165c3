"""What a run does with its input's dynamic range and bit depth (one decision, made when
the input is open): keep a 10-bit input 10-bit, tone-map HDR to BT.709 SDR, or pass 8-bit
SDR through as it always was. The swap itself always works on 8-bit pictures."""
from __future__ import annotations

from dataclasses import dataclass

from stream.media.hdr import Dynamic

# Encoders that write 10-bit 4:2:0, and what to call their streams in a note.
DEEP_CODECS = {"libx265": "HEVC Main10 (libx265)", "libsvtav1": "AV1 10-bit (SVT-AV1)"}
AUTO = "auto"
EIGHT_BIT = "libx264"
CODECS = (AUTO, "libx264", "libx265", "libsvtav1")

AS_IS, DEEP, TONE_MAP = "as_is", "deep", "tone_map"


@dataclass(frozen=True)
class RangePlan:
    """`mode`: AS_IS (8-bit pictures, the input's tags), DEEP (the input's 10-bit samples
    kept outside what the swap changed; its tags and HDR10 metadata on the output) or
    TONE_MAP (HDR tone-mapped at decode; the output tagged BT.709); `codec`: the encoder,
    with `auto` resolved; `notes`: what the user is told."""

    mode: str
    codec: str
    notes: tuple[str, ...] = ()


def plan_file(dynamic: Dynamic, codec: str = AUTO, tone_map: bool = False, even: bool = True) -> RangePlan:
    """The plan of a file output in `codec` (`auto`: H.264 for 8-bit inputs, HEVC Main10 for
    10-bit ones) for an input of `dynamic`; `tone_map`: --tone-map; `even`: the picture's
    size suits 4:2:0 as it is (the deep path does not pad)."""
    notes: list[str] = []
    if tone_map and not dynamic.hdr:
        notes.append(f"--tone-map: the input is {dynamic.describe()}, not HDR; nothing to tone-map")
    if dynamic.hdr and tone_map:
        chosen = EIGHT_BIT if codec == AUTO else codec
        return RangePlan(TONE_MAP, chosen, (*notes, _tone_note(dynamic, "as --tone-map asks")))
    if dynamic.deep and even and (codec == AUTO or codec in DEEP_CODECS):
        chosen = "libx265" if codec == AUTO else codec
        what = "colour tags and HDR10 metadata" if dynamic.hdr and (dynamic.mastering or dynamic.light) \
            else "colour tags"
        kept = f"{dynamic.describe()} kept: {DEEP_CODECS[chosen]} with the input's {what}"
        if dynamic.hdr:
            kept += " (--tone-map writes BT.709 SDR instead)"
        return RangePlan(DEEP, chosen, (*notes, kept))
    chosen = EIGHT_BIT if codec == AUTO else codec
    if dynamic.hdr:
        why = f"{chosen} writes 8 bits here" if chosen not in DEEP_CODECS or not dynamic.deep \
            else f"its {dynamic.pix_fmt} {dynamic.bits}-bit layout is not kept"
        if dynamic.deep and not even:
            why = "its odd picture size is not kept at 10 bits"
        return RangePlan(TONE_MAP, chosen, (*notes, _tone_note(dynamic, why)))
    if dynamic.bits > 8:
        notes.append(f"the {dynamic.bits}-bit input is written 8-bit ({chosen})")
    return RangePlan(AS_IS, chosen, tuple(notes))


def _tone_note(dynamic: Dynamic, why: str) -> str:
    return f"{dynamic.describe()} input tone-mapped to BT.709 SDR, 8-bit ({why}); the output is tagged BT.709"


def resolve_codec(codec: str) -> str:
    """The encoder a codec setting means where no plan was made (8-bit outputs)."""
    return EIGHT_BIT if codec == AUTO else codec
