"""Offline jobs end to end: the jobs API, a real Redis and two real ``swapcast worker``
processes (claim timeout 3 s, 2 s chunks). A worker SIGKILLed mid-chunk loses nothing;
damaged input fails with a readable reason; cancel stops the remaining chunks; the webhook
is HMAC-signed and retried; the ``swapcast jobs`` CLI submits, waits and downloads."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import threading
import time

import pytest
import redis
from aiohttp import web
from jobs_harness import (
    FPS,
    JOB_TIMEOUT_S,
    SECRET,
    Workers,
    ffprobe,
    finish,
    queue_call,
    run_cli,
)
from media_fixtures import corrupt_copy

from streamer.media.images import write_image
from swapcast.benchmarks.jobs import FINAL

pytestmark = pytest.mark.slow

STREAM = "swapcast:{jobs}:tasks:normal"


@pytest.fixture(scope="module")
def pool(redis_server, storage, tmp_path_factory):
    workers = Workers(redis_server.url, storage, tmp_path_factory.mktemp("worker_logs"))
    yield workers
    workers.close()


@pytest.fixture
def workers(pool, client) -> Workers:
    pool.revive()
    return pool


def test_a_worker_killed_mid_chunk_loses_nothing(workers, client, clips, redis_url, storage) -> None:
    status, job = client.submit(clips.medium, face_id="astronaut")
    assert status == 201
    victim = workers.procs[1]
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    first_seen: dict[str, float] = {}
    killed_index = None
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while killed_index is None:  # the victim has been rendering one chunk for half a second: kill it
        assert time.monotonic() < deadline, "the victim never took a chunk\n" + workers.logs()
        with contextlib.suppress(redis.ResponseError):  # the group appears with the first task
            for entry in r.xpending_range(STREAM, "workers", "-", "+", 20, consumername=victim.name):
                found = r.xrange(STREAM, entry["message_id"], entry["message_id"])
                if found and found[0][1]["kind"] == "chunk":
                    since = first_seen.setdefault(entry["message_id"], time.monotonic())
                    if time.monotonic() - since >= 0.5:
                        victim.kill()
                        killed_index = int(found[0][1]["index"])
        time.sleep(0.05)

    done = finish(client, workers, job["id"])
    assert done["state"] == "completed", workers.logs()
    assert done["chunks"] == {"total": 6, "done": 6} and done["progress"] == 100.0
    attempts = queue_call(redis_url, "attempts", job["id"])
    assert attempts[f"chunk:{killed_index}"] == 2  # reclaimed after the claim timeout, rendered again
    assert queue_call(redis_url, "dead_letters") == []
    status, video = client.request("GET", done["output"])
    assert status == 200
    output = storage / "killed-output.mp4"
    output.write_bytes(video)
    probe, original = ffprobe(output), ffprobe(clips.medium)
    assert probe.frames == original.frames == 180 and probe.audio == "aac"
    assert abs(probe.duration_s - original.duration_s) <= 1 / FPS
    assert not (storage / job["id"] / "rendered").exists()  # intermediates are gone, input and output stay


def test_damaged_input_fails_with_a_readable_reason(workers, client, clips, redis_url, tmp_path, storage) -> None:
    damaged = tmp_path / "damaged.mp4"
    corrupt_copy(clips.medium, damaged)
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(clips.medium.read_bytes()[:4096])
    jobs = {}
    for path in (damaged, truncated):
        status, job = client.submit(path, face_id="astronaut")
        assert status == 201
        jobs[path.name] = job["id"]
    ended = {name: finish(client, workers, job_id) for name, job_id in jobs.items()}
    assert {name: job["state"] for name, job in ended.items()} == {"damaged.mp4": "failed", "truncated.mp4": "failed"}
    assert ended["damaged.mp4"]["error"].startswith("damaged.mp4 between ")
    assert ": damaged data, decoding stopped after " in ended["damaged.mp4"]["error"]
    assert ended["truncated.mp4"]["error"].startswith("truncated.mp4: not a readable video file")
    for job in ended.values():
        assert "Traceback" not in job["error"] and str(storage) not in job["error"]
    dead = {entry["job"]: entry for entry in queue_call(redis_url, "dead_letters")}
    assert set(dead) == set(jobs.values())
    for job in ended.values():
        assert dead[job["id"]]["error"] == job["error"] and dead[job["id"]]["attempts"] == "1"  # bad input: no retry


def test_cancel_stops_the_remaining_chunks(workers, client, clips, redis_url, storage) -> None:
    status, job = client.submit(clips.long, face_id="astronaut")
    assert status == 201
    finish(client, workers, job["id"], until=lambda j: j["chunks"]["done"] >= 1 or j["state"] in FINAL)
    status, cancelled = client.cancel(job["id"])
    assert status == 200 and cancelled["state"] == "cancelled"
    done_at_cancel = cancelled["chunks"]["done"]
    assert done_at_cancel < cancelled["chunks"]["total"] == 10
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    deadline = time.monotonic() + 20
    while r.xlen(STREAM) or r.xpending(STREAM, "workers")["pending"]:  # the rest is skipped or abandoned
        assert time.monotonic() < deadline, workers.logs()
        time.sleep(0.1)
    time.sleep(1.0)
    status, after = client.get(job["id"])
    assert after["state"] == "cancelled" and after["chunks"]["done"] == done_at_cancel and after["output"] is None
    rendered = list((storage / job["id"] / "rendered").glob("chunk-*.mov"))
    assert len(rendered) <= done_at_cancel < 10
    assert client.cancel(job["id"])[0] == 200


class Receiver:
    """A webhook endpoint on loopback that fails its first call with HTTP 500."""

    def __init__(self) -> None:
        self.calls: list[tuple[dict[str, str], bytes, int]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> str:
        async def hook(request: web.Request) -> web.Response:
            status = 500 if not self.calls else 200
            self.calls.append((dict(request.headers), await request.read(), status))
            return web.Response(status=status)

        app = web.Application()
        app.router.add_post("/hook", hook)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        return f"http://{host}:{port}/hook"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def test_webhook_is_signed_and_retried_and_a_source_photo_works(workers, client, clips, astronaut_image, tmp_path) -> None:
    photo = tmp_path / "face.png"
    write_image(photo, astronaut_image)
    receiver = Receiver()
    try:
        status, job = client.submit(clips.short, source=photo, webhook_url=receiver.url)
        assert status == 201
        done = finish(client, workers, job["id"], until=lambda j: (j["webhook_status"] or "").startswith(("delivered", "failed")))
    finally:
        receiver.close()
    assert done["state"] == "completed" and done["webhook_status"] == "delivered (HTTP 200, attempt 2)"
    assert [status for _, _, status in receiver.calls] == [500, 200]
    (first_headers, first_body, _), (headers, body, _) = receiver.calls
    assert body == first_body and headers["X-Swapcast-Delivery"] == first_headers["X-Swapcast-Delivery"]
    assert headers["X-Swapcast-Signature"] == "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Swapcast-Event"] == "job.completed"
    payload = json.loads(body)
    assert payload["event"] == "job.completed" and payload["job"]["id"] == job["id"]
    assert payload["job"]["state"] == "completed" and payload["job"]["output"] == f"/api/v1/jobs/{job['id']}/output"
    status, video = client.request("GET", done["output"])
    output = tmp_path / "out.mp4"
    output.write_bytes(video)
    assert ffprobe(output).frames == 4 * FPS


def test_jobs_cli_submit_wait_status_cancel(workers, client, api, clips, tmp_path) -> None:
    output = tmp_path / "swapped.mp4"
    code, out, err = run_cli("jobs", "submit", clips.short, "--face", "grace_hopper", "--server", api.url,
                             "--wait", "--output", output)
    assert code == 0, err + workers.logs()
    job_id = out.splitlines()[0]
    assert job_id.startswith("job_") and f"{job_id}: completed 100% (chunks 2/2)" in out
    # not a terminal: a line per change of state or chunks, not a bar redrawn into the log
    assert f"{job_id}: completed, chunks 2/2 (100%)" in err and "\r" not in err
    assert len(err.splitlines()) == len(set(err.splitlines()))
    probe = ffprobe(output)
    assert probe.frames == 4 * FPS and probe.audio == "aac"
    assert run_cli("jobs", "status", job_id, "--server", api.url)[1].strip() == f"{job_id}: completed 100% (chunks 2/2)"
    code, _, err = run_cli("jobs", "cancel", job_id, "--server", api.url)
    assert (code, err.strip()) == (2, f"swapcast jobs: error: 409 job {job_id} already completed; nothing to cancel")
    code, _, err = run_cli("jobs", "status", "job_nope", "--server", api.url)
    assert (code, err.strip()) == (2, "swapcast jobs: error: 404 no job 'job_nope'")
    code, out, err = run_cli("jobs", "submit", tmp_path / "missing.mp4", "--face", "astronaut", "--server", api.url)
    assert (code, err.strip()) == (2, f"swapcast jobs: error: video {tmp_path / 'missing.mp4'}: no such file")


def test_worker_needs_redis(monkeypatch) -> None:
    monkeypatch.delenv("SWAPCAST_CLUSTER__REDIS_URL", raising=False)
    code, _, err = run_cli("worker")
    assert (code, err.strip()) == (
        2, "swapcast worker: error: a worker needs the job queue's Redis: give --redis URL (or cluster.redis_url in the config)"
    )
