"""The node's face library: the source faces live sessions can wear.

Two kinds of entries: the sample faces that ship inside installed wheels
(``streamer.samples.SAMPLE_FACES``, registered lazily the first time they are needed) and
faces uploaded over the API. Uploads are kept in the registry's face store (in-process on
the embedded node, Redis in a cluster) as the engine's serialised source, so any node can
use a face uploaded through another one without detecting it again. A face may be made of
several photos of one person (at most ``max_photos_per_face``, in one upload or added
later): their sources are merged (``streamer.face_photos``), and the face keeps its photos
(cropped to the head) to be made again when a photo is added or a node runs another
swapper than the one that made it. Each owner keeps at most
``MAX_FACES_PER_OWNER`` (the next upload is a 409 until they delete one: evicting the oldest
would let one user wipe everyone's faces); each node caches the ones it used last. Stream keys name
a photo by path; those are registered on demand and cached, but never listed.

Registration (detection, landmarks, identity, the swapper's own data) takes ~100 ms, so it
runs on the library's own single worker thread; the engine's still-image analysis is
serialised anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import secrets
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

import cv2
import numpy as np

from gpu.engine import FaceEngine, SourceFace
from gpu.errors import ImageError, ManyFacesError, NoFaceError, SwapcastError
from gpu.source_codec import SourceCodecError
from signaling.http_input import BadInput, display_name
from signaling.registry import FaceLimitError, FaceRecord, MemoryRegistry, Registry
from signaling.stream_keys import StreamConfig
from streamer.face_photos import kept_photo, merged, register_photos, remade_sources
from streamer.media.images import HEADER_CHECKED_FORMATS
from streamer.pipeline.people_map import KEEP, MappedSource, PeopleMap, Reference, is_person_id
from streamer.samples import SAMPLE_FACES

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_UPLOAD_PIXELS = 4096  # per side
MAX_FACES_PER_OWNER = 64  # uploads one user keeps in the face store; samples do not count
MAX_PHOTOS_PER_FACE = 8  # photos of one person one face is made of
# uploads are analysed one at a time on the library's thread, which also loads the faces
# sessions start with: a user has one in analysis at a time, the node a few
MAX_UPLOADS_IN_ANALYSIS = 4
MAX_CACHED_FACES = 64  # decoded uploads a node keeps in memory
THUMBNAIL_SIZE = 160
MAX_NAME_CHARS = 80
UPLOAD_PREFIX = "u-"


class FaceLibraryError(SwapcastError):
    """A face cannot be added or found; ``reason`` is the message shown to the user."""

    @property
    def reason(self) -> str:
        return str(self)


class NotAnImageError(FaceLibraryError, ImageError):
    """The upload is not a readable image."""


class ImageTooLargeError(FaceLibraryError):
    """The upload is over the byte or pixel limit."""


class NoFaceInImageError(FaceLibraryError, NoFaceError):
    """The upload shows no usable face."""


class SeveralFacesError(FaceLibraryError, ManyFacesError):
    """The upload shows more than one face (a source must show exactly one)."""


class TooManyFacesError(FaceLibraryError):
    """The owner already keeps as many faces as allowed; deleting one makes room."""

    status = 409


class TooManyPhotosError(FaceLibraryError):
    """More photos than one face is made of: in one upload (413) or added to a face (409)."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.status = status


class PhotosNotKeptError(FaceLibraryError):
    """The face was stored before faces kept their photos: it cannot be made again."""

    status = 409


class UploadsBusyError(FaceLibraryError):
    """Too many uploads in analysis: the caller's own (429) or the node's (503)."""

    def __init__(self, reason: str, status: int) -> None:
        super().__init__(reason)
        self.status = status


class UnknownFaceError(FaceLibraryError):
    """No face with that id in the library."""


class BadFaceNameError(FaceLibraryError):
    """A face name that is empty, too long or holds control characters."""

    status = 400


class SampleFaceError(FaceLibraryError):
    """The sample faces ship with the installation: nobody renames or deletes them."""

    status = 403


