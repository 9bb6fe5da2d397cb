"""A JPEG's header without decoding it: size, components, coding process, EXIF orientation.

`read_jpeg_header` walks the markers from SOI up to the first SOS and reads the frame header
(SOFn), the Adobe APP14 colour transform and the EXIF orientation tag of APP1, so a decoder
can plan a crop from the header alone (a few microseconds). It never reads entropy-coded
data: a file truncated inside its scan data passes here and fails when decoded.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["JpegHeader", "JpegHeaderError", "is_jpeg", "read_jpeg_header"]

_SOI = b"\xff\xd8"
_STANDALONE = frozenset([0x01, *range(0xD0, 0xD8)])  # TEM, RST0-7: no length field
_NOT_SOF = frozenset([0xC4, 0xC8, 0xCC])  # DHT, JPG, DAC share the SOFn range
_SOS = 0xDA
_APP1 = 0xE1
_APP14 = 0xEE
_EXIF = b"Exif\x00\x00"
_ORIENTATION_TAG = 0x0112


class JpegHeaderError(ValueError):
    """Not a JPEG, or a header cut short or malformed."""


@dataclass(frozen=True, slots=True)
class JpegHeader:
    """What a JPEG's markers say before its first scan.

    ``sof`` is the frame marker (0xC0 baseline, 0xC1 extended, 0xC2 progressive, 0xC3
    lossless, 0xC9-0xCF arithmetic or hierarchical); ``orientation`` the EXIF tag (1 when
    absent); ``adobe_transform`` APP14's transform flag (None without an Adobe marker).
    """

    width: int
    height: int
    components: int
    precision: int
    sof: int
    orientation: int = 1
    adobe_transform: int | None = None

    @property
    def progressive(self) -> bool:
        return self.sof in (0xC2, 0xC6, 0xCA, 0xCE)

    @property
    def huffman_dct(self) -> bool:
        """Baseline, extended or progressive Huffman DCT: what libjpeg decodes everywhere."""
        return self.sof in (0xC0, 0xC1, 0xC2)

    @property
    def rgb_like(self) -> bool:
        """Grey or three-component (YCbCr, or RGB by Adobe's flag): RGB out without CMS."""
        return self.components == 1 or (self.components == 3 and self.adobe_transform != 2)


def is_jpeg(data: bytes | bytearray | memoryview) -> bool:
    """True if ``data`` starts with a JPEG's SOI and a marker."""
    return bytes(data[:3]) == b"\xff\xd8\xff"


def read_jpeg_header(data: bytes | bytearray | memoryview) -> JpegHeader:
    """The header of the JPEG in ``data``; `JpegHeaderError` if there is none."""
    view = memoryview(data)
    if bytes(view[:2]) != _SOI:
        raise JpegHeaderError("not a JPEG (no SOI marker)")
    frame: tuple[int, int, int, int, int] | None = None
    orientation, adobe, exif_seen = 1, None, False
    pos = 2
    while True:
        pos, marker, segment = _next_segment(view, pos)
        if marker == _SOS:
            break
        if 0xC0 <= marker <= 0xCF and marker not in _NOT_SOF:
            frame = _frame(marker, segment)
        elif marker == _APP1 and bytes(segment[:6]) == _EXIF and not exif_seen:
            exif_seen = True  # Pillow keeps the first EXIF block too
            orientation = _exif_orientation(segment[6:]) or 1
        elif marker == _APP14 and bytes(segment[:5]) == b"Adobe" and len(segment) >= 12:
            adobe = segment[11]
    if frame is None:
        raise JpegHeaderError("JPEG has a scan but no frame header (SOF)")
    sof, precision, height, width, components = frame
    return JpegHeader(width, height, components, precision, sof, orientation, adobe)


def _next_segment(view: memoryview, pos: int) -> tuple[int, int, memoryview]:
    """``(position after it, marker, payload)`` of the marker segment at or after ``pos``.

    Bytes between segments that are not a marker are skipped, as libjpeg does (with a
    warning there: "extraneous bytes before marker").
    """
    end = len(view)
    while True:
        while pos < end and view[pos] != 0xFF:
            pos += 1
        while pos + 1 < end and view[pos + 1] == 0xFF:
            pos += 1  # fill bytes
        if pos + 1 >= end:
            raise JpegHeaderError("JPEG header cut short before its first scan")
        marker = view[pos + 1]
        if marker == 0x00:  # a stuffed zero is no marker
            pos += 2
            continue
        if marker not in _STANDALONE:
            break
        pos += 2
    if marker == 0xD9:
        raise JpegHeaderError("JPEG ends (EOI) before its first scan")
    if pos + 4 > end:
        raise JpegHeaderError("JPEG header cut short inside a marker")
    length = (view[pos + 2] << 8) | view[pos + 3]
    if length < 2 or pos + 2 + length > end:
        raise JpegHeaderError(f"JPEG marker 0x{marker:02X} runs past the end of the file")
    return pos + 2 + length, marker, view[pos + 4 : pos + 2 + length]


def _frame(marker: int, segment: memoryview) -> tuple[int, int, int, int, int]:
    if len(segment) < 6:
        raise JpegHeaderError("JPEG frame header (SOF) cut short")
    height = (segment[1] << 8) | segment[2]
    width = (segment[3] << 8) | segment[4]
    if width == 0 or height == 0:
        raise JpegHeaderError(f"JPEG frame of {width}x{height} pixels (DNL is not supported)")
    return marker, segment[0], height, width, segment[5]


def _exif_orientation(tiff: memoryview) -> int | None:
    """IFD0's orientation tag of a TIFF-structured EXIF block, or None (absent or bad)."""
    if len(tiff) < 8:
        return None
    order = bytes(tiff[:2])
    if order not in (b"II", b"MM"):
        return None
    little = order == b"II"

    def number(at: int, size: int) -> int:
        return int.from_bytes(tiff[at : at + size], "little" if little else "big")

    ifd = number(4, 4)
    if ifd + 2 > len(tiff):
        return None
    for entry in range(number(ifd, 2)):
        at = ifd + 2 + 12 * entry
        if at + 12 > len(tiff):
            return None
        if number(at, 2) == _ORIENTATION_TAG:
            value = number(at + 8, 2) if number(at + 2, 2) == 3 else number(at + 8, 4)
            return value if 1 <= value <= 8 else None
    return None
