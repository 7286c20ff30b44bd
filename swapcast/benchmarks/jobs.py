"""``swapcast bench jobs``: offline jobs end to end on loopback — a redis-server, the jobs API
and 1, then 2 ``swapcast worker`` processes rendering a generated 720p clip of a moving real
face with audio. Reports frames/s and the end-to-end time (upload to verified output)
against the clip's duration, with a live progress bar per run.

The local pieces (clip writer, API server thread, worker processes, a small HTTP client)
are also what the jobs tests drive, so the benchmark and the tests exercise one setup.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import yaml
from aiohttp import web

from signaling.auth.middleware import Middleware
from signaling.jobs import JobService, JobSettings, add_job_routes
from signaling.jobs.service import FaceCheck
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.commands.jobs import JobProgress
from swapcast.config import Config
from swapcast.local_cluster import RedisServer

FINAL = ("completed", "failed", "cancelled")
WORKER_START_TIMEOUT_S = 90.0


# --------------------------------------------------------------------------- media


def write_face_clip(
    path: Path,
    seconds: float,
    *,
    size: tuple[int, int] = (1280, 720),
    fps: int = 30,
    keyframe_s: float = 2.0,
    audio: bool = True,
    preset: str = "veryfast",
) -> int:
    """A clip of Grace Hopper moving like a webcam subject (a 2 s loop of motion), H.264 with
    a keyframe every ``keyframe_s`` (B-frames with ``veryfast``) and an AAC tone track.
    Returns the number of video frames."""
    loop = moving_face_frames(grace_hopper(), 2 * fps, size)  # a few hundred MB at most, not the whole clip
    count = round(seconds * fps)
    gop = str(max(1, round(keyframe_s * fps)))
    with av.open(str(path), "w") as container:
        video = container.add_stream(
            "libx264", rate=fps, options={"preset": preset, "crf": "23", "g": gop, "keyint_min": gop, "sc_threshold": "0"}
        )
        video.width, video.height, video.pix_fmt = size[0], size[1], "yuv420p"
        video.codec_context.time_base = Fraction(1, fps)
        sound = container.add_stream("aac", rate=48_000, layout="stereo") if audio else None
        for number in range(count):
            frame = av.VideoFrame.from_ndarray(loop[number % len(loop)], format="rgb24")
            frame.pts, frame.time_base = number, Fraction(1, fps)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        if sound is not None:
            samples = round(count / fps * 48_000)
            for offset in range(0, samples, 1024):
                n = min(1024, samples - offset)
                tone = (0.1 * np.sin(2 * math.pi * 440.0 * (offset + np.arange(n)) / 48_000)).astype(np.float32)
                block = av.AudioFrame.from_ndarray(np.stack([tone, tone]), format="fltp", layout="stereo")
                block.sample_rate, block.pts, block.time_base = 48_000, offset, Fraction(1, 48_000)
                container.mux(sound.encode(block))
            container.mux(sound.encode(None))
    return count


def probe(path: Path) -> dict[str, Any]:
    """Frames (packets), video duration and audio codec of a file, for checks and reports."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = [p.pts for p in container.demux(stream) if p.pts is not None and p.size]
        audio = container.streams.audio[0].codec_context.name if container.streams.audio else None
    rate = stream.average_rate or Fraction(25)
    span = (max(pts) - min(pts)) * stream.time_base + 1 / rate if pts else 0
    return {"frames": len(pts), "duration_s": float(span), "audio": audio}


# --------------------------------------------------------------------------- local pieces


class JobsApi:
    """The jobs HTTP API alone (no face engine, no live sessions) on a free loopback port,
    served from its own thread and event loop; ``middlewares`` e.g. the auth middleware."""

    def __init__(self, redis_url: str, settings: JobSettings, face_exists: FaceCheck | None = None,
                 middlewares: Sequence[Middleware] = ()) -> None:
        self.redis_url, self.settings, self.face_exists = redis_url, settings, face_exists
        self.middlewares = list(middlewares)
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="jobs-api", daemon=True)
        self._runner: web.AppRunner | None = None

    def start(self) -> JobsApi:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=30)
        return self

    async def _start(self) -> None:
        app = web.Application(middlewares=self.middlewares)
        add_job_routes(app, JobService.connect(self.redis_url, self.settings, self.face_exists))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def close(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


class WorkerProcess:
    """``swapcast worker`` in its own process, output in a log file; ready once it says so."""

    def __init__(self, redis_url: str, name: str, env: dict[str, str], log_dir: Path,
                 cores: Sequence[int] | None = None) -> None:
        """``cores``: the CPUs it may run on (as a machine of its own with that many cores)."""
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        pin = (lambda: os.sched_setaffinity(0, set(cores))) if cores else None
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "swapcast.cli", "worker", "--redis", redis_url, "--name", name],
                env={**env, "PYTHONUNBUFFERED": "1"}, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=pin,
            )

    def wait_ready(self, timeout: float = WORKER_START_TIMEOUT_S) -> WorkerProcess:
        deadline = time.monotonic() + timeout
        while "rendering jobs from" not in self.log():
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker {self.name} did not start:\n{self.log()[-3000:]}")
            time.sleep(0.1)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL: the worker vanishes mid-task, as in a crash."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
        self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()


