"""HTTP API of offline jobs.

- ``POST /api/v1/jobs``: ``multipart/form-data`` with a ``video`` file (or a ``path`` inside
  the job storage), a ``face_id`` (or a ``source`` photo file), optional ``priority``
  (high | normal | low) and ``webhook_url``, and to map faces ``faces_map`` (a JSON object
  {reference face id: face id | "keep"}: people named by a photo of them, the same person
  in every chunk) with ``unmapped`` (source | keep); or JSON with the same fields and a
  ``path``. Header ``Idempotency-Key``: the same key again returns the same job (200
  instead of 201). Answers the job.
- ``GET /api/v1/jobs`` (newest first, ``?limit=``), ``GET /api/v1/jobs/{id}``: state,
  progress %, error.
- ``DELETE /api/v1/jobs/{id}``: cancel (409 when it already ended).
- ``GET /api/v1/jobs/{id}/output`` (and ``HEAD``): the finished video (409 until it is
  completed). From a local storage folder it is sent as a file; from S3 it is streamed
  through this API, so a download needs nothing but the API: not the bucket's endpoint,
  which clients often cannot reach, nor a second credential beside the bearer token. Both
  answer ``Range: bytes=first-last`` (or ``first-``, ``-suffix``; ``If-Range``) alike, as
  players seek and downloads resume: 206 with only that part (a ranged GET from S3), 416
  ``Content-Range: bytes */size`` for a range past the end and for anything but one range
  (several ranges are refused rather than sent whole: aiohttp's ``FileResponse`` does so
  for local files, and one answer per request whatever the storage beats a second rule).

Every error is JSON ``{"error": reason}``: 400 bad field, 404 unknown job, 413 too large,
415 not a video (or not an image for ``source``), 503 without Redis or when it is down, and
when the job storage cannot be used (the reason says why: a missing bucket, an unreachable
endpoint, refused credentials).

Behind the auth middleware a job belongs to the token's subject: users see, cancel and
download only their own jobs (another user's job is a 404, like a missing one, so ids
cannot be probed), admins all of them; idempotency keys are per user. Without the
middleware (a bare jobs API, as the tests and the benchmark run it) there are no owners.
"""

from __future__ import annotations

import asyncio
import json
import logging
import mimetypes
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from aiohttp import BodyPartReader, MultipartReader, hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from signaling.auth import PRINCIPAL_KEY, Principal, visible
from signaling.http_input import BadInput, read_json_object
from signaling.jobs.model import Job
from signaling.jobs.queue import JobQueueUnavailable
from signaling.jobs.service import (
    JobRequestError,
    JobService,
    Submission,
    check_idempotency_key,
    parse_faces_map,
)
from signaling.jobs.storage import JobStorage, JobStorageError, StoredFile
from signaling.jobs.uploads import (
    IMAGE_SUFFIXES,
    MAX_SOURCE_BYTES,
    UploadRejected,
    check_source_photo,
    is_image,
    read_chunk,
    read_head,
    store_part,
    video_container,
    video_suffix,
)
from signaling.numbers import NumberError, is_ascii_number, parse_natural

NO_REDIS = "offline jobs need Redis: start the server with --redis URL (cluster.redis_url)"
TEXT_FIELDS = frozenset({"face_id", "path", "priority", "webhook_url", "faces_map", "unmapped"})
_FORM_SLACK_BYTES = 64 * 1024  # multipart boundaries and text fields on top of the files
_MAX_FIELD_BYTES = 4096
_SEND_BYTES = 1 << 20
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = logging.getLogger(__name__)


