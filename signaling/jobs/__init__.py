"""Offline video jobs, control side: job records and chunk tasks on Redis Streams
(``JobQueue``), the HTTP API (``add_job_routes``) and signed webhooks. The media work
(split, render, assemble) is done by workers in ``streamer.jobs``."""

from signaling.jobs.model import (
    FINAL_STATES,
    PRIORITIES,
    Chunk,
    Job,
    JobState,
    Priority,
    Task,
)
from signaling.jobs.queue import JobQueue, JobQueueUnavailable
from signaling.jobs.routes import NO_REDIS, add_job_routes
from signaling.jobs.service import JobService, face_checker
from signaling.jobs.settings import JobSettings

__all__ = [
    "FINAL_STATES", "NO_REDIS", "PRIORITIES", "Chunk", "Job", "JobQueue", "JobQueueUnavailable", "JobService",
    "JobSettings", "JobState", "Priority", "Task", "add_job_routes", "face_checker",
]
