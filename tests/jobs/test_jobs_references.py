"""Every id a job submission names is resolved for the caller: a ``face_id`` in a form field
or a JSON body, and a ``path`` in the job storage. A user reaches only their own (their
folder ``users/<subject>/``, their own jobs' files, their own faces and the samples); another
user's gets exactly the answer a missing one gets. Admins (and a bare API without auth)
may name anything in the storage."""

from __future__ import annotations

import asyncio
import json

import pytest

from signaling.auth import RateLimiter, TokenVerifier, auth_middleware, mint_token
from signaling.jobs import JobQueue, JobSettings, face_checker
from signaling.registry import FaceRecord, MemoryRegistry
from streamer.samples import SAMPLE_FACES
from swapcast.benchmarks.jobs import JobsApi, JobsClient

SECRET = "jobs-references-jwt-secret-of-32-bytes-or-more"
ALICE_FACE = "u-a11ce0000001"


@pytest.fixture(scope="module")
def users(redis_server, tmp_path_factory):
    storage = tmp_path_factory.mktemp("references_storage")
    registry = MemoryRegistry(ttl_s=60.0)
    asyncio.run(registry.put_face(FaceRecord(ALICE_FACE, "alice", b"jpeg", b"source", owner="alice")))
    middleware = auth_middleware(TokenVerifier(secret=SECRET), per_token=RateLimiter(10_000),
                                 per_ip=RateLimiter(10_000), is_public=lambda request: False)
    api = JobsApi(redis_server.url, JobSettings(storage_dir=storage), face_checker(SAMPLE_FACES, registry),
                  middlewares=[middleware]).start()
    yield storage, {name: JobsClient(api.url, mint_token(SECRET, name, role=role))
                    for name, role in (("alice", "user"), ("bob", "user"), ("root", "admin"))}
    api.close()


def submit_json(client: JobsClient, **fields: str) -> tuple[int, dict]:
    return client.request("POST", "/api/v1/jobs", json.dumps(fields).encode(), {"Content-Type": "application/json"})


def test_a_storage_path_reaches_only_the_callers_own_files(users, clips, redis_url) -> None:
    storage, client = users
    for folder in ("users/alice", "users/bob", "incoming"):
        (storage / folder).mkdir(parents=True, exist_ok=True)
        (storage / folder / "talk.mp4").write_bytes(clips.short.read_bytes())
    status, alice_job = client["alice"].submit(clips.short, face_id="astronaut")
    assert status == 201, alice_job
    alice_input = f"{alice_job['id']}/input.mp4"
    assert (storage / alice_input).is_file()

    def refused(path: str) -> tuple[int, dict]:
        return 400, {"error": f"path {path!r}: no such file in the job storage"}  # as for a file that is not there

    for path in (alice_input, "users/alice/talk.mp4", "users/bob/../alice/talk.mp4", "incoming/talk.mp4",
                 "users/bobby/talk.mp4", "users/bob/missing.mp4", "", ".", "users/bob/..", alice_job["id"]):
        assert submit_json(client["bob"], path=path, face_id="astronaut") == refused(path), path
    assert client["bob"].submit(path=alice_input, face_id="astronaut") == refused(alice_input)  # a form field alike
    assert submit_json(client["bob"], path="users/bob/talk.mp4", face_id="astronaut")[0] == 201
    assert submit_json(client["alice"], path=alice_input, face_id="astronaut")[0] == 201  # her own job's file
    assert submit_json(client["alice"], path="users/alice/talk.mp4", face_id="astronaut")[0] == 201
    for path in (alice_input, "incoming/talk.mp4", "users/bob/talk.mp4"):
        assert submit_json(client["root"], path=path, face_id="astronaut")[0] == 201, path


def test_a_face_id_reaches_only_the_callers_own_faces_and_the_samples(users, clips, redis_url) -> None:
    storage, client = users
    (storage / "users" / "bob").mkdir(parents=True, exist_ok=True)
    (storage / "users" / "bob" / "own.mp4").write_bytes(clips.short.read_bytes())
    unknown = (400, {"error": f"unknown face_id {ALICE_FACE!r}"})
    assert client["bob"].submit(clips.short, face_id=ALICE_FACE) == unknown  # a multipart field
    assert submit_json(client["bob"], path="users/bob/own.mp4", face_id=ALICE_FACE) == unknown  # a JSON body
    assert client["bob"].submit(clips.short, face_id="u-000000000000") == (400, {"error": "unknown face_id 'u-000000000000'"})
    assert client["alice"].submit(clips.short, face_id=ALICE_FACE)[0] == 201
    assert client["root"].submit(clips.short, face_id=ALICE_FACE)[0] == 201
    assert client["bob"].submit(clips.short, face_id="grace_hopper")[0] == 201


def test_a_users_webhook_may_not_point_into_the_operators_network(users, clips, redis_url) -> None:
    """A webhook is a request a worker makes where the user points it: a user's must be a
    public address (the push policy's rule), an admin's may be anything."""
    _, client = users
    for url in ("http://127.0.0.1:6379/", "http://169.254.169.254/latest/meta-data/", "http://[::ffff:10.0.0.1]/hook",
                "https://localhost/hook"):
        status, answer = client["bob"].submit(clips.short, face_id="astronaut", webhook_url=url)
        assert status == 400 and answer["error"].startswith("webhook_url ") and "not a public address" in answer["error"]
    status, bobs = client["bob"].submit(clips.short, face_id="astronaut", webhook_url="http://8.8.8.8/hook")
    assert status == 201
    status, roots = client["root"].submit(clips.short, face_id="astronaut", webhook_url="http://127.0.0.1:6379/")
    assert status == 201

    async def stored(job_id: str):
        queue = JobQueue.from_url(redis_url)
        try:
            return await queue.get(job_id)
        finally:
            await queue.close()

    # the worker checks the user's webhook again when it sends it (DNS may have changed), not the admin's
    assert not asyncio.run(stored(bobs["id"])).webhook_unrestricted
    assert asyncio.run(stored(roots["id"])).webhook_unrestricted
