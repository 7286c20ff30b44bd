"""A job's uploaded source photo that the worker cannot decode (one that reached the storage
some other way than the API, which refuses those now) fails the job with a readable reason,
not OpenCV's assertion text."""

from __future__ import annotations

import asyncio
import struct
import time
import zlib

import pytest

from gpu.errors import SwapcastError
from signaling.jobs.model import Job
from signaling.jobs.storage import LocalStorage
from streamer.jobs.sources import SourceFaces


def png_header(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_a_source_photo_declaring_huge_dimensions_fails_with_a_reason(engine, tmp_path) -> None:
    storage = LocalStorage(tmp_path)
    (tmp_path / "job_bomb").mkdir()
    (tmp_path / "job_bomb" / "source.png").write_bytes(png_header(60_000, 60_000))
    stamp = time.time()
    job = Job(id="job_bomb", state="processing", priority="normal", input_path="job_bomb/input.mp4", input_name="a.mp4",
              face_id=None, source_path="job_bomb/source.png", webhook_url=None, idempotency_key=None,
              created=stamp, updated=stamp)
    with pytest.raises(SwapcastError) as failure:
        asyncio.run(SourceFaces(engine, None, storage).for_job(job))
    assert str(failure.value) == "the uploaded source photo cannot be decoded (too large or damaged)"