@dataclass(frozen=True)
class FaceEntry:
    id: str
    name: str
    thumbnail_jpeg: bytes = field(repr=False)
    source: SourceFace = field(repr=False)
    sample: bool = False
    owner: str = ""
    photo_count: int = 1  # the photos of one person its source is merged from


@dataclass(frozen=True)
class FaceListing:
    """A face as listed: no pixels, no source."""

    id: str
    name: str
    owner: str = ""
    photo_count: int = 1


@dataclass(frozen=True)
class _Registered:
    """Photos registered for one face (on the library's thread)."""

    sources: list[SourceFace]
    kept: list[bytes]  # each photo as the face keeps it (``face_photos.kept_photo``)
    thumbnail: bytes  # the first photo's


@dataclass(frozen=True)
class FaceThumbnail:
    """A face's thumbnail and whose face it is (to check a request without decoding it)."""

    jpeg: bytes = field(repr=False)
    owner: str = ""


def face_name(value: object) -> str:
    """A name as given by a user, trimmed; ``BadFaceNameError`` saying what is wrong (the
    rule every name a user gives follows: ``signaling.http_input.display_name``)."""
    try:
        return display_name(value, "name", MAX_NAME_CHARS)
    except BadInput as exc:
        raise BadFaceNameError(exc.reason) from None


def photo_labels(count: int, filenames: Sequence[str | None] = ()) -> list[str]:
    """How errors name each of ``count`` photos: "the photo" when there is one, else
    "photo N"; with its file's name when it has one."""
    names = [*filenames, *([None] * count)][:count]
    numbers = ["the photo"] if count == 1 else [f"photo {n}" for n in range(1, count + 1)]
    return [number + (f" ({_printable(name)})" if name else "") for number, name in zip(numbers, names, strict=True)]


def _printable(filename: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in filename)[:MAX_NAME_CHARS]


def file_face_name(filename: str | None) -> str | None:
    """The name an upload gets from its file: the stem, shortened to the limit; ``None``
    when nothing usable is left."""
    if not filename:
        return None
    stem = filename.replace("\\", "/").rsplit("/", 1)[-1]
    stem = stem.rsplit(".", 1)[0] if "." in stem.lstrip(".") else stem
    try:
        return face_name(stem[:MAX_NAME_CHARS])
    except BadFaceNameError:
        return None


