"""Jobs test fixtures: small generated clips of a real moving face with audio (keyframe every
second so they cut into 2 s chunks), the job storage, the jobs API on the test Redis, and
an S3 server (moto's) on loopback."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
from jobs_harness import FPS, S3_ENV
from moto.server import ThreadedMotoServer

from signaling.jobs import JobSettings, face_checker
from signaling.jobs.settings import S3Location
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


@dataclass
class S3Server:
    """A real S3 API on a loopback port; ``new_bucket`` makes an empty bucket per user."""

    url: str
    client: Any  # a boto3 S3 client of this server
    _numbers: Iterator[int] = field(default_factory=itertools.count)

    def new_bucket(self) -> str:
        name = f"swapcast-test-{next(self._numbers)}"
        self.client.create_bucket(Bucket=name)
        return name

    def location(self, bucket: str, prefix: str = "jobs") -> S3Location:
        return S3Location(bucket=bucket, prefix=prefix, endpoint_url=self.url)

    def keys(self, bucket: str) -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket)
        return {item["Key"] for page in pages for item in page.get("Contents", [])}


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """moto's S3 server in a thread on 127.0.0.1 (a free port), with ``S3_ENV`` set in this
    process for the session (workers started from it inherit it)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
    with pytest.MonkeyPatch.context() as patch:
        for name, value in S3_ENV.items():
            patch.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            url = f"http://{host}:{port}"
            yield S3Server(url, boto3.client("s3", endpoint_url=url))
        finally:
            server.stop()
