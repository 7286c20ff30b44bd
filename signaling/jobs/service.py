"""``JobService``: what the jobs API does, apart from HTTP — validating a submission, laying
out the job's folder in the shared storage, creating the job once per idempotency key."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from gpu.errors import SwapcastError
from signaling.jobs.model import PRIORITIES, Job
from signaling.jobs.queue import JobQueue, JobQueueUnavailable, now
from signaling.jobs.settings import JobSettings
from signaling.jobs.uploads import sniff_file
from signaling.registry import Registry, RegistryUnavailable

FaceCheck = Callable[[str], Awaitable[bool]]
MAX_KEY_LENGTH = 200


class JobRequestError(SwapcastError):
    """A submission field is missing or wrong (HTTP 400; 415 when the file is not a video)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Submission:
    """A checked-in request: the video is already in the storage (uploaded or named)."""

    job_id: str
    input_path: str  # relative to the storage
    input_name: str
    face_id: str | None
    source_path: str | None
    priority: str = "normal"
    webhook_url: str | None = None
    idempotency_key: str | None = None
    owner: str = ""


class JobService:
    def __init__(self, queue: JobQueue, settings: JobSettings, face_exists: FaceCheck | None = None) -> None:
        self.queue = queue
        self.settings = settings
        self.face_exists = face_exists  # None: face ids are checked by the worker only

    @classmethod
    def connect(cls, redis_url: str, settings: JobSettings, face_exists: FaceCheck | None = None) -> JobService:
        return cls(JobQueue.from_url(redis_url, claim_timeout_s=settings.claim_timeout_s), settings, face_exists)

    async def close(self) -> None:
        await self.queue.close()

    @staticmethod
    def new_job_id() -> str:
        return "job_" + secrets.token_hex(8)

    def job_folder(self, job_id: str) -> Path:
        """The job's own folder in the storage (uploads, chunks, output); created on demand."""
        folder = self.settings.storage_dir / job_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def discard_folder(self, job_id: str) -> None:
        shutil.rmtree(self.settings.storage_dir / job_id, ignore_errors=True)

    def stored_video(self, path: str) -> tuple[str, str]:
        """A video named by a path inside the storage: (path relative to the storage, name).
        Refuses paths outside the storage, missing files and files that are not videos."""
        root = self.settings.storage_dir.resolve()
        candidate = Path(path)
        try:
            resolved = (root / candidate).resolve()
            if candidate.is_absolute() or not resolved.is_relative_to(root):
                raise JobRequestError(f"path {path!r} must be relative to the job storage and stay inside it")
            if not resolved.is_file():
                raise JobRequestError(f"path {path!r}: no such file in the job storage")
            container = sniff_file(resolved)
        except (OSError, ValueError):  # a NUL byte, a name too long, a file that cannot be read
            raise JobRequestError(f"path {path!r} cannot be used as a file in the job storage") from None
        if container is None:
            raise JobRequestError(f"path {path!r} is not a video file", status=415)
        return str(resolved.relative_to(root)), resolved.name

    async def submit(self, submission: Submission) -> tuple[Job, bool]:
        """Create the job (``True``) or return the one its idempotency key made earlier."""
        await self._check(submission)
        stamp = now()
        job = Job(
            id=submission.job_id, state="pending", priority=submission.priority,  # type: ignore[arg-type]
            input_path=submission.input_path, input_name=submission.input_name, face_id=submission.face_id,
            source_path=submission.source_path, webhook_url=submission.webhook_url,
            idempotency_key=submission.idempotency_key, created=stamp, updated=stamp, owner=submission.owner,
        )
        return await self.queue.create(job)

    async def _check(self, submission: Submission) -> None:
        if (submission.face_id is None) == (submission.source_path is None):
            raise JobRequestError("give exactly one of 'face_id' (a stored or sample face) or 'source' (a photo upload)")
        if submission.priority not in PRIORITIES:
            raise JobRequestError(f"priority must be one of {', '.join(PRIORITIES)}, not {submission.priority!r}")
        if submission.webhook_url is not None and not _http_url(submission.webhook_url):
            raise JobRequestError(f"webhook_url must be an absolute http(s) URL, not {submission.webhook_url!r}")
        if (
            submission.face_id is not None
            and self.face_exists is not None
            and not await self.face_exists(submission.face_id)
        ):
            raise JobRequestError(f"unknown face_id {submission.face_id!r}")

    def output_file(self, job: Job) -> Path | None:
        return self.settings.path(job.output_path) if job.output_path else None


def _http_url(text: str) -> bool:
    try:
        url = urlparse(text)
        url.port  # noqa: B018 - raises ValueError for a port that is not one
        return url.scheme in ("http", "https") and bool(url.hostname)
    except ValueError:  # e.g. an unclosed IPv6 bracket, a bad port
        return False


def check_idempotency_key(key: str) -> str:
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise JobRequestError(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters")
    return key


def face_checker(sample_ids: Iterable[str], registry: Registry) -> FaceCheck:
    """A ``FaceCheck`` for a node: a sample face, or one stored in the cluster registry."""
    samples = frozenset(sample_ids)

    async def exists(face_id: str) -> bool:
        if face_id in samples:
            return True
        try:
            return await registry.get_face(face_id) is not None
        except RegistryUnavailable as exc:
            raise JobQueueUnavailable(str(exc)) from exc

    return exists
