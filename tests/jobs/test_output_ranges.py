"""``GET /api/v1/jobs/{id}/output`` with HTTP ranges (players seek, downloads resume), from a
local folder (aiohttp's ``FileResponse``) and from S3 (a ranged GET streamed by the API):
the same requests get the same status, body and range headers from both."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import requests
from jobs_harness import queue_call

from signaling.jobs import Job, JobSettings
from signaling.jobs.s3 import S3Storage
from signaling.jobs.storage import LocalStorage
from swapcast.benchmarks.jobs import JobsApi

JOB_ID = "job_ranges"
KEY = f"{JOB_ID}/ab12-output.mp4"
VIDEO = os.urandom(2 * 1024 * 1024 + 12345)  # more than one block of the API's sends
SIZE = len(VIDEO)
ODD_JOB_ID = "job_odd_name"
ODD_NAME = 'talk "final"; x=1\r\nSet-Cookie: a=b \\ é.mp4'  # an upload's file name, as the client sent it
SAME = ("Content-Range", "Content-Length", "Accept-Ranges", "Content-Type", "Content-Disposition")


@dataclass(frozen=True)
class Served:
    local: str  # the base URL of an API on a local storage folder
    s3: str  # ... and of one on an S3 bucket, both holding VIDEO as the output of JOB_ID


@pytest.fixture(scope="module")
def served(redis_server, s3_server, tmp_path_factory) -> Iterator[Served]:
    folder = tmp_path_factory.mktemp("ranges_local")
    s3 = JobSettings(storage_dir=tmp_path_factory.mktemp("ranges_unused"), s3=s3_server.location(s3_server.new_bucket()))
    for storage in (LocalStorage(folder), S3Storage(s3.s3)):
        with storage.scratch() as scratch:
            (scratch / "output.mp4").write_bytes(VIDEO)
            storage.put_file(scratch / "output.mp4", KEY)
    stamp = time.time()
    job = Job(id=JOB_ID, state="completed", priority="normal", input_path=f"{JOB_ID}/input.mp4", input_name="talk.mp4",
              face_id="astronaut", source_path=None, webhook_url=None, idempotency_key=None, created=stamp,
              updated=stamp, finished=stamp, output_path=KEY)
    queue_call(redis_server.url, "create", job)
    odd = dataclasses.replace(job, id=ODD_JOB_ID, input_name=ODD_NAME)
    queue_call(redis_server.url, "create", odd)
    apis = [JobsApi(redis_server.url, settings).start() for settings in (JobSettings(storage_dir=folder), s3)]
    yield Served(apis[0].url, apis[1].url)
    for api in apis:
        api.close()


def fetch(base: str, method: str = "GET", job_id: str = JOB_ID, **headers: str) -> requests.Response:
    return requests.request(method, f"{base}/api/v1/jobs/{job_id}/output", headers=headers, timeout=30)


def both(served: Served, method: str = "GET", **headers: str) -> requests.Response:
    """The S3 answer, once checked to be the local one's: status, body, Content-Range, and
    the content's headers where there is content (not on a 416)."""
    local, s3 = fetch(served.local, method, **headers), fetch(served.s3, method, **headers)
    assert (s3.status_code, s3.content) == (local.status_code, local.content), headers
    compared = SAME if s3.status_code < 300 else ("Content-Range",)
    assert {h: s3.headers.get(h) for h in compared} == {h: local.headers.get(h) for h in compared}, headers
    assert ("ETag" in s3.headers) == ("ETag" in local.headers)
    return s3


def test_the_whole_video_says_it_takes_ranges(served) -> None:
    answer = both(served)
    assert answer.status_code == 200 and answer.content == VIDEO
    assert answer.headers["Accept-Ranges"] == "bytes" and answer.headers["Content-Length"] == str(SIZE)
    assert answer.headers["Content-Type"] == "video/mp4" and answer.headers["ETag"]
    assert answer.headers["Content-Disposition"] == 'attachment; filename="talk-swapped.mp4"'


