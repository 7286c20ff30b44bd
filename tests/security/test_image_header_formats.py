"""A face photo's or a verifier upload's size is read from its header by Pillow before OpenCV
decodes it; the two must be reading the same format. A Radiance HDR (which OpenCV decodes, Pillow does not know) with
"PCD_" at byte 2048 was a 512x768 PhotoCD to Pillow and a 32000x4800 picture to OpenCV: a
9.7 MB upload, under the 10 MB limit, grew the node by 2.2 GB and went on to face detection.
The verifier let any file Pillow could not identify through to OpenCV: the same HDR named
.png, the same 2.2 GB, and its uploads may be 200 MB. Pillow now reads only formats OpenCV
tells by the same first bytes, and anything else is refused before decoding."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
from PIL import Image

from signaling.registry import MemoryRegistry
from streamer.faces import FaceLibrary, NotAnImageError, decode_image
from streamer.media.images import HEADER_CHECKED_FORMATS
from verifier_client import post_to_verifier


def _hdr_read_as_photocd(width: int, height: int) -> bytes:
    """A Radiance HDR of one colour (run-length scanlines, ~8 bytes per 127 pixels) whose header
    comment holds "PCD_" at byte 2048, where Pillow's PhotoCD reader looks."""
    head = b"#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n"
    head += b"#" + b"x" * (2048 - len(head) - 1) + b"PCD_" + b"y" * 1600 + b"\n"
    head += f"\n-Y {height} +X {width}\n".encode()
    scanline = bytearray([2, 2, width >> 8, width & 0xFF])
    for value in (128, 128, 128, 129):
        left = width
        while left:
            run = min(127, left)
            scanline += bytes([128 + run, value])
            left -= run
    return head + bytes(scanline) * height


def test_an_upload_pillow_and_opencv_read_as_different_formats_is_refused_before_decoding():
    crafted = _hdr_read_as_photocd(8000, 1000)
    with Image.open(io.BytesIO(crafted)) as header:  # what made it through before
        assert (header.format, header.size) == ("PCD", (512, 768))
    library = FaceLibrary(engine=None, store=MemoryRegistry())
    try:
        with pytest.raises(NotAnImageError, match="not a readable image; send a JPEG, PNG or WebP photo"):
            asyncio.run(library.add(crafted, name="bomb", owner="mallory"))
    finally:
        library.close()


@pytest.mark.parametrize("image_format", HEADER_CHECKED_FORMATS)
def test_photos_in_the_formats_both_readers_share_still_decode(image_format):
    rng = np.random.default_rng(0)
    picture = Image.fromarray(rng.integers(0, 255, (48, 80, 3), np.uint8))
    encoded = io.BytesIO()
    picture.save(encoded, format=image_format)
    assert decode_image(encoded.getvalue()).shape == (48, 80, 3)


def test_the_verifier_refuses_an_image_upload_in_a_format_pillow_does_not_read():
    """``POST /api/v1/provenance/verify`` of the HDR named .png: 422 before decoding, while a
    real PNG is still read."""
    rng = np.random.default_rng(0)
    plain = io.BytesIO()
    Image.fromarray(rng.integers(0, 255, (64, 64, 3), np.uint8)).save(plain, format="PNG")
    status, answer = post_to_verifier(_hdr_read_as_photocd(8000, 1000), "photo.png", "image/png")
    assert status == 422 and "not a readable image" in answer["error"], (status, answer)
    status, answer = post_to_verifier(plain.getvalue(), "photo.png", "image/png")
    assert status == 200 and answer["kind"] == "image", (status, answer)
