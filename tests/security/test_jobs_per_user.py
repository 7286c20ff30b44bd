"""One user's unfinished jobs are bounded: every submission may store up to 2 GB and queues
chunks that the workers every user shares render in turn, so one user submitting without
end filled the storage and the queue for everyone. Past the bound, a 429 saying so, before
the upload is read; another user is not affected."""

from __future__ import annotations

import json
import subprocess

import pytest

from signaling.auth import RateLimiter, TokenVerifier, auth_middleware, mint_token
from signaling.jobs import JobSettings, face_checker
from signaling.registry import MemoryRegistry
from streamer.samples import SAMPLE_FACES
from swapcast.benchmarks.jobs import JobsApi, JobsClient

SECRET = "jobs-per-user-jwt-secret-of-32-bytes-or-more"


@pytest.fixture(scope="module")
def users(redis_server, tmp_path_factory):
    storage = tmp_path_factory.mktemp("per_user_storage")
    for user in ("alice", "bob"):
        (storage / "users" / user).mkdir(parents=True)
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc=size=128x96:rate=10", "-t", "1",
                        "-c:v", "libx264", "-pix_fmt", "yuv420p", str(storage / "users" / user / "clip.mp4")],
                       check=True, timeout=60)
    middleware = auth_middleware(TokenVerifier(secret=SECRET), per_token=RateLimiter(10_000),
                                 per_ip=RateLimiter(10_000), is_public=lambda request: False)
    api = JobsApi(redis_server.url, JobSettings(storage_dir=storage, max_active_per_user=3),
                  face_checker(SAMPLE_FACES, MemoryRegistry(ttl_s=60.0)), middlewares=[middleware]).start()
    yield {name: JobsClient(api.url, mint_token(SECRET, name, role=role))
           for name, role in (("alice", "user"), ("bob", "user"), ("root", "admin"))}
    api.close()


def submit(client: JobsClient, user: str) -> tuple[int, dict]:
    body = json.dumps({"path": f"users/{user}/clip.mp4", "face_id": "astronaut"}).encode()
    return client.request("POST", "/api/v1/jobs", body, {"Content-Type": "application/json"})


def test_a_user_holds_a_bounded_number_of_unfinished_jobs(users) -> None:
    statuses = [submit(users["alice"], "alice")[0] for _ in range(3)]  # nothing renders them: no worker runs
    status, answer = submit(users["alice"], "alice")
    assert statuses == [201, 201, 201] and status == 429, answer
    assert "3 unfinished jobs" in answer["error"]
    assert submit(users["bob"], "bob")[0] == 201
    listing = users["alice"].request("GET", "/api/v1/jobs")[1]["jobs"]
    assert users["alice"].request("DELETE", f"/api/v1/jobs/{listing[0]['id']}")[0] == 200  # cancelled: final
    assert submit(users["alice"], "alice")[0] == 201
