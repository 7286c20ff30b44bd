"""A publish whose key or face goes away between its authorisation and its start is
refused with a reason, and leaves no session record behind (a stale record counted against
the user's session limit and was listed for ever; the handler died with a traceback)."""

from __future__ import annotations

import asyncio

from signaling.registry import MemoryRegistry
from signaling.stream_keys import StreamKeyStore, rtmp_session_id
from streamer.faces import UnknownFaceError
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings


class FacesDeletedAfterAuthorisation:
    """The face library as seen when the user deletes the key's face during its publish."""

    def __init__(self) -> None:
        self.lookups = 0

    async def for_stream(self, stream):
        self.lookups += 1
        if self.lookups > 1:
            raise UnknownFaceError(f"no face with id {stream.face_id!r}")
        return object()


class ClosedPublisher:
    def __init__(self, name: str) -> None:
        self.app, self.name, self.remote = "live", name, "127.0.0.1:1"
        self.closed_with: str | None = None
        self.ended_reason: str | None = None

    async def close(self, reason: str) -> None:
        self.closed_with = reason


def _ingest(tmp_path, faces) -> tuple[RtmpIngest, StreamKeyStore, MemoryRegistry]:
    keys, registry = StreamKeyStore(tmp_path), MemoryRegistry()
    ingest = RtmpIngest(keys, engine=None, base_options=lambda _: None, settings=IngestSettings(EncoderSettings()),
                        connect_push=lambda url: None, faces=faces, registry=registry, node_id="n1")
    return ingest, keys, registry


def test_a_face_deleted_during_authorisation_refuses_the_publish_and_ends_its_record(tmp_path):
    faces = FacesDeletedAfterAuthorisation()
    ingest, keys, registry = _ingest(tmp_path, faces)
    key, _ = keys.add("studio", face_id="u-1234", owner="alice")

    async def scenario() -> ClosedPublisher:
        await ingest.authorize_publish("live", key)
        assert await registry.get_session(rtmp_session_id(key)) is not None
        publisher = ClosedPublisher(key)
        await ingest.on_publish(publisher)  # raised UnknownFaceError before
        return publisher

    publisher = asyncio.run(scenario())
    assert publisher.closed_with is not None and "face" in publisher.closed_with
    assert asyncio.run(registry.get_session(rtmp_session_id(key))) is None
    assert ingest.streams == {}


def test_a_key_revoked_during_authorisation_refuses_the_publish_and_ends_its_record(tmp_path):
    ingest, keys, registry = _ingest(tmp_path, FacesDeletedAfterAuthorisation())
    key, record = keys.add("studio", face_id="u-1234", owner="alice")

    async def scenario() -> ClosedPublisher:
        await ingest.authorize_publish("live", key)
        keys.revoke(record.key_id)
        publisher = ClosedPublisher(key)
        await ingest.on_publish(publisher)
        return publisher

    publisher = asyncio.run(scenario())
    assert publisher.closed_with == "stream key revoked"
    assert asyncio.run(registry.get_session(rtmp_session_id(key))) is None