def add_job_routes(app: web.Application, service: JobService | None) -> None:
    """Mount the jobs API. ``service`` None (a node without Redis) answers every route 503."""
    api = _JobsApi(service)
    for method, path, handler in (
        ("POST", "/api/v1/jobs", api.submit),
        ("GET", "/api/v1/jobs", api.list),
        ("GET", "/api/v1/jobs/{job_id}", api.get),
        ("DELETE", "/api/v1/jobs/{job_id}", api.cancel),
        ("GET", "/api/v1/jobs/{job_id}/output", api.output),
        ("HEAD", "/api/v1/jobs/{job_id}/output", api.output),
    ):
        app.router.add_route(method, path, _json_errors(handler, service is not None))
    if service is not None:

        async def check(_: web.Application) -> None:
            """Check the storage, and remove scratch folders left by an API process killed mid-upload."""
            try:
                await service.check_storage()
            except JobStorageError as exc:
                log.error("offline jobs: %s; submissions and downloads answer 503 until it works", exc)
                return
            await asyncio.to_thread(service.storage.sweep_scratch, service.settings.claim_timeout_s)

        async def close(_: web.Application) -> None:
            await service.close()

        app.on_startup.append(check)
        app.on_cleanup.append(close)


def error(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _json_errors(handler: Handler, available: bool) -> Handler:
    async def guarded(request: web.Request) -> web.StreamResponse:
        if not available:
            return error(503, NO_REDIS)
        try:
            return await handler(request)
        except (JobRequestError, UploadRejected, BadInput) as exc:
            return error(exc.status, str(exc))
        except (JobQueueUnavailable, JobStorageError) as exc:
            return error(503, str(exc))

    return guarded


@dataclass
class _Form:
    """A submission as read from the request, files already stored in the job's folder."""

    fields: dict[str, str] = field(default_factory=dict)
    video: tuple[str, str] | None = None  # (its key in the storage, original name)
    source: str | None = None  # its key in the storage


class _JobsApi:
    def __init__(self, service: JobService | None) -> None:
        self.service = service

    @property
    def jobs(self) -> JobService:
        assert self.service is not None  # routes without a service answer 503 before this
        return self.service

    async def submit(self, request: web.Request) -> web.Response:
        owner = _owner(request)
        key = request.headers.get("Idempotency-Key")
        if key is not None:
            key = check_idempotency_key(key)
            earlier = await self.jobs.queue.job_for_key(key, owner)
            if earlier is not None:
                return _job_response(earlier, 200)
        limit = self.jobs.settings.max_upload_bytes
        if request.content_length is not None and request.content_length > limit + MAX_SOURCE_BYTES + _FORM_SLACK_BYTES:
            raise UploadRejected(413, _too_large(limit))
        await self._check_active(request.get(PRINCIPAL_KEY))
        await self.jobs.check_storage()
        job_id = self.jobs.new_job_id()
        try:
            form = await self._read(request, job_id)
            job, created = await self.jobs.submit(await self._submission(job_id, form, key, request.get(PRINCIPAL_KEY)))
        except BaseException:
            await self._discard(job_id)
            raise
        if not created:  # the same key raced in: the upload just stored is not needed
            await self._discard(job_id)
        return _job_response(job, 201 if created else 200)

    async def _check_active(self, caller: Principal | None) -> None:
        """A user's unfinished jobs are bounded, before their upload is read: each may store
        gigabytes, and the workers every user shares render them in turn."""
        most = self.jobs.settings.max_active_per_user
        if caller is None or caller.is_admin:
            return
        unfinished = [job for job in await self.jobs.queue.list(max(most, 200), caller.subject) if not job.final]
        if len(unfinished) >= most:
            raise UploadRejected(429, f"you have {len(unfinished)} unfinished jobs, the most one user may; "
                                      "wait for one to finish or cancel one")

    async def _discard(self, job_id: str) -> None:
        """Remove what a submission stored; a storage that fails here too keeps the first error."""
        try:
            await self.jobs.discard_files(job_id)
        except JobStorageError as exc:
            log.warning("the files of refused submission %s stay in the storage: %s", job_id, exc)

    async def _read(self, request: web.Request, job_id: str) -> _Form:
        if request.content_type == "application/json":
            data = await read_json_object(request, "of text fields")
            return _Form(fields={name: _text_field(name, value) for name, value in data.items()})
        if request.content_type != "multipart/form-data":
            raise UploadRejected(415, "send multipart/form-data with a 'video' file, or JSON naming a 'path'")
        form = _Form()
        async for part in _parts(request):
            if not isinstance(part, BodyPartReader):
                raise JobRequestError("nested multipart bodies are not supported")
            if part.name == "video":
                form.video = await self._store_video(part, job_id)
            elif part.name == "source":
                form.source = await self._store_source(part, job_id)
            elif part.name in TEXT_FIELDS:
                form.fields[part.name] = await _read_text(part)
            else:
                raise JobRequestError(f"unknown field {part.name!r}")
        return form

    async def _store_video(self, part: BodyPartReader, job_id: str) -> tuple[str, str]:
        head = await read_head(part)
        container = video_container(head)
        if container is None:
            raise UploadRejected(415, f"'video' ({part.filename or 'upload'}) is not a video file")
        name = Path(part.filename or "").name or "video"
        key = f"{job_id}/input{video_suffix(part.filename, container)}"
        limit = self.jobs.settings.max_upload_bytes
        await self._store(part, head, key, limit, lambda: _too_large(limit))
        return key, name

    async def _store_source(self, part: BodyPartReader, job_id: str) -> str:
        head = await read_head(part)
        if not is_image(head):
            raise UploadRejected(415, "'source' is not an image (JPEG, PNG, WebP or BMP)")
        suffix = Path(part.filename or "").suffix.lower()
        key = f"{job_id}/source{suffix if suffix in IMAGE_SUFFIXES else '.img'}"
        await self._store(part, head, key, MAX_SOURCE_BYTES, lambda: "'source' photo is larger than 10 MB",
                          check=check_source_photo)
        return key

    async def _store(self, part: BodyPartReader, head: bytes, key: str, limit: int, too_large: Callable[[], str],
                     check: Callable[[Path], None] | None = None) -> None:
        """Receive the part into a scratch file, ``check`` it, then put it into the storage as ``key``."""
        storage = self.jobs.storage
        with storage.scratch() as scratch:
            local = scratch / PurePosixPath(key).name
            await store_part(part, head, local, limit, too_large)
            if check is not None:
                await asyncio.to_thread(check, local)
            await asyncio.to_thread(storage.put_file, local, key)

    async def _submission(self, job_id: str, form: _Form, key: str | None, caller: Principal | None) -> Submission:
        fields = form.fields
        if (form.video is None) == ("path" not in fields):
            raise JobRequestError("give exactly one of a 'video' file upload or a 'path' inside the job storage")
        input_path, input_name = form.video or await self.jobs.stored_video(fields["path"], caller)
        return Submission(
            job_id=job_id, input_path=input_path, input_name=input_name, face_id=fields.get("face_id"),
            source_path=form.source, priority=fields.get("priority", "normal"), webhook_url=fields.get("webhook_url"),
            idempotency_key=key, caller=caller, faces_map=parse_faces_map(fields.get("faces_map")),
            unmapped=fields.get("unmapped", "source"),
        )

    async def list(self, request: web.Request) -> web.Response:
        try:
            limit = parse_natural(request.query.get("limit", "50"), "limit", minimum=1, maximum=500)
        except NumberError as exc:
            raise JobRequestError(exc.reason) from None
        caller = request.get(PRINCIPAL_KEY)
        owner = caller.subject if caller is not None and not caller.is_admin else None
        return web.json_response({"jobs": [job.public() for job in await self.jobs.queue.list(limit, owner)]})

    async def get(self, request: web.Request) -> web.Response:
        return _job_response(await self._job(request), 200)

    async def cancel(self, request: web.Request) -> web.Response:
        job = await self._job(request)
        state = await self.jobs.queue.cancel(job.id)
        if state != "cancelled":
            return error(409, f"job {job.id} already {state}; nothing to cancel")
        return _job_response(await self._job(request), 200)

    async def output(self, request: web.Request) -> web.StreamResponse:
        job = await self._job(request)
        if job.state != "completed":
            return error(409, f"job {job.id} is {job.state}: there is no output" + ("" if job.final else " yet"))
        await self.jobs.check_storage()
        storage, key = self.jobs.storage, job.output_path
        gone = error(404, f"the output of job {job.id} is no longer in the storage")
        if not key:
            return gone
        name = f"{Path(job.input_name).stem or job.id}-swapped{PurePosixPath(key).suffix}"
        headers = {"Content-Disposition": attachment(name)}
        path = storage.path(key)
        if path is not None:
            if not path.is_file():
                return gone
            if _empty_suffix(request):  # FileResponse would send it all as a 206
                stored = await asyncio.to_thread(storage.stat, key)
                if _if_range_holds(request, stored):
                    return _unsatisfiable(stored.size)
            return web.FileResponse(path, headers=headers)
        headers["Content-Type"] = mimetypes.guess_type(name)[0] or "application/octet-stream"
        try:
            return await _send(request, storage, key, headers)
        except FileNotFoundError:
            return gone

    async def _job(self, request: web.Request) -> Job:
        """The job the path names, if the caller may see it (else the same 404 as a missing one)."""
        job_id = request.match_info["job_id"]
        job = await self.jobs.queue.get(job_id)
        if job is None or not visible(request.get(PRINCIPAL_KEY), job.owner):
            raise JobRequestError(f"no job {job_id!r}", status=404)
        return job


def _owner(request: web.Request) -> str:
    caller = request.get(PRINCIPAL_KEY)
    return caller.subject if caller is not None else ""


async def _parts(request: web.Request) -> AsyncIterator[BodyPartReader | MultipartReader]:
    """The form's parts; aiohttp's parser errors on a malformed form (no boundary, bad part
    headers) become 400."""
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            yield part
    except (ValueError, AssertionError, HttpProcessingError) as exc:
        raise JobRequestError(f"malformed multipart body: {exc}") from None


class _Unsatisfiable(Exception):
    """The Range header names no part of the file: 416."""


def _requested_part(request: web.Request, stored: StoredFile) -> tuple[int, int] | None:
    """The bytes ``(start, stop)`` of ``stored`` the Range header asks for, None for all of
    it; by aiohttp's ``FileResponse`` rules for local files so both storages answer alike:
    one ``bytes=`` range, its last byte clamped to the end, a suffix longer than the file is
    all of it; several ranges, another unit or nonsense, and a first byte at or past the end,
    are ``_Unsatisfiable``. A range whose If-Range names another version is ignored."""
    if not _if_range_holds(request, stored):
        return None
    if _empty_suffix(request):
        raise _Unsatisfiable
    try:
        wanted = request.http_range
    except ValueError:
        raise _Unsatisfiable from None
    if wanted.start is None:  # no Range header
        return None
    if wanted.start < 0:  # the last -start bytes
        start, stop = max(0, stored.size + wanted.start), stored.size
    else:
        start, stop = wanted.start, min(stored.size if wanted.stop is None else wanted.stop, stored.size)
    if start >= stored.size:
        raise _Unsatisfiable
    return start, stop


def _empty_suffix(request: web.Request) -> bool:
    """``Range: bytes=-0`` asks for the last 0 bytes, which no file has (RFC 9110 14.1.1: a
    suffix range must be non-zero to be satisfiable); aiohttp reads it as ``bytes=0-``."""
    unit, _, ranges = request.headers.get(hdrs.RANGE, "").partition("=")
    first, dash, last = ranges.strip().partition("-")
    last = last.strip()
    return unit.strip() == "bytes" and dash == "-" and not first.strip() and is_ascii_number(last) and int(last) == 0


def _unsatisfiable(size: int) -> web.Response:
    return web.Response(status=416, headers={hdrs.CONTENT_RANGE: f"bytes */{size}"})


def attachment(name: str) -> str:
    """``Content-Disposition`` for a download named ``name`` (RFC 6266): a quoted ASCII
    ``filename`` (quotes, backslashes, controls and non-ASCII replaced by ``_``), plus the
    exact name UTF-8 percent-encoded as ``filename*`` whenever the two differ."""
    plain = "".join(c if " " <= c <= "~" and c not in '"\\' else "_" for c in name)
    if plain == name:
        return f'attachment; filename="{name}"'
    return f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(name, safe='', errors='replace')}"


