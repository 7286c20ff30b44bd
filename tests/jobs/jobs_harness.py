"""What the jobs tests share besides fixtures: an independent probe (the ffprobe CLI, so the
output is not judged by the code that wrote it) and blocking looks into the queue."""

from __future__ import annotations

import asyncio
import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from signaling.jobs import JobQueue

SECRET = "jobs-test-webhook-secret"
CLAIM_TIMEOUT_S = 3.0
FPS = 15


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
