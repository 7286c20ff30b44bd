"""The job storage: one contract, run over a local folder and over a real S3 server on
loopback (moto's), plus what only S3 has: multipart transfers, and readable errors for a
missing bucket, an endpoint that does not answer, refused and absent credentials — from the
class, the jobs API (503) and ``swapcast worker`` (exit 2)."""

from __future__ import annotations

import os

import pytest
from botocore.stub import Stubber
from jobs_harness import run_cli

from signaling.jobs import JobSettings
from signaling.jobs.s3 import MULTIPART_BYTES, S3Storage
from signaling.jobs.settings import S3Location
from signaling.jobs.storage import (
    CANNOT_BE_A_FILE,
    OUTSIDE,
    JobStorage,
    JobStorageError,
    LocalStorage,
)
from swapcast.benchmarks.jobs import JobsApi, JobsClient
from swapcast.config import ConfigError, load_config
from swapcast.local_cluster import free_port

MISSING_BUCKET = "no-such-bucket"


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> JobStorage:
    if request.param == "local":
        return LocalStorage(tmp_path / "storage")
    s3 = request.getfixturevalue("s3_server")
    return S3Storage(s3.location(s3.new_bucket(), prefix="team/jobs"))


def put(store: JobStorage, key: str, data: bytes) -> None:
    with store.scratch() as scratch:
        local = scratch / "upload"
        local.write_bytes(data)
        store.put_file(local, key)
        assert not local.exists()  # given to the storage


def stored(store: JobStorage, key: str) -> bytes | None:
    """The content of ``key`` read through ``open``, or None when there is no such key."""
    try:
        body, size = store.open(key)
    except FileNotFoundError:
        return None
    try:
        data = body.read()
    finally:
        body.close()
    assert len(data) == size
    return data


def test_files_go_in_and_come_back(store) -> None:
    store.check()
    put(store, "job_1/input.mp4", b"first version")
    put(store, "job_1/input.mp4", b"\x00\x00\x00\x18ftypmp42 and the rest")  # replaces
    assert stored(store, "job_1/input.mp4") == b"\x00\x00\x00\x18ftypmp42 and the rest"
    assert store.read_head("job_1/input.mp4", 8) == b"\x00\x00\x00\x18ftyp"
    put(store, "job_1/empty.bin", b"")
    assert store.read_head("job_1/empty.bin", 8) == b"" and stored(store, "job_1/empty.bin") == b""
    with store.scratch() as scratch:
        fetched = store.fetch("job_1/input.mp4", scratch)
        assert fetched.read_bytes() == b"\x00\x00\x00\x18ftypmp42 and the rest"
        assert store.path("job_1/input.mp4") in (None, fetched)  # a local folder hands out its own file
    assert not scratch.exists()


def test_a_part_of_a_file_is_read_alone(store) -> None:
    """What a ranged download streams: only the part (a ranged GET from S3), and its count."""
    put(store, "job_1/output.mp4", b"0123456789")
    info = store.stat("job_1/output.mp4")
    assert info.size == 10 and info.etag.startswith('"') and info.modified.tzinfo is not None
    for start, stop, part in ((0, None, b"0123456789"), (2, 5, b"234"), (7, None, b"789"), (8, 100, b"89"),
                              (10, None, b""), (4, 4, b"")):
        body, count = store.open("job_1/output.mp4", start, stop)
        try:
            assert (body.read(), count) == (part, len(part)), (start, stop)
        finally:
            body.close()


def test_missing_keys_are_file_not_found(store) -> None:
    with store.scratch() as scratch, pytest.raises(FileNotFoundError):
        store.fetch("job_1/nothing.mov", scratch)
    with pytest.raises(FileNotFoundError):
        store.open("job_1/nothing.mov")
    with pytest.raises(FileNotFoundError):
        store.stat("job_1/nothing.mov")
    with pytest.raises(FileNotFoundError):
        store.read_head("job_1/nothing.mov", 8)
    store.delete("job_1/nothing.mov")  # already gone: fine
    store.delete_folder("job_nothing")


def test_delete_a_key_and_a_folder(store) -> None:
    keys = ["job_1/split-ab/chunk-0000.mov", "job_1/split-ab/chunk-0001.mov", "job_1/rendered/chunk-0000.mov",
            "job_1/output.mp4", "job_10/output.mp4"]
    for key in keys:
        put(store, key, key.encode())
    store.delete_folder("job_1/split-ab")
    store.delete("job_1/output.mp4")
    assert {key: stored(store, key) is not None for key in keys} == {
        "job_1/split-ab/chunk-0000.mov": False, "job_1/split-ab/chunk-0001.mov": False,
        "job_1/rendered/chunk-0000.mov": True, "job_1/output.mp4": False, "job_10/output.mp4": True,
    }
    store.delete_folder("job_1")
    assert stored(store, "job_1/rendered/chunk-0000.mov") is None
    assert stored(store, "job_10/output.mp4") == b"job_10/output.mp4"  # a folder is not a name prefix


