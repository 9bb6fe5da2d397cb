"""read_jpeg_header: size, components, coding process and EXIF orientation from the markers."""

from __future__ import annotations

import io
import struct

import pytest
from PIL import Image

from conveyor.formats.jpeg_header import JpegHeaderError, is_jpeg, read_jpeg_header


def encode(image: Image.Image, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", **options)
    return buffer.getvalue()


def exif_block(orientation: int, little: bool) -> bytes:
    """A minimal TIFF-structured EXIF block: IFD0 with one SHORT orientation entry."""
    order = "<" if little else ">"
    tiff = (b"II*\x00" if little else b"MM\x00*") + struct.pack(order + "I", 8)
    entries = struct.pack(order + "H", 2)
    entries += struct.pack(order + "HHI", 0x010F, 2, 4) + b"abc\x00"  # Make, ASCII, inline
    entries += struct.pack(order + "HHIH", 0x0112, 3, 1, orientation) + b"\x00\x00"
    return b"Exif\x00\x00" + tiff + entries + struct.pack(order + "I", 0)


def with_segment(jpeg: bytes, marker: int, payload: bytes) -> bytes:
    """``jpeg`` with a marker segment inserted right after SOI."""
    return (
        jpeg[:2] + bytes([0xFF, marker]) + struct.pack(">H", len(payload) + 2) + payload + jpeg[2:]
    )


@pytest.mark.parametrize(
    ("mode", "options", "components", "sof"),
    [
        ("RGB", {}, 3, 0xC0),
        ("RGB", {"progressive": True}, 3, 0xC2),
        ("L", {}, 1, 0xC0),
        ("CMYK", {}, 4, 0xC0),
    ],
)
def test_header_matches_what_pillow_reads(
    mode: str, options: dict[str, object], components: int, sof: int
) -> None:
    data = encode(Image.new(mode, (37, 23)), **options)
    header = read_jpeg_header(data)
    assert (header.width, header.height) == Image.open(io.BytesIO(data)).size == (37, 23)
    assert (header.components, header.sof, header.precision) == (components, sof, 8)
    assert header.progressive == (sof == 0xC2) and header.huffman_dct
    assert header.rgb_like == (components != 4)
    assert header.orientation == 1 and is_jpeg(data)


def test_cmyk_carries_adobe_transform() -> None:
    header = read_jpeg_header(encode(Image.new("CMYK", (8, 8))))
    assert header.adobe_transform is not None and not header.rgb_like


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_from_pillow_written_exif(orientation: int) -> None:
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(Image.new("RGB", (9, 5)), exif=exif)
    assert read_jpeg_header(data).orientation == orientation
    assert Image.open(io.BytesIO(data)).getexif().get(0x0112) == orientation


@pytest.mark.parametrize("little", [True, False])
def test_orientation_in_either_byte_order(little: bool) -> None:
    data = with_segment(encode(Image.new("RGB", (9, 5))), 0xE1, exif_block(6, little))
    assert read_jpeg_header(data).orientation == 6
    assert Image.open(io.BytesIO(data)).getexif().get(0x0112) == 6


def test_first_exif_block_wins_as_in_pillow() -> None:
    data = encode(Image.new("RGB", (9, 5)))
    data = with_segment(with_segment(data, 0xE1, exif_block(3, True)), 0xE1, exif_block(8, True))
    assert read_jpeg_header(data).orientation == Image.open(io.BytesIO(data)).getexif()[0x0112]


def test_fill_bytes_and_unknown_markers_are_skipped() -> None:
    data = encode(Image.new("RGB", (11, 7)))
    data = data[:2] + b"\xff\xff\xff" + data[2:]  # fill bytes before the next marker
    data = with_segment(data, 0xEB, b"junk segment")
    assert (read_jpeg_header(data).width, read_jpeg_header(data).height) == (11, 7)


def test_extraneous_bytes_between_segments_are_skipped_as_libjpeg_does() -> None:
    data = encode(Image.new("RGB", (11, 7)))
    sof = data.index(b"\xff\xc0")
    odd = data[:sof] + b"\x00\x12\x34" + data[sof:]
    Image.open(io.BytesIO(odd)).load()  # libjpeg warns and decodes
    assert read_jpeg_header(odd).width == 11


def test_arithmetic_and_12_bit_frames_are_told_apart() -> None:
    data = bytearray(encode(Image.new("RGB", (8, 8))))
    sof = data.index(b"\xff\xc0")
    data[sof + 1] = 0xC9  # arithmetic sequential
    assert not read_jpeg_header(bytes(data)).huffman_dct
    data[sof + 1] = 0xC1
    data[sof + 4] = 12  # precision byte of the frame header
    header = read_jpeg_header(bytes(data))
    assert header.huffman_dct and header.precision == 12


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "not a JPEG"),
        (b"\x89PNG\r\n\x1a\n", "not a JPEG"),
        (b"\xff\xd8\xff", "cut short"),
        (b"\xff\xd8\xff\xd9", "EOI"),
        (b"\xff\xd8\xff\xe0\x00\x10JFIF", "runs past the end"),
        (b"\xff\xd8\x00\x00", "cut short"),
    ],
)
def test_bad_headers_raise(data: bytes, message: str) -> None:
    with pytest.raises(JpegHeaderError, match=message):
        read_jpeg_header(data)


def test_a_header_cut_before_the_scan_raises() -> None:
    data = encode(Image.new("RGB", (8, 8)))
    with pytest.raises(JpegHeaderError):
        read_jpeg_header(data[: data.index(b"\xff\xda")])
    scan_cut = data[: data.index(b"\xff\xda") + 20]  # the header is whole: the scan is not read
    assert read_jpeg_header(scan_cut).width == 8


def test_zero_height_frame_raises() -> None:
    data = bytearray(encode(Image.new("RGB", (8, 8))))
    sof = data.index(b"\xff\xc0")
    data[sof + 5 : sof + 7] = b"\x00\x00"
    with pytest.raises(JpegHeaderError, match="DNL"):
        read_jpeg_header(bytes(data))