class FaceLibrary:
    def __init__(self, engine: FaceEngine, store: Registry | None = None,
                 max_faces_per_owner: int = MAX_FACES_PER_OWNER, max_photos_per_face: int = MAX_PHOTOS_PER_FACE) -> None:
        self.engine = engine
        self.store = store or MemoryRegistry()
        self.max_faces_per_owner = max_faces_per_owner
        self.max_photos_per_face = max_photos_per_face
        self._samples: dict[str, FaceEntry] = {}
        self._uploads: OrderedDict[str, FaceEntry] = OrderedDict()  # decoded uploads, most recent last
        self._by_path: dict[tuple[tuple[str, float], ...], FaceEntry] = {}
        self._lock = threading.Lock()  # guards the dicts (worker thread + event loop)
        self._samples_ready: asyncio.Future | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="face-library")
        self._analysing: Counter[str] = Counter()  # uploads in analysis, by owner

    # -- event-loop API -------------------------------------------------------------------

    async def list(self) -> list[FaceListing]:
        """Samples first (in ``SAMPLE_FACES`` order), then uploads, oldest first."""
        await self._ensure_samples()
        with self._lock:
            samples = [FaceListing(e.id, e.name, e.owner) for e in self._samples.values()]
        return [*samples, *(FaceListing(r.id, r.name, r.owner, r.photo_count) for r in await self.store.faces())]

    async def get(self, face_id: str) -> FaceEntry:
        if face_id in SAMPLE_FACES:
            await self._ensure_samples()
        with self._lock:
            entry = self._samples.get(face_id) or self._uploads.get(face_id)
            if entry is not None and not entry.sample:
                self._uploads.move_to_end(face_id)
        if entry is not None:
            return entry
        record = await self.store.get_face(face_id) if face_id.startswith(UPLOAD_PREFIX) else None
        if record is None:
            raise UnknownFaceError(f"no face with id {face_id!r}")
        try:
            source = await self._run(self.engine.source_from_bytes, record.source)
        except SourceCodecError as exc:  # another swapper's (or damaged): made again from its photos
            source = await self._remade(face_id, exc)
        entry = FaceEntry(record.id, record.name, record.thumbnail_jpeg, source, owner=record.owner,
                          photo_count=record.photo_count)
        self._cache(entry)
        return entry

    async def _remade(self, face_id: str, why: SourceCodecError) -> SourceFace:
        record = await self.store.get_face(face_id, photos=True)
        if record is None:
            raise UnknownFaceError(f"no face with id {face_id!r}")
        if not record.photos:
            raise PhotosNotKeptError(f"face {face_id!r} cannot be used here ({why}) and was stored before faces "
                                     "kept their photos; upload its photos again") from None
        sources = await self._run(remade_sources, self.engine, record.photos)
        return merged(self.engine, sources)

    async def add(self, photos: bytes | Sequence[bytes], name: str | None = None, owner: str = "",
                  filenames: Sequence[str | None] = ()) -> FaceEntry:
        """Register uploaded photos of one person as one face and store it for every node;
        raises a ``FaceLibraryError`` saying what is wrong (and which photo)."""
        photos = [photos] if isinstance(photos, bytes) else list(photos)
        if len(photos) > self.max_photos_per_face:
            raise TooManyPhotosError(f"{len(photos)} photos in one upload; a face is made of at most "
                                     f"{self.max_photos_per_face}", 413)
        labels = photo_labels(len(photos), filenames)
        for data, label in zip(photos, labels, strict=True):
            _naming(label, len(photos) > 1, check_size, data)
        if name is not None:
            name = face_name(name)
        if len(await self.store.faces(owner)) >= self.max_faces_per_owner:  # before the ~100 ms detection
            raise self._full()
        with self._analysis(owner):
            entry, kept = await self._run(self._register_upload, photos, name, owner, labels)
            data = await self._run(self.engine.source_to_bytes, entry.source)
        try:  # checked again where it is stored: another node may have stored one meanwhile
            await self.store.put_face(FaceRecord(entry.id, entry.name, entry.thumbnail_jpeg, data, owner=owner,
                                                 photos=tuple(kept), photo_count=len(kept)),
                                      owner_limit=self.max_faces_per_owner)
        except FaceLimitError:
            raise self._full() from None
        self._cache(entry)
        return entry

    async def add_photos(self, face_id: str, photos: Sequence[bytes], owner: str = "",
                         filenames: Sequence[str | None] = ()) -> FaceEntry:
        """More photos of an upload's person: the face is made again from all its photos
        (the new ones checked to show the same person) and stored for every node. Sessions
        already wearing it keep the face they had until they change face."""
        await self.owner_of(face_id)
        record = await self.store.get_face(face_id, photos=True)
        if record is None:
            raise UnknownFaceError(f"no face with id {face_id!r}")
        if not record.photos:
            raise PhotosNotKeptError(f"face {face_id!r} was stored before faces kept their photos, so photos cannot "
                                     "be added to it; upload all its photos as a new face")
        if len(record.photos) + len(photos) > self.max_photos_per_face:
            raise TooManyPhotosError(f"face {face_id!r} has {len(record.photos)} photo(s); with {len(photos)} more it "
                                     f"would have more than {self.max_photos_per_face}, the most a face is made of", 409)
        labels = photo_labels(len(photos), filenames)
        for data, label in zip(photos, labels, strict=True):
            _naming(label, len(photos) > 1, check_size, data)
        with self._analysis(owner):
            source, kept = await self._run(self._register_more, record.photos, photos, labels)
            data = await self._run(self.engine.source_to_bytes, source)
        photos_now = (*record.photos, *kept)
        await self.store.put_face(replace(record, source=data, photos=photos_now, photo_count=len(photos_now)),
                                  owner_limit=self.max_faces_per_owner)  # replacing: counted only if deleted meanwhile
        entry = FaceEntry(record.id, record.name, record.thumbnail_jpeg, source, owner=record.owner,
                          photo_count=len(photos_now))
        self._cache(entry)
        return entry

    @contextlib.contextmanager
    def _analysis(self, owner: str) -> Iterator[None]:
        """One upload of ``owner``'s in analysis (429 while another is), a bounded number on the node (503)."""
        if self._analysing[owner]:
            raise UploadsBusyError("an upload of yours is being analysed; send the next one when it is answered", 429)
        if sum(self._analysing.values()) >= MAX_UPLOADS_IN_ANALYSIS:
            raise UploadsBusyError(f"the node is analysing {MAX_UPLOADS_IN_ANALYSIS} uploads; try again shortly", 503)
        self._analysing[owner] += 1
        try:
            yield
        finally:
            self._analysing[owner] -= 1
            if not self._analysing[owner]:
                del self._analysing[owner]

    def _full(self) -> TooManyFacesError:
        return TooManyFacesError(
            f"you already keep {self.max_faces_per_owner} faces, the most one user may; delete one "
            "(DELETE /api/v1/faces/{face_id}) before uploading another")

    async def thumbnail(self, face_id: str) -> FaceThumbnail:
        """The face's thumbnail JPEG and owner, without decoding its source."""
        if face_id in SAMPLE_FACES:
            await self._ensure_samples()
        with self._lock:
            entry = self._samples.get(face_id) or self._uploads.get(face_id)
        if entry is not None:
            return FaceThumbnail(entry.thumbnail_jpeg, entry.owner)
        record = await self.store.get_face(face_id) if face_id.startswith(UPLOAD_PREFIX) else None
        if record is None:
            raise UnknownFaceError(f"no face with id {face_id!r}")
        return FaceThumbnail(record.thumbnail_jpeg, record.owner)

    async def owner_of(self, face_id: str) -> str:
        """Whose upload ``face_id`` is; ``SampleFaceError`` for a sample, ``UnknownFaceError``
        when there is no such face."""
        if face_id in SAMPLE_FACES:
            raise SampleFaceError(f"{face_id!r} is a sample face; samples cannot be renamed or deleted")
        return (await self.thumbnail(face_id)).owner

    async def rename(self, face_id: str, name: str) -> FaceListing:
        """Give an upload a new name, for every node (the store keeps it)."""
        name = face_name(name)
        await self.owner_of(face_id)
        record = await self.store.get_face(face_id)
        if record is None:
            raise UnknownFaceError(f"no face with id {face_id!r}")
        await self.store.put_face(replace(record, name=name))
        with self._lock:
            cached = self._uploads.get(face_id)
            if cached is not None:
                self._uploads[face_id] = replace(cached, name=name)
        return FaceListing(face_id, name, record.owner, record.photo_count)

    async def delete(self, face_id: str) -> None:
        """Forget an upload. Sessions already wearing it keep it until they change face."""
        await self.owner_of(face_id)
        with self._lock:
            self._uploads.pop(face_id, None)
        if not await self.store.delete_face(face_id):
            raise UnknownFaceError(f"no face with id {face_id!r}")

    def _cache(self, entry: FaceEntry) -> None:
        with self._lock:
            self._uploads[entry.id] = entry
            while len(self._uploads) > MAX_CACHED_FACES:
                self._uploads.popitem(last=False)

    async def for_stream(self, stream: StreamConfig) -> FaceEntry:
        """A stream key's face: a library face by id, or its stored photos."""
        if stream.face_id:
            return await self.get(stream.face_id)
        return await self.from_path(*stream.source_photos)

    async def people_map(self, faces_map: Mapping[str, str], unmapped: str, threshold: float,
                         photos: Mapping[str, str] | None = None) -> PeopleMap | None:
        """A session's or stream key's ``faces_map`` (person id or reference face id -> face id
        or ``keep``) and ``photos`` (a command-line key's stored reference photo -> stored
        photo or ``keep``) as sources; None when it changes nothing (no one named, the rest
        wear the source). ``UnknownFaceError`` for a face no longer there."""
        if not faces_map and not photos and unmapped != KEEP:
            return None
        named: dict[str, MappedSource | None] = {}
        references = []
        for person, face_id in faces_map.items():
            wears = None if face_id == KEEP else MappedSource(face_id, (await self.get(face_id)).source)
            if is_person_id(person):
                named[person] = wears
            else:
                references.append(Reference(person, (await self.get(person)).source.identity, wears))
        for photo, wears_photo in (photos or {}).items():
            wears = None if wears_photo == KEEP else MappedSource(Path(wears_photo).name, (await self.from_path(wears_photo)).source)
            references.append(Reference(Path(photo).name, (await self.from_path(photo)).source.identity, wears))
        return PeopleMap(named, tuple(references), keep_unmapped=unmapped == KEEP, threshold=threshold)

    async def from_path(self, *paths: str | Path) -> FaceEntry:
        """Photos of one person named by path (a stream key's source face): registered and
        merged once per version of the files, not listed."""
        files = [Path(path) for path in paths]
        if not files:
            raise NotAnImageError("no source photo given")
        stamps = []
        for path in files:
            try:
                stamps.append((str(path), path.stat().st_mtime))
            except OSError as exc:
                raise NotAnImageError(f"source face {path} cannot be read ({exc.strerror or exc})") from None
        with self._lock:
            cached = self._by_path.get(tuple(stamps))
        if cached is not None:
            return cached
        photos = [await self._run(path.read_bytes) for path in files]
        labels = photo_labels(len(files), [path.name for path in files])
        registered = await self._run(self._registered, photos, labels)
        entry = FaceEntry(f"path-{secrets.token_hex(4)}", files[0].stem, registered.thumbnail,
                          merged(self.engine, registered.sources), photo_count=len(files))
        with self._lock:
            self._by_path[tuple(stamps)] = entry
        return entry

    def register_samples_soon(self) -> None:
        """Start registering the sample faces in the background (on the event loop): a
        node's first session otherwise waits for them (2.2-2.5 s on a 2-core machine)."""
        if self._samples_ready is None:
            self._samples_ready = asyncio.ensure_future(self._run(self._register_samples))

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- worker thread ----------------------------------------------------------------------

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _ensure_samples(self) -> None:
        self.register_samples_soon()
        await asyncio.shield(self._samples_ready)

    def _register_samples(self) -> None:
        for sample_id, load in SAMPLE_FACES.items():
            try:
                registered = self._registered([load()], ["the photo"])
            except Exception:  # a broken sample must not take the library down
                log.exception("sample face %s could not be registered", sample_id)
                continue
            entry = FaceEntry(sample_id, sample_id.replace("_", " ").title(), registered.thumbnail,
                              registered.sources[0], sample=True)
            with self._lock:
                self._samples[sample_id] = entry

    def _register_upload(self, photos: Sequence[bytes], name: str | None, owner: str,
                         labels: Sequence[str]) -> tuple[FaceEntry, list[bytes]]:
        registered = self._registered(photos, labels)
        face_id = UPLOAD_PREFIX + secrets.token_hex(6)
        entry = FaceEntry(face_id, name or f"upload {face_id[2:8]}", registered.thumbnail,
                          merged(self.engine, registered.sources), owner=owner, photo_count=len(photos))
        return entry, registered.kept

    def _register_more(self, kept: Sequence[bytes], photos: Sequence[bytes],
                       labels: Sequence[str]) -> tuple[SourceFace, list[bytes]]:
        """A face's kept photos registered again, and the new ones (checked against them)."""
        before = remade_sources(self.engine, kept)
        registered = self._registered(photos, labels, known=[source.identity for source in before])
        return merged(self.engine, [*before, *registered.sources]), registered.kept

    def _registered(self, photos: Sequence[bytes | np.ndarray], labels: Sequence[str],
                    known: Sequence[np.ndarray] = ()) -> _Registered:
        """Photos (encoded, or RGB) registered one at a time (one decoded photo in memory),
        each checked to show the person of ``known`` and of the photos before it."""
        several = len(photos) > 1
        kept: list[bytes] = []
        thumbnails: list[bytes] = []

        def register(photo: bytes | np.ndarray, label: str) -> SourceFace:
            image = photo if isinstance(photo, np.ndarray) else _naming(label, several, decode_image, photo)
            source = self._register_one(image, label)
            kept.append(kept_photo(image, source.face.box))
            if not thumbnails:
                thumbnails.append(face_thumbnail(image, source.face.box))
            return source

        sources = register_photos(self.engine, photos, labels, known, register=register)
        return _Registered(sources, kept, thumbnails[0])

    def _register_one(self, image: np.ndarray, label: str) -> SourceFace:
        try:
            return self.engine.register_source(image, label=label)
        except ManyFacesError as exc:
            raise SeveralFacesError(f"{label} shows {exc.count} faces; a source photo must show exactly one",
                                    exc.count) from None
        except NoFaceError:
            raise NoFaceInImageError(f"no face found in {label}; use a clear, frontal photo of one face") from None