def test_user_paths_stay_inside_the_storage(store) -> None:
    assert store.key_of("incoming/talk.mp4") == "incoming/talk.mp4"
    for path in ("../talk.mp4", "/etc/passwd", "incoming/../../talk.mp4"):
        with pytest.raises(ValueError, match=OUTSIDE):
            store.key_of(path)
    with pytest.raises(ValueError, match=CANNOT_BE_A_FILE):
        store.key_of("talk\0.mp4")


def test_s3_moves_big_files_in_parts_under_its_prefix(s3_server) -> None:
    bucket = s3_server.new_bucket()
    store = S3Storage(s3_server.location(bucket, prefix="/team/jobs/"))
    data = os.urandom(MULTIPART_BYTES + 4096)
    put(store, "job_1/output.mp4", data)
    assert s3_server.keys(bucket) == {"team/jobs/job_1/output.mp4"}
    etag = s3_server.client.head_object(Bucket=bucket, Key="team/jobs/job_1/output.mp4")["ETag"]
    assert etag.strip('"').endswith("-2")  # a multipart upload's ETag counts its parts
    with store.scratch() as scratch:
        assert store.fetch("job_1/output.mp4", scratch).read_bytes() == data
    assert store.key_of("a/b.mp4") == "a/b.mp4" and store.path("a/b.mp4") is None


def check_error(location: S3Location) -> str:
    with pytest.raises(JobStorageError) as caught:
        S3Storage(location).check()
    return str(caught.value)


def test_s3_errors_say_what_to_fix(s3_server, monkeypatch) -> None:
    assert check_error(s3_server.location(MISSING_BUCKET)) == (
        f"job storage s3://{MISSING_BUCKET}/jobs at {s3_server.url}: the bucket '{MISSING_BUCKET}' does not exist"
    )
    closed = f"http://127.0.0.1:{free_port()}"
    assert check_error(S3Location(bucket="jobs", endpoint_url=closed)).startswith(
        f"job storage s3://jobs/ at {closed}: the endpoint cannot be reached ("
    )
    refusing = S3Storage(s3_server.location("jobs"))
    with Stubber(refusing.client) as stub:  # moto takes any key: botocore's stub answers as AWS does
        stub.add_client_error("head_bucket", service_error_code="403", http_status_code=403)
        with pytest.raises(JobStorageError, match=r": access denied \(403\): check the credentials \(AWS_ACCESS_KEY_ID"):
            refusing.check()
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert check_error(s3_server.location(s3_server.new_bucket())).endswith(
        ": no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or another source of the AWS credential chain)"
    )


def test_a_missing_bucket_is_503_in_the_api_and_exit_2_for_a_worker(
    s3_server, redis_url, clips, tmp_path, monkeypatch
) -> None:
    settings = JobSettings(storage_dir=tmp_path, s3=s3_server.location(MISSING_BUCKET))
    reason = f"job storage s3://{MISSING_BUCKET}/jobs at {s3_server.url}: the bucket '{MISSING_BUCKET}' does not exist"
    api = JobsApi(redis_url, settings).start()
    try:
        client = JobsClient(api.url)
        assert client.submit(clips.short, face_id="astronaut") == (503, {"error": reason})
        assert client.get("job_x") == (404, {"error": "no job 'job_x'"})  # what needs no storage still works
    finally:
        api.close()
    for name, value in {"STORAGE": "s3", "S3_BUCKET": MISSING_BUCKET, "S3_PREFIX": "jobs",
                        "S3_ENDPOINT_URL": s3_server.url}.items():
        monkeypatch.setenv(f"SWAPCAST_JOBS__{name}", value)
    assert run_cli("worker", "--redis", redis_url)[::2] == (2, f"swapcast worker: error: {reason}\n")


def test_local_storage_that_cannot_be_written_is_a_storage_error(tmp_path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(JobStorageError, match=f"^job storage folder {blocker}/jobs cannot be written"):
        LocalStorage(blocker / "jobs").check()



def test_s3_config_comes_from_the_jobs_section(tmp_path) -> None:
    with pytest.raises(ConfigError, match="jobs: Value error, storage s3 needs s3_bucket"):
        load_config(environ={"SWAPCAST_JOBS__STORAGE": "s3"})
    config = load_config(environ={"SWAPCAST_JOBS__STORAGE": "s3", "SWAPCAST_JOBS__S3_BUCKET": "renders",
                                  "SWAPCAST_JOBS__S3_ENDPOINT_URL": "http://127.0.0.1:9000"})
    settings = JobSettings.from_config(config.jobs, tmp_path)
    assert settings.s3 == S3Location(bucket="renders", endpoint_url="http://127.0.0.1:9000")
    assert isinstance(settings.open_storage(), S3Storage)
    assert JobSettings.from_config(load_config(environ={}).jobs, tmp_path).open_storage().where == str(tmp_path / "jobs")