@pytest.mark.parametrize(("header", "start", "stop"), [
    ("bytes=0-99", 0, 100),  # first-last
    ("bytes=1000-", 1000, SIZE),  # first-: to the end
    ("bytes=-500", SIZE - 500, SIZE),  # -suffix: the last bytes
    (f"bytes={SIZE - 10}-{SIZE + 500}", SIZE - 10, SIZE),  # the last byte past the end is clamped
    (f"bytes=-{SIZE + 100}", 0, SIZE),  # a suffix longer than the video is all of it
    (f"bytes={SIZE - 1}-{SIZE - 1}", SIZE - 1, SIZE),  # one byte
])
def test_a_range_is_206_with_that_part(served, header, start, stop) -> None:
    answer = both(served, Range=header)
    assert answer.status_code == 206 and answer.content == VIDEO[start:stop]
    assert answer.headers["Content-Range"] == f"bytes {start}-{stop - 1}/{SIZE}"
    assert answer.headers["Content-Length"] == str(stop - start)


@pytest.mark.parametrize("header", [
    f"bytes={SIZE}-",  # starts at the end
    f"bytes={SIZE + 5}-{SIZE + 10}",  # past the end
    "bytes=0-1,5-6",  # several ranges: refused, as aiohttp's FileResponse refuses them
    "bytes=10-5",  # last before first
    "items=0-1",  # another unit
    "bytes=-0",  # the last 0 bytes: nothing (aiohttp reads it as bytes=0-)
    "bytes=-\u00b2".encode(),  # a superscript two: str.isdigit() takes it, int() raises (a 500 in round 3)
    "bytes=\u0661-\u0662".encode(),  # Arabic-Indic digits: int() reads them as 1-2
    "bytes=\uff11-\uff12".encode(),  # fullwidth digits, likewise
    "bytes=-\u2460".encode(),  # a circled one
])
def test_an_unsatisfiable_range_is_416(served, header) -> None:
    answer = both(served, Range=header)
    assert answer.status_code == 416 and answer.content == b""
    assert answer.headers["Content-Range"] == f"bytes */{SIZE}"


def test_if_range_serves_the_part_only_of_the_version_the_client_has(served) -> None:
    for base in (served.local, served.s3):
        validator = fetch(base, "HEAD").headers["Last-Modified"]
        answer = fetch(base, Range="bytes=0-9", **{"If-Range": validator})
        assert (answer.status_code, answer.content) == (206, VIDEO[:10])
    old = both(served, Range="bytes=0-9", **{"If-Range": "Mon, 01 Jan 2001 00:00:00 GMT"})
    assert (old.status_code, old.content) == (200, VIDEO)  # changed since: the whole new version
    etag = fetch(served.s3, "HEAD").headers["ETag"]  # S3 also compares ETags (FileResponse only dates)
    same = fetch(served.s3, Range="bytes=0-9", **{"If-Range": etag})
    assert (same.status_code, same.content) == (206, VIDEO[:10])
    other = fetch(served.s3, Range="bytes=0-9", **{"If-Range": '"another-version"'})
    assert (other.status_code, other.content) == (200, VIDEO)


def test_head_answers_the_headers_of_get(served) -> None:
    whole = both(served, "HEAD")
    assert whole.status_code == 200 and whole.content == b"" and whole.headers["Content-Length"] == str(SIZE)
    part = both(served, "HEAD", Range="bytes=-500")
    assert part.status_code == 206 and part.headers["Content-Range"] == f"bytes {SIZE - 500}-{SIZE - 1}/{SIZE}"
    assert part.headers["Content-Length"] == "500"
    assert both(served, "HEAD", Range=f"bytes={SIZE}-").status_code == 416


def test_a_download_name_is_sent_escaped_as_rfc_6266_says(served) -> None:
    """The name comes from the client's upload: quotes, separators, line breaks and
    non-ASCII never reach the header raw; ``filename*`` carries the exact name."""
    for base in (served.local, served.s3):
        answer = fetch(base, job_id=ODD_JOB_ID)
        assert answer.status_code == 200 and answer.content == VIDEO
        assert answer.headers["Content-Disposition"] == (
            'attachment; filename="talk _final_; x=1__Set-Cookie: a=b _ _-swapped.mp4"; '
            "filename*=UTF-8''talk%20%22final%22%3B%20x%3D1%0D%0ASet-Cookie%3A%20a%3Db%20%5C%20%C3%A9-swapped.mp4")
        assert "Set-Cookie" not in answer.headers