def _naming(label: str, several: bool, check: Callable[[bytes], T], photo: bytes) -> T:
    """``check(photo)`` (``check_size``, ``decode_image``: their errors take one reason), its
    ``FaceLibraryError`` saying which photo when there are several."""
    try:
        return check(photo)
    except FaceLibraryError as exc:
        if not several:
            raise
        raise type(exc)(f"{label}: {exc}") from None


def check_size(image_bytes: bytes) -> None:
    if len(image_bytes) > MAX_UPLOAD_BYTES:
        raise ImageTooLargeError(
            f"the image is {len(image_bytes) / 1e6:.1f} MB; the limit is {MAX_UPLOAD_BYTES // (1024 * 1024)} MB"
        )


def decode_image(image_bytes: bytes) -> np.ndarray:
    """Bytes -> RGB uint8, refusing non-images and images over the limits before decoding
    the pixels (the header gives the size, so a decompression bomb is never expanded)."""
    check_size(image_bytes)
    if not image_bytes:
        raise NotAnImageError("the upload is empty; send a JPEG, PNG or WebP photo")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(image_bytes), formats=HEADER_CHECKED_FORMATS) as header:
            width, height = header.size
    except Image.DecompressionBombError:  # a header declaring more pixels than Pillow will open
        raise ImageTooLargeError(f"the image declares too many pixels; the limit is {MAX_UPLOAD_PIXELS} px per side") from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        raise NotAnImageError("the upload is not a readable image; send a JPEG, PNG or WebP photo") from None
    if max(width, height) > MAX_UPLOAD_PIXELS:
        raise ImageTooLargeError(f"the image is {width}x{height} px; the limit is {MAX_UPLOAD_PIXELS} px per side")
    bgr = cv2.imdecode(np.frombuffer(image_bytes, dtype=np.uint8), cv2.IMREAD_COLOR)
    if bgr is None:
        raise NotAnImageError("the image cannot be decoded (damaged, truncated or an unsupported format)")
    if max(bgr.shape[:2]) > MAX_UPLOAD_PIXELS:  # the two readers disagreed after all: not analysed
        raise ImageTooLargeError(f"the image decodes to {bgr.shape[1]}x{bgr.shape[0]} px; "
                                 f"the limit is {MAX_UPLOAD_PIXELS} px per side")
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB, dst=bgr)  # in place: a 16 MP photo is 48 MB a copy


def face_thumbnail(image: np.ndarray, box: np.ndarray, size: int = THUMBNAIL_SIZE) -> bytes:
    """The detected face, cropped square with a margin, as JPEG."""
    height, width = image.shape[:2]
    x0, y0, x1, y1 = (float(v) for v in box)
    side = max(x1 - x0, y1 - y0) * 1.5
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    left, top = int(max(0, cx - side / 2)), int(max(0, cy - side / 2))
    right, bottom = int(min(width, cx + side / 2)), int(min(height, cy + side / 2))
    crop = image[top:bottom, left:right]
    if crop.size == 0:
        crop = image
    scale = size / max(crop.shape[:2])
    crop = cv2.resize(crop, (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale))),
                      interpolation=cv2.INTER_AREA)
    ok, encoded = cv2.imencode(".jpg", cv2.cvtColor(crop, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 85])
    if not ok:  # pragma: no cover - OpenCV always encodes a non-empty RGB crop
        raise RuntimeError("thumbnail encoding failed")
    return encoded.tobytes()
