"""Offline jobs with S3 storage end to end: the jobs API and two real ``swapcast worker``
processes share a bucket on a real S3 server on loopback (moto's) and nothing else — the
workers get the endpoint and fake credentials through the environment, as in production.
The ``swapcast jobs`` CLI submits a video and a source photo, waits and downloads the
output, which the API streams from the bucket; the bucket keeps the input and the output,
and the intermediate chunks are gone, as in a local folder. A video already in the bucket
is submitted by its path."""

from __future__ import annotations

import time

import pytest
from jobs_harness import FPS, S3_ENV, Workers, ffprobe, run_cli

from signaling.jobs import JobSettings, face_checker
from signaling.registry import MemoryRegistry
from streamer.media.images import write_image
from streamer.samples import SAMPLE_FACES
from swapcast.benchmarks.jobs import JobsApi, JobsClient

pytestmark = pytest.mark.slow

PREFIX = "swapcast"


@pytest.fixture(scope="module")
def bucket(s3_server) -> str:
    return s3_server.new_bucket()


@pytest.fixture(scope="module")
def local_dir(tmp_path_factory):
    """``jobs.storage_dir`` of the API and the workers, which S3 storage leaves alone."""
    return tmp_path_factory.mktemp("unused_local_storage")


@pytest.fixture(scope="module")
def s3_api(redis_server, s3_server, bucket, local_dir):
    settings = JobSettings(storage_dir=local_dir, s3=s3_server.location(bucket, prefix=PREFIX))
    server = JobsApi(redis_server.url, settings, face_checker(SAMPLE_FACES, MemoryRegistry(ttl_s=2.0))).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def scratch_dir(tmp_path_factory):
    """The workers' TMPDIR: their scratch folders, which must all be gone after each task."""
    return tmp_path_factory.mktemp("worker_scratch")


@pytest.fixture(scope="module")
def s3_workers(redis_server, s3_server, bucket, local_dir, scratch_dir, tmp_path_factory):
    workers = Workers(
        redis_server.url, local_dir, tmp_path_factory.mktemp("s3_worker_logs"),
        SWAPCAST_JOBS__STORAGE="s3", SWAPCAST_JOBS__S3_ENDPOINT_URL=s3_server.url, SWAPCAST_JOBS__S3_BUCKET=bucket,
        SWAPCAST_JOBS__S3_PREFIX=PREFIX, TMPDIR=str(scratch_dir), **S3_ENV,
    )
    yield workers
    workers.close()


def test_a_job_with_s3_storage(s3_workers, s3_api, s3_server, bucket, redis_url, clips, astronaut_image,
                               local_dir, scratch_dir, tmp_path) -> None:
    photo = tmp_path / "face.png"
    write_image(photo, astronaut_image)
    output = tmp_path / "swapped.mp4"
    code, out, err = run_cli("jobs", "submit", clips.medium, "--source", photo, "--server", s3_api.url,
                             "--wait", "--output", output, "--no-progress")
    assert code == 0, err + s3_workers.logs()
    job_id = out.splitlines()[0]
    assert f"{job_id}: completed 100% (chunks 6/6)" in out
    probe, original = ffprobe(output), ffprobe(clips.medium)
    assert probe.frames == original.frames == 180 and probe.audio == "aac"
    assert abs(probe.duration_s - original.duration_s) <= 1 / FPS
    inputs = {f"{PREFIX}/{job_id}/input.mp4", f"{PREFIX}/{job_id}/source.png"}
    deadline = time.monotonic() + 10  # the finalising worker removes the chunks just after completing
    while True:  # left: the inputs and one output, named per finalise attempt (<random>-output.mp4)
        outputs = {k for k in s3_server.keys(bucket) - inputs if k.startswith(f"{PREFIX}/{job_id}/")}
        if s3_server.keys(bucket) >= inputs and len(outputs) == 1 and next(iter(outputs)).endswith("-output.mp4") \
                and s3_server.keys(bucket) == inputs | outputs:
            break
        assert time.monotonic() < deadline, (sorted(s3_server.keys(bucket)), s3_workers.logs())
        time.sleep(0.1)
    (output_key,) = outputs
    stored = s3_server.client.get_object(Bucket=bucket, Key=output_key)["Body"].read()
    assert stored == output.read_bytes()
    assert list((scratch_dir / "swapcast-scratch").iterdir()) == [] and list(local_dir.iterdir()) == []
    logs = s3_workers.logs()
    assert f"storage s3://{bucket}/{PREFIX} at {s3_server.url}" in logs
    assert f"{job_id} split done in" in logs and f"{job_id} finalise done in" in logs
    s3_server.client.delete_object(Bucket=bucket, Key=output_key)
    assert JobsClient(s3_api.url).request("GET", f"/api/v1/jobs/{job_id}/output") == (
        404, {"error": f"the output of job {job_id} is no longer in the storage"}
    )


def test_a_video_already_in_the_bucket(s3_api, s3_server, bucket, redis_url, clips) -> None:
    client = JobsClient(s3_api.url)
    s3_server.client.upload_file(str(clips.short), bucket, f"{PREFIX}/incoming/talk.mp4")
    status, job = client.submit(path="incoming/talk.mp4", face_id="astronaut")
    assert status == 201 and job["input"] == "talk.mp4", job
    assert client.submit(path="incoming/gone.mp4", face_id="astronaut") == (
        400, {"error": "path 'incoming/gone.mp4': no such file in the job storage"}
    )
    assert client.submit(path="../talk.mp4", face_id="astronaut")[1]["error"].endswith("stay inside it")
    assert client.cancel(job["id"])[0] == 200
