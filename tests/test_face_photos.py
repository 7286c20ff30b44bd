"""Several photos of one person as one source face (``streamer.face_photos``), and a face
of the library made again from its kept photos where its stored source cannot be used."""

from __future__ import annotations

import asyncio
from contextlib import closing

import cv2
import numpy as np
import pytest

from gpu.analysis.identity import identity_distance
from gpu.engine import EngineSettings, FaceEngine
from signaling.registry import MemoryRegistry
from streamer.face_photos import (
    KEPT_PHOTO_SIDE,
    DifferentPersonError,
    kept_photo,
    merged,
    register_photos,
    remade_sources,
)
from streamer.faces import FaceLibrary, PhotosNotKeptError, decode_image


def _mirrored(image: np.ndarray) -> np.ndarray:
    """Another photo of the same person (dlib distance ~0.2)."""
    return np.ascontiguousarray(image[:, ::-1])


def jpeg(image: np.ndarray) -> bytes:
    return cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))[1].tobytes()


def test_photos_of_one_person_merge_into_one_source(engine, astronaut_image):
    sources = register_photos(engine, [astronaut_image, _mirrored(astronaut_image)], ["left", "right"])
    source = merged(engine, sources)
    assert len(sources) == 2
    # the identity comes from both: close to each photo's
    assert all(identity_distance(source.identity, s.identity) < 0.15 for s in sources)
    assert merged(engine, sources[:1]) is sources[0]  # one photo: as it is


def test_a_photo_of_someone_else_is_refused_by_its_label(engine, astronaut_image, grace_image):
    with pytest.raises(DifferentPersonError, match=r"^grace\.jpg shows someone else than the photos before it"):
        register_photos(engine, [astronaut_image, grace_image], ["buzz.jpg", "grace.jpg"])
    known = [engine.register_source(astronaut_image, None, "known").identity]
    with pytest.raises(DifferentPersonError, match="than the face's photos"):
        register_photos(engine, [grace_image], ["new"], known=known)


def test_a_kept_photo_is_the_head_small_enough_and_the_same_person(engine, astronaut_image):
    big = np.ascontiguousarray(np.kron(astronaut_image, np.ones((5, 5, 1), np.uint8)))  # 2560 px
    source = engine.register_source(big, None, "big")
    kept = kept_photo(big, source.face.box)
    image = decode_image(kept)
    assert max(image.shape[:2]) == KEPT_PHOTO_SIDE  # shrunk from the 2560 px photo
    assert len(kept) < 300_000
    again = remade_sources(engine, [kept])[0]
    assert identity_distance(again.identity, source.identity) < 0.2


def test_a_face_of_another_swapper_is_made_again_from_its_kept_photos(engine, astronaut_image):
    async def scenario():
        store = MemoryRegistry()
        with closing(FaceLibrary(engine, store)) as mesh3d_node:
            made = await mesh3d_node.add([jpeg(astronaut_image), jpeg(_mirrored(astronaut_image))])
        with closing(FaceLibrary(FaceEngine(EngineSettings(swapper="mesh")), store)) as mesh_node:
            return made, await mesh_node.get(made.id)

    made, used = asyncio.run(scenario())
    assert used.photo_count == 2 and used.source.payload is not None
    assert identity_distance(used.source.identity, made.source.identity) < 0.15


def test_a_face_without_kept_photos_of_another_swapper_says_so(engine, astronaut_image):
    async def scenario():
        store = MemoryRegistry()
        with closing(FaceLibrary(engine, store)) as library:
            face = await library.add(jpeg(astronaut_image))
        record = await store.get_face(face.id, photos=True)
        record.photos = ()  # as stored before faces kept their photos
        await store.put_face(record)
        with closing(FaceLibrary(FaceEngine(EngineSettings(swapper="mesh")), store)) as mesh_node:
            await mesh_node.get(face.id)

    with pytest.raises(PhotosNotKeptError, match="prepared for the mesh3d swapper.*upload its photos again"):
        asyncio.run(scenario())
