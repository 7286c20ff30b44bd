"""The source face a job wears, turned into the engine's ``SourceFace`` once per worker.

A job names a sample face (``streamer.samples``, registered from its image), a face stored
in the cluster registry (its serialised source, no detection needed; made again from its
kept photos when another swapper made it), or carries its own uploaded photo. Registering takes ~100 ms and a job has many chunks, so the result is kept
for the next chunks (a small LRU).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict

import cv2

from gpu.engine import FaceEngine, SourceFace
from gpu.errors import ManyFacesError, SwapcastError
from gpu.source_codec import SourceCodecError
from signaling.jobs.model import Job
from signaling.jobs.storage import JobStorage
from signaling.registry import Registry
from streamer.face_photos import merged, remade_sources
from streamer.media.images import read_image
from streamer.pipeline.people_map import KEEP, MappedSource, PeopleMap, Reference
from streamer.samples import SAMPLE_FACES

CACHE_SIZE = 32


class UnknownFaceError(SwapcastError):
    """The job names a face no sample and no registry entry has."""


class SourceFaces:
    def __init__(self, engine: FaceEngine, registry: Registry | None, storage: JobStorage) -> None:
        self.engine = engine
        self.registry = registry
        self.storage = storage
        self._cache: OrderedDict[str, SourceFace] = OrderedDict()

    async def for_job(self, job: Job) -> SourceFace | None:
        """The job's face (None: it has none, its ``faces_map`` names everyone it swaps)."""
        if not job.source_path and not job.face_id:
            return None
        key = f"upload:{job.id}" if job.source_path else f"face:{job.face_id}"
        return await self._cached(key, lambda: self._resolve(job))

    async def people_map(self, job: Job, threshold: float) -> PeopleMap | None:
        """The job's ``faces_map`` as sources: people named by a reference face's identity,
        so a person is the same one in every chunk (None: no map, every face wears the job's)."""
        mapping = json.loads(job.faces_map) if job.faces_map else {}
        if not mapping and job.unmapped != KEEP:
            return None
        references = []
        for reference, face_id in mapping.items():
            identity = (await self._by_face_id(reference)).identity
            wears = None if face_id == KEEP else MappedSource(face_id, await self._by_face_id(face_id))
            references.append(Reference(reference, identity, wears))
        return PeopleMap(references=tuple(references), keep_unmapped=job.unmapped == KEEP, threshold=threshold)

    async def _by_face_id(self, face_id: str) -> SourceFace:
        return await self._cached(f"face:{face_id}", lambda: self._face(face_id))

    async def _cached(self, key: str, resolve) -> SourceFace:
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key]
        source = await resolve()
        self._cache[key] = source
        while len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return source

    async def _resolve(self, job: Job) -> SourceFace:
        if job.source_path:
            return await asyncio.to_thread(self._from_photo, job.source_path)
        return await self._face(job.face_id or "")

    async def _face(self, face_id: str) -> SourceFace:
        if face_id in SAMPLE_FACES:
            image = SAMPLE_FACES[face_id]()
            return await asyncio.to_thread(self.engine.register_source, image, None, f"sample face {face_id}")
        record = await self.registry.get_face(face_id) if self.registry is not None else None
        if record is None:
            raise UnknownFaceError(f"unknown face_id {face_id!r}: neither a sample face nor a stored one")
        try:
            return self.engine.source_from_bytes(record.source)
        except SourceCodecError:  # another swapper's: made again from the photos the face keeps
            kept = await self.registry.get_face(face_id, photos=True)
            if kept is None or not kept.photos:
                raise
            return merged(self.engine, await asyncio.to_thread(remade_sources, self.engine, kept.photos))

    def _from_photo(self, key: str) -> SourceFace:
        with self.storage.scratch() as scratch:
            try:
                image = read_image(self.storage.fetch(key, scratch))
            except cv2.error:  # e.g. a header declaring more pixels than OpenCV decodes (the API refuses those now)
                raise SwapcastError("the uploaded source photo cannot be decoded (too large or damaged)") from None
        try:
            return self.engine.register_source(image, None, "the uploaded source photo")
        except ManyFacesError as exc:
            raise SwapcastError(f"the uploaded source photo shows {exc.count} faces; upload a photo of one face") from None