def _if_range_holds(request: web.Request, stored: StoredFile) -> bool:
    """Whether a Range may be served (RFC 9110 13.1.5): no If-Range, or one naming this
    version of the file, by its ETag or a date not before its modification. ``FileResponse``
    compares dates only; outputs never change under their key, so both agree in practice."""
    value = request.headers.get(hdrs.IF_RANGE)
    if value is None:
        return True
    if value.startswith(('"', "W/")):
        return value == stored.etag  # a weak tag never matches (strong comparison)
    since = request.if_range
    return since is not None and stored.modified <= since


async def _send(request: web.Request, storage: JobStorage, key: str, headers: dict[str, str]) -> web.StreamResponse:
    """Stream ``key`` from a remote storage, or the part the Range header asks for (206), read
    in a thread and sent a block at a time; ``FileNotFoundError`` before anything is sent."""
    stored = await asyncio.to_thread(storage.stat, key)
    try:
        part = _requested_part(request, stored)
    except _Unsatisfiable:
        return _unsatisfiable(stored.size)
    response = web.StreamResponse(headers={**headers, hdrs.ACCEPT_RANGES: "bytes", hdrs.ETAG: stored.etag})
    response.last_modified = stored.modified
    start, stop = part or (0, stored.size)
    if part is not None:
        response.set_status(206)
        response.headers[hdrs.CONTENT_RANGE] = f"bytes {start}-{stop - 1}/{stored.size}"
    response.content_length = stop - start
    if request.method == "HEAD":
        await response.prepare(request)
        await response.write_eof()
        return response
    body, _ = await asyncio.to_thread(storage.open, key, start, None if part is None else stop)
    try:
        await response.prepare(request)
        while block := await asyncio.to_thread(body.read, _SEND_BYTES):
            await response.write(block)
    finally:
        body.close()
    await response.write_eof()
    return response


def _job_response(job: Job, status: int) -> web.Response:
    headers = {"Location": f"/api/v1/jobs/{job.id}"} if status == 201 else None
    return web.json_response(job.public(), status=status, headers=headers)


def _too_large(limit: int) -> str:
    return f"the video is larger than the {limit // (1024 * 1024)} MB limit (jobs.max_upload_mb)"


def _text_field(name: str, value: Any) -> str:
    if name not in TEXT_FIELDS:
        raise JobRequestError(f"unknown field {name!r}")
    if name == "faces_map" and isinstance(value, dict):
        return json.dumps(value)  # JSON bodies give it as an object, forms as JSON text
    if not isinstance(value, str):
        raise JobRequestError(f"{name} must be a string")
    if len(value.encode("utf-8", "surrogatepass")) > _MAX_FIELD_BYTES:  # as a form's text field
        raise JobRequestError(f"field {name!r} is too long")
    return value.strip()


async def _read_text(part: BodyPartReader) -> str:
    data = b""
    while chunk := await read_chunk(part, _MAX_FIELD_BYTES):
        data += chunk
        if len(data) > _MAX_FIELD_BYTES:
            raise JobRequestError(f"field {part.name!r} is too long")
    return data.decode("utf-8", errors="replace").strip()
