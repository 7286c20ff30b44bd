"""Upload handling for job submissions: stream a multipart part to a local file under a byte
limit (it goes into the job storage from there), after checking its first bytes are a video
container (or an image) signature.

The signature check is the API's only look at a video: it turns away what is plainly not
a video (415) without decoding anything, since the control plane never touches frames. A
file with a valid header but damaged content is accepted and fails in the worker with a
readable reason. A source photo's header is read too (never its pixels): one that declares
more pixels than the face library takes is refused here (413), not accepted and then failed
by the worker.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aiohttp import BodyPartReader
from aiohttp.http_exceptions import HttpProcessingError

HEAD_BYTES = 192  # enough for every signature below (MPEG-TS needs two 188-byte packets)
_READ_BYTES = 1 << 20
_ISO_BOXES = {b"ftyp", b"moov", b"mdat", b"free", b"wide", b"skip", b"pnot"}
# container name -> the extension its stored copy gets when the upload's own name has none
VIDEO_EXTENSIONS = {"mp4": ".mp4", "matroska": ".mkv", "avi": ".avi", "flv": ".flv", "mpegts": ".ts",
                    "mpeg": ".mpg", "ogg": ".ogv", "asf": ".wmv"}
KNOWN_VIDEO_SUFFIXES = frozenset({".mp4", ".m4v", ".mov", ".mkv", ".webm", ".avi", ".flv", ".ts", ".mts",
                                  ".mpg", ".mpeg", ".ogv", ".wmv"})
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp"})
MAX_SOURCE_BYTES = 10 * 1024 * 1024
MAX_SOURCE_SIDE = 4096  # px, the face library's limit for uploaded faces (streamer.faces)


class UploadRejected(Exception):
    """An upload the API refuses: ``status`` (413, 415, 400) and the reason shown."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def video_container(head: bytes) -> str | None:
    """The container family a file's first bytes announce, or None when it is not a video."""
    if head[4:8] in _ISO_BOXES:
        return "mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "matroska"
    if head.startswith(b"RIFF") and head[8:12] == b"AVI ":
        return "avi"
    if head.startswith(b"FLV"):
        return "flv"
    if len(head) > 188 and head[0] == 0x47 and head[188] == 0x47:
        return "mpegts"
    if head.startswith(b"\x00\x00\x01\xba"):
        return "mpeg"
    if head.startswith(b"OggS"):
        return "ogg"
    if head.startswith(b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"):
        return "asf"
    return None


def is_image(head: bytes) -> bool:
    """JPEG, PNG, WebP or BMP: the formats the engine reads source photos from."""
    return head.startswith((b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM")) or (
        head.startswith(b"RIFF") and head[8:12] == b"WEBP"
    )


def check_source_photo(path: Path) -> None:
    """``UploadRejected`` 415 for a photo whose header cannot be read, 413 for one that
    declares more than ``MAX_SOURCE_SIDE`` px a side (a decompression bomb among them)."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as header:
            width, height = header.size
    except Image.DecompressionBombError:
        raise UploadRejected(413, f"'source' declares too many pixels; the limit is {MAX_SOURCE_SIDE} px a side") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise UploadRejected(415, "'source' is not a readable image (JPEG, PNG, WebP or BMP)") from None
    if max(width, height) > MAX_SOURCE_SIDE:
        raise UploadRejected(413, f"'source' is {width}x{height} px; the limit is {MAX_SOURCE_SIDE} px a side")


def video_suffix(filename: str | None, container: str) -> str:
    """The stored input's extension: the upload's own when it names a video, else the sniffed one's."""
    suffix = Path(filename or "").suffix.lower()
    return suffix if suffix in KNOWN_VIDEO_SUFFIXES else VIDEO_EXTENSIONS[container]


async def read_chunk(part: BodyPartReader, size: int) -> bytes:
    """The part's next bytes; a body that ends inside the part (no closing delimiter) or
    breaks aiohttp's parser otherwise is the client's fault: ``UploadRejected`` 400."""
    try:
        return await part.read_chunk(size)
    except (ValueError, AssertionError, HttpProcessingError) as exc:
        raise UploadRejected(400, f"malformed multipart body: {exc}") from None


async def read_head(part: BodyPartReader) -> bytes:
    """The part's first bytes (up to ``HEAD_BYTES`` or its end); the rest stays unread."""
    head = b""
    while len(head) < HEAD_BYTES:
        chunk = await read_chunk(part, HEAD_BYTES - len(head))
        if not chunk:
            break
        head += chunk
    return head


async def store_part(
    part: BodyPartReader, head: bytes, destination: Path, limit: int, too_large: Callable[[], str]
) -> int:
    """Write ``head`` and the rest of ``part`` to ``destination``, a file in a scratch folder
    (one an error leaves half-written goes with that folder); more than ``limit`` bytes ->
    ``UploadRejected(413, too_large())``."""
    size = len(head)
    with destination.open("wb") as handle:
        handle.write(head)
        while chunk := await read_chunk(part, _READ_BYTES):
            size += len(chunk)
            if size > limit:
                raise UploadRejected(413, too_large())
            handle.write(chunk)
    return size
