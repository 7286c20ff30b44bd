"""What the jobs tests share besides fixtures: an independent probe (the ffprobe CLI, so the
output is not judged by the code that wrote it), blocking looks into the queue, a pool of
real ``swapcast worker`` processes, and the ``swapcast`` CLI run in-process."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signaling.jobs import JobQueue
from swapcast.benchmarks.jobs import JobsClient, WorkerProcess, worker_env
from swapcast.cli import main

SECRET = "jobs-test-webhook-secret"
CLAIM_TIMEOUT_S = 3.0
FPS = 15
JOB_TIMEOUT_S = 90.0
# the S3 tests' credentials, for this process and the workers: fake keys moto accepts, no
# shared config files, and no instance-metadata lookups (only loopback is ever asked)
S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
          "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": "/nonexistent/aws-config",
          "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials"}


@dataclass(frozen=True)
class Probe:
    frames: int  # decoded video frames
    duration_s: float
    audio: str | None


def ffprobe(path: Path) -> Probe:
    result = subprocess.run(
        ["ffprobe", "-v", "error", "-count_frames", "-show_entries", "stream=codec_type,codec_name,nb_read_frames,duration",
         "-of", "json", str(path)],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=True,
    )
    streams = json.loads(result.stdout)["streams"]
    video = next(s for s in streams if s["codec_type"] == "video")
    audio = next((s["codec_name"] for s in streams if s["codec_type"] == "audio"), None)
    return Probe(int(video["nb_read_frames"]), float(video["duration"]), audio)


def queue_call(redis_url: str, method: str, *args: Any) -> Any:
    """Call one ``JobQueue`` coroutine method from a test (a fresh client per event loop)."""

    async def call() -> Any:
        queue = JobQueue.from_url(redis_url)
        try:
            return await getattr(queue, method)(*args)
        finally:
            await queue.close()

    return asyncio.run(call())


class Workers:
    """Two worker processes shared by a module's tests; one killed by a test is replaced.
    ``settings`` are more of their environment (``SWAPCAST_JOBS__STORAGE="s3"``, ...)."""

    def __init__(self, redis_url: str, storage: Path, log_dir: Path, **settings: str) -> None:
        self.redis_url, self.log_dir = redis_url, log_dir
        self.env = worker_env(
            storage, SWAPCAST_JOBS__CLAIM_TIMEOUT_S=str(CLAIM_TIMEOUT_S), SWAPCAST_JOBS__CHUNK_SECONDS="2",
            SWAPCAST_JOBS__WEBHOOK_SECRET=SECRET, SWAPCAST_ENGINE__RUNNER_THREADS="1", **settings,
        )
        self.procs = [self._start(f"w{n}") for n in range(2)]
        for proc in self.procs:
            proc.wait_ready()

    def _start(self, name: str) -> WorkerProcess:
        return WorkerProcess(self.redis_url, name, self.env, self.log_dir)

    def revive(self) -> None:
        for n, proc in enumerate(self.procs):
            if proc.popen.poll() is not None:
                self.procs[n] = self._start(f"{proc.name}-again").wait_ready()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log()[-2500:]}" for p in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()


def finish(client: JobsClient, workers: Workers, job_id: str, **kwargs: Any) -> dict[str, Any]:
    try:
        return client.wait(job_id, JOB_TIMEOUT_S, **kwargs)
    except TimeoutError as exc:
        raise AssertionError(f"{exc}\n{workers.logs()}") from None


def run_cli(*args: str | Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()