def worker_env(storage: Path, **settings: str) -> dict[str, str]:
    """The environment of local workers: this process's, minus its SWAPCAST_* settings, plus
    the shared storage and ``settings`` (``SWAPCAST_JOBS__CLAIM_TIMEOUT_S="3"``, ...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    env.update({"SWAPCAST_JOBS__STORAGE_DIR": str(storage), "SWAPCAST_SERVER__DATA_DIR": str(storage.parent), **settings})
    return env


class JobsClient:
    """A blocking client of the jobs API (urllib; uploads are read into memory)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.base = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        headers = {**self.headers, **(headers or {})}
        request = urllib.request.Request(self.base + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                status, data, kind = response.status, response.read(), response.headers.get_content_type()
        except urllib.error.HTTPError as exc:
            status, data, kind = exc.code, exc.read(), exc.headers.get_content_type()
        return status, json.loads(data) if kind == "application/json" else data

    def submit(
        self,
        video: Path | None = None,
        *,
        face_id: str | None = None,
        source: Path | None = None,
        path: str | None = None,
        priority: str | None = None,
        webhook_url: str | None = None,
        idempotency_key: str | None = None,
        extra: dict[str, str] | None = None,
    ) -> tuple[int, Any]:
        fields = {"face_id": face_id, "path": path, "priority": priority, "webhook_url": webhook_url, **(extra or {})}
        files = {name: (p.name, p.read_bytes()) for name, p in (("video", video), ("source", source)) if p is not None}
        body, content_type = _multipart({k: v for k, v in fields.items() if v is not None}, files)
        headers = {"Content-Type": content_type}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        return self.request("POST", "/api/v1/jobs", body, headers)

    def get(self, job_id: str) -> tuple[int, Any]:
        return self.request("GET", f"/api/v1/jobs/{job_id}")

    def cancel(self, job_id: str) -> tuple[int, Any]:
        return self.request("DELETE", f"/api/v1/jobs/{job_id}")

    def wait(
        self, job_id: str, timeout: float, until: Callable[[dict[str, Any]], bool] = lambda job: job["state"] in FINAL,
        on_poll: Callable[[dict[str, Any]], None] | None = None, interval: float = 0.2,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status, job = self.get(job_id)
            if status != 200:
                raise RuntimeError(f"GET job {job_id}: {status} {job}")
            if on_poll is not None:
                on_poll(job)
            if until(job):
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} still {job['state']} ({job['progress']}%) after {timeout:.0f} s")
            time.sleep(interval)


def _multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    boundary = "swapcast-" + secrets.token_hex(12)
    parts = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data) in files.items():
        head = (f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                "Content-Type: application/octet-stream\r\n\r\n")
        parts.append(head.encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


# --------------------------------------------------------------------------- the benchmark


def _run(client: JobsClient, clip: Path, frames: int, clip_s: float, storage: Path, label: str) -> dict[str, Any]:
    started = time.monotonic()
    status, job = client.submit(clip, face_id="astronaut")
    if status != 201:
        raise RuntimeError(f"submit failed: {status} {job}")
    uploaded = time.monotonic()
    split_at: list[float] = []
    with JobProgress(label) as bar:

        def show(job: dict[str, Any]) -> None:
            if job["chunks"]["total"] and not split_at:
                split_at.append(time.monotonic())
            bar.show(job)

        job = client.wait(job["id"], timeout=3600, on_poll=show, interval=0.25)
    ended = time.monotonic()
    if job["state"] != "completed":
        raise RuntimeError(f"{label}: job {job['state']}: {job['error']}")
    status, data = client.request("GET", job["output"])
    output = storage / f"bench-{label}.mp4"
    output.write_bytes(data)
    found = probe(output)
    total = ended - started
    return {
        "frames": frames,
        "chunks": job["chunks"]["total"],
        "end_to_end_s": round(total, 2),
        "end_to_end_vs_clip": round(total / clip_s, 2),
        "upload_s": round(uploaded - started, 2),
        "split_s": round((split_at[0] if split_at else ended) - uploaded, 2),
        "frames_per_s": round(frames / total, 1),
        "output_frames": found["frames"],
        "output_audio": found["audio"],
    }


def run_jobs_benchmark(config: Config, *, seconds: float = 60.0, as_json: bool = False,
                       cores_per_worker: int | None = None) -> int:
    """1, then 2 workers on one job. ``cores_per_worker``: each worker on cores of its own
    (worker i on cores i*N .. i*N+N-1), as on machines of N cores each; by default both
    share every core of this machine (a render already uses them all, so two workers there
    cannot be faster than one by more than what one leaves idle)."""
    from swapcast.config import ConfigError

    cpus = sorted(os.sched_getaffinity(0))
    if cores_per_worker is not None and not 1 <= 2 * cores_per_worker <= len(cpus):
        raise ConfigError(f"--cores-per-worker {cores_per_worker}: two workers need {2 * cores_per_worker} cores, "
                          f"this machine lets us use {len(cpus)}")
    size, fps = (1280, 720), 30
    with tempfile.TemporaryDirectory(prefix="swapcast-bench-jobs-") as folder:
        root = Path(folder)
        storage = root / "jobs"
        storage.mkdir()
        clip = root / "clip.mp4"
        started = time.monotonic()
        frames = write_face_clip(clip, seconds, size=size, fps=fps, keyframe_s=2.0)
        print(f"jobs bench: {seconds:.0f} s {size[0]}x{size[1]}@{fps} clip with audio ({frames} frames, "
              f"{clip.stat().st_size / 1e6:.1f} MB) written in {time.monotonic() - started:.1f} s; "
              f"{os.cpu_count()} CPU cores", flush=True)
        redis = RedisServer().start()
        api = JobsApi(redis.url, JobSettings(storage_dir=storage)).start()
        client = JobsClient(api.url)
        report: dict[str, Any] = {"clip": {"seconds": seconds, "size": list(size), "fps": fps, "frames": frames}, "runs": {}}
        config_file = root / "config.yaml"  # the workers run with this command's config (flags included)
        config_file.write_text(yaml.safe_dump(config.file_data()))
        env = worker_env(storage, SWAPCAST_CONFIG=str(config_file))
        try:
            for count in (1, 2):
                redis.flush()
                procs = [WorkerProcess(redis.url, f"bench-{count}-{n}", env, root,
                                       cores=cpus[n * cores_per_worker:(n + 1) * cores_per_worker] if cores_per_worker else None)
                         for n in range(count)]
                try:
                    for proc in procs:
                        proc.wait_ready()
                    run = _run(client, clip, frames, seconds, root, f"{count} worker(s)")
                finally:
                    for proc in procs:
                        proc.stop()
                report["runs"][str(count)] = run
                print(f"{count} worker(s): {run['frames_per_s']:.1f} frames/s, end to end {run['end_to_end_s']:.1f} s "
                      f"= {run['end_to_end_vs_clip']:.2f}x the clip's {seconds:.0f} s (upload {run['upload_s']:.1f} s, "
                      f"split {run['split_s']:.1f} s, {run['chunks']} chunks); output {run['output_frames']} frames, "
                      f"audio {run['output_audio']}", flush=True)
        finally:
            api.close()
            redis.close()
    one, two = report["runs"]["1"], report["runs"]["2"]
    speedup = one["end_to_end_s"] / two["end_to_end_s"]
    report["speedup_2_workers"] = round(speedup, 2)
    placement = (f"each worker on {cores_per_worker} core(s) of its own" if cores_per_worker
                 else f"both workers sharing all {len(cpus)} cores")
    print(f"two workers vs one ({placement}): {speedup:.2f}x faster end to end")
    print(f"target: a job on two workers >= 1.8x one worker: {speedup:.2f}x -> {'PASS' if speedup >= 1.8 else 'FAIL'}")
    if as_json:
        print(json.dumps(report, indent=2))
    return 0
