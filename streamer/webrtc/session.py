"""One live session: one peer connection that sends video to be swapped (a browser over the
session API, or a WHIP publisher), its swapped video and delayed audio, and the WHEP
viewers watching it. A session closes once, whatever ends it (hang-up, ICE failure,
``DELETE``, server shutdown), and leaves no task, thread or track behind."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal

from aiortc import RTCPeerConnection

from signaling.registry import SessionRecord
from streamer.faces import FaceEntry
from streamer.pipeline.people_map import PeopleMap, describe_people
from streamer.webrtc.delayed_audio import DelayedAudio
from streamer.webrtc.swapped_track import SwappedVideo

if TYPE_CHECKING:  # the schema is injected by the composition root, never imported at run time
    from swapcast.config import SwapConfig

log = logging.getLogger(__name__)

Protocol = Literal["webrtc", "whip"]


def iso_utc(timestamp: float | None = None) -> str:
    """A Unix time (default: now) as the API writes times: ISO 8601 UTC, seconds, ``Z``."""
    moment = datetime.now(timezone.utc) if timestamp is None else datetime.fromtimestamp(timestamp, timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


async def _close_pc(pc: RTCPeerConnection, what: str) -> None:
    starting = _tasks_of(pc)
    try:
        await asyncio.wait_for(pc.close(), timeout=5.0)
    except Exception:  # a half-negotiated or broken connection must not stop the teardown
        log.warning("%s: closing the peer connection failed", what, exc_info=True)
    for task in starting:
        task.add_done_callback(lambda done: _expected_failure(done, what))


def _tasks_of(pc: RTCPeerConnection) -> list[asyncio.Task]:
    """The tasks running methods of ``pc``: aiortc starts ICE and DTLS in a task it does not
    keep, which fails ("RTCIceTransport is closed") when the connection is closed meanwhile."""
    tasks = []
    for task in asyncio.all_tasks():
        frame = getattr(task.get_coro(), "cr_frame", None)
        if frame is not None and frame.f_locals.get("self") is pc:
            tasks.append(task)
    return tasks


def _expected_failure(task: asyncio.Task, what: str) -> None:
    """Retrieve the outcome of a task cut short by the close: it is the close, not an error."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.debug("%s: starting the connection ended by the close (%r)", what, exc)


class Viewer:
    """A WHEP viewer: receives one session's swapped video (and audio)."""

    def __init__(self, viewer_id: str, session_id: str, pc: RTCPeerConnection) -> None:
        self.id = viewer_id
        self.session_id = session_id
        self.pc = pc
        self.created = iso_utc()
        self._closed = False

    def describe(self) -> dict[str, Any]:
        return {"id": self.id, "created": self.created, "state": self.pc.connectionState}

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await _close_pc(self.pc, f"viewer {self.id}")


class Session:
    def __init__(
        self, session_id: str, protocol: Protocol, pc: RTCPeerConnection, face: FaceEntry | None,
        face_id: str | None, options: SwapConfig, *, enabled: bool = True, label: str | None = None,
        record: SessionRecord,
    ) -> None:
        self.id = session_id
        self.record = record  # what the registry holds about it (face id, option overrides)
        self.protocol = protocol
        self.pc = pc
        self.face = face
        self.face_id = face_id
        self.options = options
        self.enabled = enabled
        self.label = label  # e.g. the stream key's name for WHIP
        self.publisher_key_hash: str | None = None  # WHIP: the stream key that publishes it (its holder may end it)
        self.map_photos: dict[str, str] = {}  # WHIP from a command-line key: its map by stored photos (kept across PATCHes)
        self.created = iso_utc()
        self.video = SwappedVideo(session_id[:8])
        # PATCHes are applied one at a time: each resolves its options from the previous one's result
        self.updates = asyncio.Lock()
        self.audio: DelayedAudio | None = None
        self.viewers: dict[str, Viewer] = {}
        self.remote_candidates = 0  # trickled by the peer (offers.MAX_REMOTE_CANDIDATES at most)
        self._closing: asyncio.Future | None = None

    @property
    def closed(self) -> bool:
        return self._closing is not None

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "protocol": self.protocol,
            "created": self.created,
            "face_id": self.face_id,
            "enabled": self.enabled,
            "options": self.options.model_dump(),
            "state": self.record.state,
            "connection": self.pc.connectionState,
            "viewers": len(self.viewers),
            "stats": self.video.stats.snapshot(),
            "people": self.people(),
        }

    def people(self) -> list[dict]:
        """Who the swap has seen (``people_map.describe_people``); read from any thread."""
        swapper = self.video.swapper
        if swapper is None or swapper.people is None:
            return []
        return describe_people(swapper.people.snapshot(), swapper.mapping, f"/api/v1/sessions/{self.id}/people")

    async def apply(self, *, enabled: bool | None = None, face: FaceEntry | None = None,
                    face_id: str | None = None, options: SwapConfig | None = None,
                    mapping: PeopleMap | None = None) -> None:
        """Change the swap live, between two frames, without renegotiation; with
        ``options``, ``mapping`` is their ``faces_map`` as sources (None: nobody named)."""

        def change() -> None:
            swapper = self.video.swapper
            if swapper is None:
                return
            if enabled is not None:
                swapper.enabled = enabled
            if face is not None:
                swapper.source = face.source
            if options is not None:
                swapper.update(**dataclasses.asdict(options.options()))
                swapper.mapping = mapping

        await self.video.run(change)
        if enabled is not None:
            self.enabled = enabled
        if face is not None:
            self.face, self.face_id = face, face_id
        if options is not None:
            self.options = options

    async def close(self) -> None:
        """Idempotent; concurrent callers all wait for the one teardown."""
        if self._closing is not None:
            await asyncio.shield(self._closing)
            return
        self._closing = asyncio.get_running_loop().create_future()
        try:
            viewers = list(self.viewers.values())
            self.viewers.clear()
            await asyncio.gather(*(viewer.close() for viewer in viewers))
            await _close_pc(self.pc, f"session {self.id}")
            await self.video.close()
            if self.audio is not None:
                await self.audio.close()
        finally:
            self._closing.set_result(None)
