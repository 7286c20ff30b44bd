"""``POST /api/v1/provenance/verify``: the verifier over HTTP, for an uploaded image or video.

The body is the file itself (raw, with ``?name=clip.mp4`` or a Content-Type that says what
it is) or a multipart field ``file``. At most ``MAX_UPLOAD_BYTES``: a bigger upload is a 413
before it is all read. The answer is the CLI's ``--json`` object."""

from __future__ import annotations

import asyncio
import mimetypes
import tempfile
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from gpu.errors import SwapcastError
from streamer.media.images import IMAGE_EXTENSIONS, VIDEO_EXTENSIONS
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.verify import verify

MAX_UPLOAD_BYTES = 200 * 1024 * 1024
_SUFFIX_OF_TYPE = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "video/mp4": ".mp4",
                   "video/quicktime": ".mov", "video/x-matroska": ".mkv", "video/webm": ".webm", "video/x-flv": ".flv"}
MAX_CONCURRENT = 2  # verifications run at once per node (each decodes and analyses; the rest wait)
SETTINGS_KEY = web.AppKey("provenance", ProvenanceSettings)
SLOTS_KEY = web.AppKey("provenance_slots", asyncio.Semaphore)


class UploadError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def add_provenance_routes(app: web.Application, settings: ProvenanceSettings) -> None:
    app[SETTINGS_KEY] = settings
    app[SLOTS_KEY] = asyncio.Semaphore(MAX_CONCURRENT)
    app.router.add_post("/api/v1/provenance/verify", verify_upload)


async def verify_upload(request: web.Request) -> web.Response:
    try:
        with tempfile.TemporaryDirectory(prefix="swapcast-verify-") as folder:
            path = await _save_upload(request, Path(folder))
            try:
                async with request.app[SLOTS_KEY]:
                    verdict = await asyncio.to_thread(verify, path, request.app[SETTINGS_KEY])
            except SwapcastError as exc:  # unreadable, too small (422) or too many pixels (413)
                raise UploadError(getattr(exc, "status", 422), str(exc).replace(str(path), path.name)) from None
            answer = verdict.to_dict()
            answer["source"] = path.name
            return web.json_response(answer)
    except UploadError as exc:
        return web.json_response({"error": str(exc)}, status=exc.status)


async def _save_upload(request: web.Request, folder: Path) -> Path:
    name = request.query.get("name")
    if request.content_type.startswith("multipart/"):
        try:
            reader = await request.multipart()
            while (part := await reader.next()) is not None:
                if getattr(part, "name", None) == "file":
                    path = folder / ("upload" + _suffix(name or getattr(part, "filename", None), part.headers.get("Content-Type")))
                    await _write_limited(part.read_chunk, path)
                    return path
                await part.release()
        except (ValueError, AssertionError, HttpProcessingError) as exc:
            raise UploadError(400, f"malformed multipart body: {exc}") from None
        raise UploadError(400, 'the multipart upload needs a field named "file"')
    if request.content_length is not None and request.content_length > MAX_UPLOAD_BYTES:
        raise UploadError(413, _too_big())
    path = folder / ("upload" + _suffix(name, request.content_type))
    await _write_limited(request.content.read, path)
    return path


def _suffix(name: str | None, content_type: str | None) -> str:
    """The file type, from the upload's name or else its Content-Type."""
    suffix = Path(name).suffix.lower() if name else ""
    if not suffix and content_type:
        suffix = _SUFFIX_OF_TYPE.get(content_type.split(";")[0].strip().lower()) or mimetypes.guess_extension(content_type) or ""
    if suffix not in IMAGE_EXTENSIONS | VIDEO_EXTENSIONS:
        raise UploadError(415, "say what the upload is: ?name=FILE.mp4 (or .jpg, .png, .mov, ...) or a Content-Type "
                               "such as image/jpeg or video/mp4")
    return suffix


async def _write_limited(read_chunk, path: Path) -> None:
    total = 0
    with open(path, "wb") as out:
        while chunk := await read_chunk(256 * 1024):
            total += len(chunk)
            if total > MAX_UPLOAD_BYTES:
                raise UploadError(413, _too_big())
            out.write(chunk)
    if total == 0:
        raise UploadError(400, "the upload is empty")


def _too_big() -> str:
    return f"the upload is larger than the {MAX_UPLOAD_BYTES // (1024 * 1024)} MB limit of the verifier"
