"""The jobs HTTP API against a real Redis, without workers: submission (upload, stored path,
source photo), idempotency, cancel, every error status, and the node's wiring (503 without
Redis)."""

from __future__ import annotations

import asyncio
import json
import struct
import zlib

import redis
from aiohttp.test_utils import make_mocked_request
from jobs_harness import queue_call

from signaling.auth import RateLimiter, TokenVerifier, auth_middleware, mint_token
from signaling.jobs import NO_REDIS, JobSettings
from signaling.jobs.model import Job
from streamer.media.images import write_image
from streamer.samples import astronaut
from swapcast.app import build_app
from swapcast.benchmarks.jobs import JobsApi, JobsClient
from swapcast.config import load_config
from swapcast.local_cluster import free_port


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` (the pixels are never there)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


def test_submit_upload_gives_a_pending_job_with_its_split_queued(client, clips, redis_url) -> None:
    status, job = client.submit(clips.short, face_id="astronaut", priority="high")
    assert status == 201, job
    assert job["state"] == "pending" and job["progress"] == 0.0 and job["priority"] == "high"
    assert job["input"] == "short.mp4" and job["source"] == "face_id" and job["output"] is None
    assert client.get(job["id"]) == (200, job)
    tasks = redis.Redis.from_url(redis_url, decode_responses=True).xrange("swapcast:{jobs}:tasks:high")
    assert [fields for _, fields in tasks] == [{"job": job["id"], "kind": "split"}]


def test_same_idempotency_key_twice_gives_one_job(client, clips, redis_url) -> None:
    first_status, first = client.submit(clips.short, face_id="astronaut", idempotency_key="upload-42")
    again_status, again = client.submit(clips.short, face_id="astronaut", idempotency_key="upload-42")
    other_status, other = client.submit(clips.short, face_id="astronaut", idempotency_key="upload-43")
    assert (first_status, again_status, other_status) == (201, 200, 201)
    assert again["id"] == first["id"] and other["id"] != first["id"]
    status, listed = client.request("GET", "/api/v1/jobs")
    assert status == 200 and sorted(j["id"] for j in listed["jobs"]) == sorted([first["id"], other["id"]])
    assert redis.Redis.from_url(redis_url).xlen("swapcast:{jobs}:tasks:normal") == 2  # one split per job


def test_stored_path_and_source_photo(client, clips, storage, tmp_path) -> None:
    incoming = storage / "incoming"
    incoming.mkdir(exist_ok=True)
    (incoming / "talk.mp4").write_bytes(clips.short.read_bytes())
    photo = tmp_path / "face.png"
    write_image(photo, astronaut())
    status, job = client.submit(path="incoming/talk.mp4", source=photo)
    assert status == 201, job
    assert job["input"] == "talk.mp4" and job["source"] == "upload" and job["face_id"] is None
    body = b'{"path": "incoming/talk.mp4", "face_id": "grace_hopper"}'
    status, job = client.request("POST", "/api/v1/jobs", body, {"Content-Type": "application/json"})
    assert status == 201 and job["face_id"] == "grace_hopper"


def test_bad_submissions_are_400_with_a_reason(client, clips, storage) -> None:
    (storage / "notes.txt").write_text("not a video")
    before = set(storage.iterdir())
    cases = {
        "no face": client.submit(clips.short),
        "unknown face": client.submit(clips.short, face_id="nobody"),
        "bad priority": client.submit(clips.short, face_id="astronaut", priority="urgent"),
        "bad webhook": client.submit(clips.short, face_id="astronaut", webhook_url="ftp://example.org/x"),
        "video and path": client.submit(clips.short, face_id="astronaut", path="incoming/talk.mp4"),
        "no video": client.submit(face_id="astronaut"),
        "escaping path": client.submit(path="../../etc/passwd", face_id="astronaut"),
        "missing path": client.submit(path="nope.mp4", face_id="astronaut"),
        "unknown field": client.submit(clips.short, face_id="astronaut", extra={"colour": "blue"}),
        "bad key": client.submit(clips.short, face_id="astronaut", idempotency_key=""),
    }
    for name, (status, answer) in cases.items():
        assert status == 400, (name, status, answer)
        assert set(answer) == {"error"} and answer["error"], name
    assert "exactly one of 'face_id'" in cases["no face"][1]["error"]
    assert "unknown face_id 'nobody'" in cases["unknown face"][1]["error"]
    assert cases["escaping path"][1]["error"].endswith("must be relative to the job storage and stay inside it")
    assert set(storage.iterdir()) == before  # refused submissions leave nothing behind


def test_not_a_video_is_415_and_too_large_is_413(client, clips, storage, tmp_path) -> None:
    before = set(storage.iterdir())
    text = tmp_path / "clip.mp4"
    text.write_text("hello, I am a text file\n" * 20)
    status, answer = client.submit(text, face_id="astronaut")
    assert (status, answer) == (415, {"error": "'video' (clip.mp4) is not a video file"})
    status, answer = client.submit(clips.short, source=text)
    assert status == 415 and "'source' is not an image" in answer["error"]
    status, answer = client.submit(path="notes.txt", face_id="astronaut")
    assert status == 415 and answer["error"] == "path 'notes.txt' is not a video file"
    big = tmp_path / "big.mp4"  # an mp4 header, then more than the 2 MB limit of this API
    big.write_bytes(clips.short.read_bytes()[:32] + bytes(3 * 1024 * 1024))
    status, answer = client.submit(big, face_id="astronaut")
    assert status == 413 and "larger than the 2 MB limit" in answer["error"]
    status, answer = client.request("PUT", "/api/v1/jobs", b"x", {"Content-Type": "text/plain"})
    assert status == 405
    status, answer = client.request("POST", "/api/v1/jobs", b"x", {"Content-Type": "text/plain"})
    assert status == 415 and "multipart/form-data" in answer["error"]
    assert set(storage.iterdir()) == before


def test_unreadable_bodies_and_source_photos_are_refused_at_submission(client, clips, storage, tmp_path) -> None:
    """Not accepted with 201 and then failed by a worker: a source photo whose header
    declares huge dimensions is 413, one whose header cannot be read 415, and a JSON body
    nested past the parser's limit 400; nothing is kept."""
    before = set(storage.iterdir())
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(60_000, 60_000))
    status, answer = client.submit(clips.short, source=bomb)
    assert (status, answer) == (413, {"error": "'source' declares too many pixels; the limit is 4096 px a side"})
    wide = tmp_path / "wide.png"
    wide.write_bytes(png_header(5000, 10))
    assert client.submit(clips.short, source=wide) == (413, {"error": "'source' is 5000x10 px; the limit is 4096 px a side"})
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"not the rest of a PNG" * 10)
    assert client.submit(clips.short, source=broken) == (415, {"error": "'source' is not a readable image (JPEG, PNG, "
                                                                        "WebP or BMP)"})
    deep = b"[" * 200_000 + b"]" * 200_000
    status, answer = client.request("POST", "/api/v1/jobs", deep, {"Content-Type": "application/json"})
    assert (status, answer) == (400, {"error": "the JSON body is nested too deeply"})
    status, answer = client.request("POST", "/api/v1/jobs", b'{"path": "\xff"}', {"Content-Type": "application/json"})
    assert status == 400 and "JSON" in answer["error"]
    assert set(storage.iterdir()) == before


def test_fuzzed_json_submissions_never_reach_a_5xx(client, clips, storage) -> None:
    """A seeded generator gives every field of a JSON submission every kind of value (wrong
    types, lone surrogates, NUL, paths out of the storage, huge strings): 4xx or success."""
    import random

    rng = random.Random(15)
    (storage / "fuzz.mp4").write_bytes(clips.short.read_bytes())
    values = [None, 1, 2**70, 0.5, True, [], {}, "", "x" * 5000, "\ud800", "\x00", "fuzz.mp4", "../fuzz.mp4",
              "/etc/passwd", ".scratch/x", "astronaut", "u-000000000000", "high", "http://[::1", "http://127.0.0.1:1/x"]
    answers = []
    for _ in range(100):
        body = {name: rng.choice(values) for name in rng.sample(["face_id", "path", "priority", "webhook_url", "source"],
                                                                 rng.randint(0, 4))}
        answers.append(client.request("POST", "/api/v1/jobs", json.dumps(body).encode(),
                                      {"Content-Type": "application/json"})[0])
    assert [status for status in answers if status >= 500] == []
    assert any(status == 400 for status in answers)


def test_unknown_jobs_are_404_and_output_waits_for_completion(client, clips) -> None:
    for method, path in (("GET", "/api/v1/jobs/job_nope"), ("DELETE", "/api/v1/jobs/job_nope"),
                         ("GET", "/api/v1/jobs/job_nope/output")):
        assert client.request(method, path) == (404, {"error": "no job 'job_nope'"})
    _, job = client.submit(clips.short, face_id="astronaut")
    status, answer = client.request("GET", f"/api/v1/jobs/{job['id']}/output")
    assert (status, answer) == (409, {"error": f"job {job['id']} is pending: there is no output yet"})


def test_cancel_a_pending_job(client, clips, redis_url) -> None:
    _, job = client.submit(clips.short, face_id="astronaut")
    status, cancelled = client.cancel(job["id"])
    assert status == 200 and cancelled["state"] == "cancelled" and cancelled["finished"] is not None
    assert client.cancel(job["id"])[0] == 200  # cancelling twice is harmless
    record: Job = queue_call(redis_url, "get", job["id"])
    assert record.state == "cancelled" and record.final
    status, answer = client.request("GET", f"/api/v1/jobs/{job['id']}/output")
    assert (status, answer) == (409, {"error": f"job {job['id']} is cancelled: there is no output"})


def test_node_answers_503_without_redis_and_serves_jobs_with_it(engine, redis_url, tmp_path) -> None:
    async def call(app, path: str) -> tuple[int, dict]:
        route = next(r for r in app.router.routes() if r.method == "GET" and r.resource.canonical == path)
        response = await route.handler(make_mocked_request("GET", path, app=app))
        return response.status, json.loads(response.body)

    async def scenario(redis: str | None) -> tuple[int, dict]:
        overrides = {"server": {"data_dir": str(tmp_path)}, "rtmp": {"port": 0}, "cluster": {"redis_url": redis},
                     "auth": {"jwt_secret": "jobs-test-jwt-secret-of-32-bytes-or-more"}}
        app = build_app(load_config(environ={}, overrides=overrides), engine=engine)
        try:
            return await call(app, "/api/v1/jobs")
        finally:
            await app.cleanup()

    assert asyncio.run(scenario(None)) == (503, {"error": NO_REDIS})
    assert asyncio.run(scenario(redis_url)) == (200, {"jobs": []})


def test_redis_down_is_503_and_keeps_no_upload(clips, storage) -> None:
    before = set(storage.iterdir())
    api = JobsApi(f"redis://127.0.0.1:{free_port()}/0", JobSettings(storage_dir=storage)).start()
    try:
        client = JobsClient(api.url)
        status, answer = client.get("job_x")
        assert status == 503 and answer["error"].startswith("job queue (Redis) unavailable: ")
        status, answer = client.submit(clips.short, face_id="astronaut")
        assert status == 503 and answer["error"].startswith("job queue (Redis) unavailable: ")
    finally:
        api.close()
    assert set(storage.iterdir()) == before


def test_behind_auth_jobs_and_idempotency_keys_belong_to_their_owner(redis_url, storage, clips) -> None:
    secret = "jobs-test-jwt-secret-of-32-bytes-or-more"
    middleware = auth_middleware(TokenVerifier(secret=secret), per_token=RateLimiter(10_000),
                                 per_ip=RateLimiter(10_000), is_public=lambda request: False)
    api = JobsApi(redis_url, JobSettings(storage_dir=storage), middlewares=[middleware]).start()
    try:
        alice, bob, admin = (JobsClient(api.url, mint_token(secret, subject, role=role))
                             for subject, role in (("alice", "user"), ("bob", "user"), ("root", "admin")))
        assert JobsClient(api.url).get("job_x")[0] == 401
        status, mine = alice.submit(clips.short, face_id="astronaut", idempotency_key="k1")
        assert status == 201
        assert alice.submit(clips.short, face_id="astronaut", idempotency_key="k1") == (200, mine)
        status, theirs = bob.submit(clips.short, face_id="astronaut", idempotency_key="k1")
        assert status == 201 and theirs["id"] != mine["id"]  # the same key from another user: another job
        hidden = (404, {"error": f"no job {mine['id']!r}"})  # exactly like a job that does not exist
        assert bob.get(mine["id"]) == hidden and bob.cancel(mine["id"]) == hidden
        assert bob.request("GET", f"/api/v1/jobs/{mine['id']}/output") == hidden
        assert [j["id"] for j in bob.request("GET", "/api/v1/jobs")[1]["jobs"]] == [theirs["id"]]
        assert [j["id"] for j in admin.request("GET", "/api/v1/jobs")[1]["jobs"]] == [theirs["id"], mine["id"]]
        assert admin.get(mine["id"])[0] == 200 and alice.cancel(mine["id"])[1]["state"] == "cancelled"
    finally:
        api.close()
