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


def test_a_stored_face_of_another_swapper_is_made_again_from_its_photos(engine, astronaut_image, tmp_path) -> None:
    """A worker running another swapper than the node that stored the face (mesh3d there,
    mesh here) makes it again from the photos the face keeps."""
    from contextlib import closing

    import cv2

    from gpu.analysis.identity import identity_distance
    from gpu.engine import EngineSettings, FaceEngine
    from signaling.registry import MemoryRegistry
    from streamer.faces import FaceLibrary

    photo = cv2.imencode(".jpg", cv2.cvtColor(astronaut_image, cv2.COLOR_RGB2BGR))[1].tobytes()

    async def scenario():
        registry = MemoryRegistry()
        with closing(FaceLibrary(engine, registry)) as library:
            face = await library.add([photo, photo])
        stamp = time.time()
        job = Job(id="job_mesh", state="processing", priority="normal", input_path="job_mesh/input.mp4",
                  input_name="a.mp4", face_id=face.id, source_path=None, webhook_url=None, idempotency_key=None,
                  created=stamp, updated=stamp)
        worker = FaceEngine(EngineSettings(swapper="mesh"))
        return face, await SourceFaces(worker, registry, LocalStorage(tmp_path)).for_job(job)

    face, source = asyncio.run(scenario())
    assert source is not None and source.payload is not None
    assert identity_distance(source.identity, face.source.identity) < 0.15
