"""Jobs test fixtures: small generated clips of a real moving face with audio (keyframe every
second so they cut into 2 s chunks), the job storage, and the jobs API on the test Redis."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from jobs_harness import FPS

from signaling.jobs import JobSettings, face_checker
from signaling.registry import MemoryRegistry
from streamer.samples import SAMPLE_FACES
from swapcast.benchmarks.jobs import JobsApi, JobsClient, write_face_clip

MAX_UPLOAD_MB = 2


@dataclass(frozen=True)
class Clips:
    short: Path  # 4 s: 60 frames, 2 chunks
    medium: Path  # 12 s: 180 frames, 6 chunks
    long: Path  # 20 s: 300 frames, 10 chunks


@pytest.fixture(scope="session")
def clips(tmp_path_factory) -> Clips:
    folder = tmp_path_factory.mktemp("job_clips")
    made = {}
    for name, seconds in (("short", 4), ("medium", 12), ("long", 20)):
        made[name] = folder / f"{name}.mp4"
        write_face_clip(made[name], seconds, size=(320, 240), fps=FPS, keyframe_s=1.0)
    return Clips(**made)


@pytest.fixture(scope="module")
def storage(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("job_storage")


@pytest.fixture(scope="module")
def api(redis_server, storage):
    """The jobs API alone, in a thread; faces are the samples (and an empty registry)."""
    server = JobsApi(
        redis_server.url, JobSettings(storage_dir=storage, max_upload_mb=MAX_UPLOAD_MB),
        face_checker(SAMPLE_FACES, MemoryRegistry(ttl_s=2.0)),
    ).start()
    yield server
    server.close()


@pytest.fixture
def client(api, redis_url) -> JobsClient:
    """A client of the API on an emptied Redis."""
    return JobsClient(api.url)
