"""A picture's format and size read from the first bytes of its file, without decoding it.

A server checks an upload's size this way before it lets a decoder allocate the pixels:
a 400 KB PNG can declare 20000x20000 pixels (1.2 GB once decoded). The formats are the
ones a browser uploads: PNG, JPEG, WebP, BMP, GIF.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

FORMATS = ("JPEG", "PNG", "WebP", "BMP", "GIF")

_PNG = b"\x89PNG\r\n\x1a\n"
# JPEG markers that start a frame (SOF0-3, 5-7, 9-11, 13-15) carry the picture's size.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
# Markers with no length field: TEM, RST0-7, SOI, EOI.
_STANDALONE = {0x01, *range(0xD0, 0xDA)}


class ImageHeaderError(ValueError):
    """The bytes do not start like a picture of a known format, or its header is cut short
    or declares an empty picture."""


@dataclass(frozen=True)
class ImageHeader:
    format: str
    width: int
    height: int

    @property
    def pixels(self) -> int:
        return self.width * self.height


def read_image_header(data: bytes) -> ImageHeader:
    """The format and size declared by a picture file's header (ImageHeaderError when the
    bytes are none of FORMATS, or the header is truncated or says 0 pixels)."""
    if data.startswith(_PNG):
        header = _png(data)
    elif data.startswith(b"\xff\xd8"):
        header = _jpeg(data)
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        header = _webp(data)
    elif data.startswith(b"BM"):
        header = _bmp(data)
    elif data[:6] in (b"GIF87a", b"GIF89a"):
        header = _gif(data)
    else:
        raise ImageHeaderError(f"not a picture of a known format ({', '.join(FORMATS)})")
    if header.width <= 0 or header.height <= 0:
        raise ImageHeaderError(f"the {header.format} header declares {header.width}x{header.height} pixels")
    return header


def _need(data: bytes, end: int, what: str) -> None:
    if len(data) < end:
        raise ImageHeaderError(f"the {what} header is cut short ({len(data)} bytes)")


def _png(data: bytes) -> ImageHeader:
    _need(data, 24, "PNG")
    if data[12:16] != b"IHDR":
        raise ImageHeaderError("the PNG file does not start with its IHDR chunk")
    width, height = struct.unpack(">II", data[16:24])
    return ImageHeader("PNG", width, height)


def _gif(data: bytes) -> ImageHeader:
    _need(data, 10, "GIF")
    width, height = struct.unpack("<HH", data[6:10])
    return ImageHeader("GIF", width, height)


def _bmp(data: bytes) -> ImageHeader:
    _need(data, 18, "BMP")
    (dib,) = struct.unpack("<I", data[14:18])
    if dib == 12:  # BITMAPCOREHEADER: 16-bit sizes
        _need(data, 22, "BMP")
        width, height = struct.unpack("<HH", data[18:22])
    else:
        _need(data, 26, "BMP")
        width, height = struct.unpack("<ii", data[18:26])
    return ImageHeader("BMP", abs(width), abs(height))  # a negative height is a top-down picture


def _webp(data: bytes) -> ImageHeader:
    _need(data, 30, "WebP")
    chunk = data[12:16]
    if chunk == b"VP8X":  # extended: the canvas size, 24-bit, minus one
        width = int.from_bytes(data[24:27], "little") + 1
        height = int.from_bytes(data[27:30], "little") + 1
    elif chunk == b"VP8L":  # lossless: 14-bit sizes minus one, after the 0x2f signature
        if data[20] != 0x2F:
            raise ImageHeaderError("the WebP lossless header has no signature")
        bits = int.from_bytes(data[21:25], "little")
        width, height = (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    elif chunk == b"VP8 ":  # lossy: a keyframe's start code, then 14-bit sizes
        if data[23:26] != b"\x9d\x01\x2a":
            raise ImageHeaderError("the WebP lossy header has no keyframe start code")
        width, height = (v & 0x3FFF for v in struct.unpack("<HH", data[26:30]))
    else:
        raise ImageHeaderError(f"the WebP file starts with an unknown chunk {chunk!r}")
    return ImageHeader("WebP", width, height)


def _jpeg(data: bytes) -> ImageHeader:
    i = 2
    while True:
        while i < len(data) and data[i] == 0xFF and i + 1 < len(data) and data[i + 1] == 0xFF:
            i += 1  # fill bytes before a marker
        _need(data, i + 2, "JPEG")
        if data[i] != 0xFF:
            raise ImageHeaderError(f"the JPEG file has no marker at byte {i}")
        marker = data[i + 1]
        if marker in _STANDALONE:
            if marker == 0xD9:
                raise ImageHeaderError("the JPEG file ends before its frame header")
            i += 2
            continue
        _need(data, i + 4, "JPEG")
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if length < 2:
            raise ImageHeaderError(f"the JPEG segment at byte {i} has length {length}")
        if marker in _SOF:
            _need(data, i + 9, "JPEG")
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return ImageHeader("JPEG", width, height)
        i += 2 + length
