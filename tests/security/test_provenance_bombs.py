"""``POST /api/v1/provenance/verify`` with a picture whose header declares far more pixels
than its few bytes hold: a 1.1 MB PNG of 20000x20000 took 820 MB to decode (a gigapixel one
some 2 GB, two at a time), for any user. The header is read first, and a picture over the
verifier's limit is a 413 saying so, before anything is decoded."""

from __future__ import annotations

import struct
import zlib


from streamer.provenance.verify import MAX_PIXELS
from verifier_client import post_to_verifier


def sparse_png(width: int, height: int) -> bytes:
    """An all-black RGB PNG: a few hundred kilobytes for tens of megapixels."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    compressor, row = zlib.compressobj(9), b"\x00" + bytes(3 * width)
    data = b"".join(compressor.compress(row) for _ in range(height)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


def _verify(body: bytes) -> tuple[int, dict]:
    return post_to_verifier(body, "photo.png", "image/png")


def test_a_picture_declaring_more_pixels_than_the_limit_is_413_before_decoding():
    side = int(MAX_PIXELS ** 0.5) + 500
    png = sparse_png(side, side)
    assert len(png) < 2 * 1024 * 1024
    status, answer = _verify(png)
    assert status == 413 and "pixels" in answer["error"]


def test_a_picture_within_the_limit_is_still_verified():
    status, answer = _verify(sparse_png(640, 480))
    assert status == 200 and answer["kind"] == "image"
