"""``JobService``: what the jobs API does, apart from HTTP — validating a submission, keeping
the job's files in the shared storage, creating the job once per idempotency key."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from urllib.parse import quote, urlparse

from gpu.errors import SwapcastError
from signaling.auth import Principal, visible
from signaling.jobs.model import PRIORITIES, Job
from signaling.jobs.queue import JobQueue, JobQueueUnavailable, now
from signaling.jobs.settings import JobSettings
from signaling.jobs.storage import CANNOT_BE_A_FILE
from signaling.jobs.uploads import HEAD_BYTES, video_container
from signaling.push_policy import PushPolicy
from signaling.registry import Registry, RegistryUnavailable
from signaling.stream_keys import StreamKeyError

FaceCheck = Callable[[str, Principal | None], Awaitable[bool]]  # (face_id, caller): may they wear it?
MAX_KEY_LENGTH = 200
USER_FOLDER = "users"  # users name stored videos under users/<their subject>/ (or their own jobs' folders)


class JobRequestError(SwapcastError):
    """A submission field is missing or wrong (HTTP 400; 415 when the file is not a video)."""

    def __init__(self, reason: str, status: int = 400) -> None:
        super().__init__(reason)
        self.status = status


@dataclass(frozen=True)
class Submission:
    """A checked-in request: the video is already in the storage (uploaded or named)."""

    job_id: str
    input_path: str  # its key in the storage
    input_name: str
    face_id: str | None
    source_path: str | None
    priority: str = "normal"
    webhook_url: str | None = None
    idempotency_key: str | None = None
    caller: Principal | None = None  # None: a bare API without auth (no owners)
    faces_map: dict[str, str] = field(default_factory=dict)  # reference face id -> face id or "keep"
    unmapped: str = "source"  # people the map does not name: the job's face, or kept

    @property
    def owner(self) -> str:
        return self.caller.subject if self.caller is not None else ""


class JobService:
    def __init__(self, queue: JobQueue, settings: JobSettings, face_exists: FaceCheck | None = None,
                 destinations: PushPolicy | None = None) -> None:
        self.queue = queue
        self.settings = settings
        self.storage = settings.open_storage()
        self.face_exists = face_exists  # None: face ids are checked by the worker only
        self.destinations = destinations or PushPolicy()  # where users' webhooks may point
        self._storage_answered = False

    @classmethod
    def connect(cls, redis_url: str, settings: JobSettings, face_exists: FaceCheck | None = None,
                destinations: PushPolicy | None = None) -> JobService:
        return cls(JobQueue.from_url(redis_url, claim_timeout_s=settings.claim_timeout_s), settings, face_exists,
                   destinations)

    async def close(self) -> None:
        await self.queue.close()

    async def check_storage(self) -> None:
        """``JobStorageError`` (the API's 503) until the storage has answered once: a broken
        bucket is reported before an upload is read, not after. Later failures surface from
        the operations themselves, so a working storage costs no extra request."""
        if not self._storage_answered:
            await asyncio.to_thread(self.storage.check)
            self._storage_answered = True

    @staticmethod
    def new_job_id() -> str:
        return "job_" + secrets.token_hex(8)

    async def discard_files(self, job_id: str) -> None:
        await asyncio.to_thread(self.storage.delete_folder, job_id)

    async def stored_video(self, path: str, caller: Principal | None = None) -> tuple[str, str]:
        """A video named by a path inside the storage: (its key, name). Refuses paths outside
        the storage, missing files, files that are not videos, and for a user any path
        outside their own prefix (``user_may_read``) with the same answer as a missing file."""
        missing = JobRequestError(f"path {path!r}: no such file in the job storage")
        try:
            key = self.storage.key_of(path)
            if not await self.user_may_read(key, caller):
                raise missing
            head = await asyncio.to_thread(self.storage.read_head, key, HEAD_BYTES)
        except ValueError as exc:
            raise JobRequestError(f"path {path!r} {exc}") from None
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise missing from None
        except OSError:  # a file that cannot be read
            raise JobRequestError(f"path {path!r} {CANNOT_BE_A_FILE}") from None
        if video_container(head) is None:
            raise JobRequestError(f"path {path!r} is not a video file", status=415)
        return key, PurePosixPath(key).name

    async def user_may_read(self, key: str, caller: Principal | None) -> bool:
        """A storage key a caller may name: anything for admins (and without auth); for a
        user, their folder ``users/<subject>/`` or the folder of one of their own jobs,
        resolved through the owner-aware job lookup. Everything else in the storage (other
        users' uploads and outputs, scratch files) is not theirs to read."""
        if caller is None or caller.is_admin:
            return True
        if key.startswith(user_folder(caller.subject)):
            return True
        folder = next(iter(PurePosixPath(key).parts), "")  # "" names the storage's root: no folder
        job = await self.queue.get(folder) if folder.startswith("job_") else None
        return job is not None and visible(caller, job.owner)

    async def submit(self, submission: Submission) -> tuple[Job, bool]:
        """Create the job (``True``) or return the one its idempotency key made earlier."""
        await self._check(submission)
        stamp = now()
        job = Job(
            id=submission.job_id, state="pending", priority=submission.priority,  # type: ignore[arg-type]
            input_path=submission.input_path, input_name=submission.input_name, face_id=submission.face_id,
            source_path=submission.source_path, webhook_url=submission.webhook_url,
            idempotency_key=submission.idempotency_key, created=stamp, updated=stamp, owner=submission.owner,
            webhook_unrestricted=submission.caller is None or submission.caller.is_admin,
            faces_map=json.dumps(submission.faces_map) if submission.faces_map else None, unmapped=submission.unmapped,
        )
        return await self.queue.create(job)

    async def _check(self, submission: Submission) -> None:
        if submission.face_id is not None and submission.source_path is not None:
            raise JobRequestError("give exactly one of 'face_id' (a stored or sample face) or 'source' (a photo upload)")
        if submission.unmapped not in ("source", "keep"):
            raise JobRequestError(f"unmapped must be 'source' or 'keep', not {submission.unmapped!r}")
        if submission.face_id is None and submission.source_path is None and not (
                submission.faces_map and submission.unmapped == "keep"):
            raise JobRequestError("give exactly one of 'face_id' (a stored or sample face) or 'source' (a photo upload)"
                                  " (without either, a 'faces_map' with unmapped 'keep')")
        for face_id in {*submission.faces_map.keys(), *submission.faces_map.values()} - {"keep"}:
            if self.face_exists is not None and not await self.face_exists(face_id, submission.caller):
                raise JobRequestError(f"faces_map: unknown face_id {face_id!r}")
        if submission.priority not in PRIORITIES:
            raise JobRequestError(f"priority must be one of {', '.join(PRIORITIES)}, not {submission.priority!r}")
        if submission.webhook_url is not None and not _http_url(submission.webhook_url):
            raise JobRequestError(f"webhook_url must be an absolute http(s) URL, not {submission.webhook_url!r}")
        caller = submission.caller
        if submission.webhook_url is not None and caller is not None and not caller.is_admin:
            try:  # a worker will POST there: not into the operator's network for a user
                await self.destinations.check_new(submission.webhook_url, "webhook_url")
            except StreamKeyError as exc:
                raise JobRequestError(str(exc)) from None
        if (
            submission.face_id is not None
            and self.face_exists is not None
            and not await self.face_exists(submission.face_id, submission.caller)
        ):
            raise JobRequestError(f"unknown face_id {submission.face_id!r}")


MAX_MAPPED_PEOPLE = 16
_FACE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_PERSON_ID = re.compile(r"person-\d+")


def parse_faces_map(text: str | None) -> dict[str, str]:
    """A job's ``faces_map`` (JSON text: {reference face id: face id | "keep"}), checked: a
    job names people by a photo of them, as their ids would differ from chunk to chunk."""
    if not text:
        return {}
    try:
        mapping = json.loads(text)
    except ValueError:
        raise JobRequestError("faces_map must be a JSON object {reference face id: face id or \"keep\"}") from None
    if not isinstance(mapping, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items()):
        raise JobRequestError("faces_map must be a JSON object {reference face id: face id or \"keep\"}")
    if len(mapping) > MAX_MAPPED_PEOPLE:
        raise JobRequestError(f"faces_map names {len(mapping)} people; at most {MAX_MAPPED_PEOPLE}")
    for person, face in mapping.items():
        if _PERSON_ID.fullmatch(person):
            raise JobRequestError(f"faces_map: {person} is a session's or scan's id; a job names people by the face id "
                                  "of a reference photo of them (the same person in every chunk)")
        if person == "keep" or not _FACE_ID.fullmatch(person) or (face != "keep" and not _FACE_ID.fullmatch(face)):
            raise JobRequestError(f"faces_map: {person[:80]!r} -> {face[:80]!r}: expected a reference face id -> a face id "
                                  "or 'keep'")
    return mapping


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


def user_folder(subject: str) -> str:
    """The storage prefix a user's own videos live under (the subject quoted: no ``/`` or ``..``)."""
    return f"{USER_FOLDER}/{quote(subject, safe='')}/"


def face_checker(sample_ids: Iterable[str], registry: Registry) -> FaceCheck:
    """A ``FaceCheck`` for a node: a sample face, or one stored in the cluster registry that
    the caller may see (their own, or everyone's): another user's face is an unknown one."""
    samples = frozenset(sample_ids)

    async def exists(face_id: str, caller: Principal | None) -> bool:
        if face_id in samples:
            return True
        try:
            record = await registry.get_face(face_id)
        except RegistryUnavailable as exc:
            raise JobQueueUnavailable(str(exc)) from exc
        return record is not None and visible(caller, record.owner, shared_when_unowned=True)

    return exists
