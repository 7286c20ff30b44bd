"""All live WebRTC sessions of a node: negotiation, the session limit, live changes and
teardown. The HTTP routes are a thin layer over this object.

Negotiation (aiortc answers, no trickle ICE): the offer is checked first; then the
transceivers are created *before* ``setRemoteDescription`` so their directions and codec
preferences are ours (aiortc fixes codecs there), the peer's tracks are attached to the
session's swapped video / delayed audio, and the answer carries every candidate.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from typing import TYPE_CHECKING, Any

from aiortc import RTCPeerConnection, RTCSessionDescription
from pydantic import ValidationError

from gpu.engine import FaceEngine
from signaling.stream_keys import StreamKeyStore, hash_key
from streamer.faces import FaceEntry, FaceLibrary
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.webrtc import encoders, ice
from streamer.webrtc.delayed_audio import DelayedAudio
from streamer.webrtc.errors import (
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    ServerFullError,
    UnprocessableError,
)
from streamer.webrtc.offers import Offer, parse_offer
from streamer.webrtc.session import Session, Viewer

if TYPE_CHECKING:  # sections of the config schema, injected by the composition root
    from swapcast.config import LiveConfig, SwapConfig, WebRtcConfig

log = logging.getLogger(__name__)

MAX_VIEWERS_PER_SESSION = 8
CONNECT_TIMEOUT_S = 30.0  # a peer that never connects is dropped after this
PATCH_KEYS = frozenset({"enabled", "face_id", "options"})


class SessionManager:
    def __init__(
        self, engine: FaceEngine, faces: FaceLibrary, *, webrtc: WebRtcConfig, swap_defaults: SwapConfig,
        live: LiveConfig | None = None, stream_keys: StreamKeyStore | None = None,
    ) -> None:
        self.engine = engine
        self.faces = faces
        self.webrtc = webrtc
        self.swap_defaults = swap_defaults
        self.stream_keys = stream_keys
        self.tuning = encoders.EncoderTuning.from_config(webrtc, live)
        self._sessions: dict[str, Session] = {}
        self._reserved = 0  # sessions being negotiated, counted against the limit
        self._background: set[asyncio.Task] = set()
        self._closed = False

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Install the process-wide aiortc hooks (encoders, host candidates)."""
        encoders.install(self.tuning)
        ice.install(self.webrtc.host_addresses)

    async def close_all(self) -> None:
        self._closed = True
        if self._sessions:
            log.info("closing %d live session(s)", len(self._sessions))
        await asyncio.gather(*(session.close() for session in list(self._sessions.values())))
        self._sessions.clear()
        if self._background:  # closes already under way; timers end with their connections
            _, pending = await asyncio.wait(list(self._background), timeout=10.0)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    # -- queries ------------------------------------------------------------------------------

    def list(self) -> list[Session]:
        return list(self._sessions.values())

    def get(self, session_id: str, protocol: str | None = None) -> Session:
        session = self._sessions.get(session_id)
        if session is None or (protocol is not None and session.protocol != protocol):
            kind = f"{protocol.upper()} session" if protocol else "session"
            raise NotFoundError(f"no {kind} with id {session_id!r}")
        return session

    # -- creating sessions ----------------------------------------------------------------------

    async def create_webrtc(self, offer_sdp: object, face_id: object, options: object) -> tuple[Session, str]:
        """A browser session: its swapped video goes back on the same connection."""
        offer = parse_offer(offer_sdp, need="send")
        if not isinstance(face_id, str) or not face_id:
            raise BadRequestError("face_id is required (see GET /api/v1/faces)")
        swap = self.resolve_options(self.swap_defaults, options)
        face = await self.faces.get(face_id)
        return await self._create("webrtc", offer, face, face_id, swap)

    async def create_whip(self, offer_sdp: object, stream_key: str) -> tuple[Session, str]:
        """A WHIP publisher: the stream key's face and options apply; no video goes back
        to the publisher; viewers watch the swapped output over WHEP."""
        record = self.check_stream_key(stream_key)
        offer = parse_offer(offer_sdp, need="send")
        try:
            swap = self.resolve_options(self.swap_defaults, record.stream.swap)
        except BadRequestError as exc:
            raise UnprocessableError(f"stream key {record.key_id}: {exc.reason}") from None
        try:
            face = await self.faces.from_path(record.stream.source_face)
        except Exception as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            raise UnprocessableError(f"stream key {record.key_id}: source face unusable: {reason}") from None
        return await self._create("whip", offer, face, None, swap, label=record.stream.name)

    def check_stream_key(self, stream_key: str):
        if self.stream_keys is None:
            raise ForbiddenError("this node has no stream keys")
        record = self.stream_keys.find(stream_key)
        if record is not None:
            return record
        wanted = hash_key(stream_key)
        if any(r.key_hash == wanted and not r.active for r in self.stream_keys.list()):
            raise ForbiddenError("stream key revoked")
        raise ForbiddenError("stream key not recognised")

    async def _create(self, protocol, offer: Offer, face: FaceEntry, face_id: str | None, swap,
                      label: str | None = None) -> tuple[Session, str]:
        self._reserve()
        session = None
        try:
            pc = RTCPeerConnection(ice.rtc_configuration(self.webrtc.ice_servers))
            session = Session(secrets.token_urlsafe(12), protocol, pc, face, face_id, swap, label=label)
            engine, source, options = self.engine, face.source, swap.options()
            batch_id = f"{protocol}-{session.id}"  # the batcher's fairness unit, named in its metrics
            await session.video.start_swapper(lambda: FrameSwapper(engine, source, options, session_id=batch_id))

            send_back = protocol == "webrtc" and offer.peer_receives_video
            video = pc.addTransceiver("video", direction="sendrecv" if send_back else "recvonly")
            video.setCodecPreferences(encoders.video_codec_preferences(self.tuning.codec))
            if send_back:
                video.sender.replaceTrack(session.video.output())
            audio = None
            if offer.audio_direction is not None:
                session.audio = DelayedAudio(lambda: session.video.latency_s)
                audio_back = protocol == "webrtc" and offer.peer_sends_audio and offer.peer_receives_audio
                audio = pc.addTransceiver("audio", direction="sendrecv" if audio_back else "recvonly")
                if audio_back:
                    audio.sender.replaceTrack(session.audio.output())

            answer = await self._answer(pc, offer)
            session.video.attach(video.receiver.track, on_end=lambda: self._close_later(session.id, "video ended"))
            if audio is not None and offer.peer_sends_audio and audio.receiver.track is not None:
                session.audio.attach(audio.receiver.track)
            self._watch(pc, lambda: self._close_later(session.id, "connection ended"))
            self._sessions[session.id] = session
            log.info("%s session %s started (face %s)", protocol, session.id, face.id)
            return session, answer
        except BaseException:
            if session is not None:
                await session.close()
            raise
        finally:
            self._reserved -= 1

    def _reserve(self) -> None:
        if self._closed:
            raise ServerFullError("the server is shutting down")
        limit = self.webrtc.max_sessions
        if len(self._sessions) + self._reserved >= limit:
            raise ServerFullError(f"server full: {limit} of {limit} live sessions in use; try again later")
        self._reserved += 1

    async def _answer(self, pc: RTCPeerConnection, offer: Offer) -> str:
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer.sdp, type="offer"))
        except Exception as exc:  # aiortc raises ValueError, OperationError, ... for bad offers
            raise BadRequestError(f"the offer cannot be used: {exc or type(exc).__name__}") from None
        await pc.setLocalDescription(await pc.createAnswer())
        return pc.localDescription.sdp

    def _watch(self, pc: RTCPeerConnection, on_end) -> None:
        """Call ``on_end`` on ICE/DTLS failure or close (a closed tab ends in ``closed`` on
        DTLS close_notify, or in ``failed`` once ICE consent checks stop), and when the peer
        has not connected within ``CONNECT_TIMEOUT_S``."""

        async def watchdog() -> None:
            await asyncio.sleep(CONNECT_TIMEOUT_S)
            if pc.connectionState != "connected":
                on_end()

        timer = self._spawn(watchdog())

        @pc.on("connectionstatechange")
        def changed() -> None:
            state = pc.connectionState
            if state in ("connected", "failed", "closed"):
                timer.cancel()
            if state in ("failed", "closed"):
                on_end()

    def _spawn(self, coroutine) -> asyncio.Task:
        """A background task the manager keeps track of (and waits for at shutdown)."""
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def _close_later(self, session_id: str, why: str) -> None:
        session = self._sessions.get(session_id)
        if session is not None and not session.closed:
            log.info("session %s ends: %s", session_id, why)
            self._spawn(self.close(session_id))

    # -- viewers (WHEP) -------------------------------------------------------------------------

    async def add_viewer(self, session_id: str, offer_sdp: object) -> tuple[Viewer, str]:
        session = self.get(session_id)
        offer = parse_offer(offer_sdp, need="receive")
        if len(session.viewers) >= MAX_VIEWERS_PER_SESSION:
            raise ServerFullError(f"session {session_id} already has {MAX_VIEWERS_PER_SESSION} viewers")
        pc = RTCPeerConnection(ice.rtc_configuration(self.webrtc.ice_servers))
        viewer = Viewer(secrets.token_urlsafe(9), session_id, pc)
        try:
            video = pc.addTransceiver(session.video.output(), direction="sendonly")
            video.setCodecPreferences(encoders.video_codec_preferences(self.tuning.codec))
            if offer.peer_receives_audio and session.audio is not None:
                pc.addTransceiver(session.audio.output(), direction="sendonly")
            answer = await self._answer(pc, offer)
        except BaseException:
            await viewer.close()
            raise
        if session.closed:  # the session ended while we negotiated
            await viewer.close()
            raise NotFoundError(f"session {session_id} has ended")
        session.viewers[viewer.id] = viewer
        self._watch(pc, lambda: self._spawn(self._drop_viewer(session, viewer.id)))
        return viewer, answer

    async def remove_viewer(self, session_id: str, viewer_id: str) -> None:
        session = self.get(session_id)
        if viewer_id not in session.viewers:
            raise NotFoundError(f"no viewer {viewer_id!r} on session {session_id!r}")
        await self._drop_viewer(session, viewer_id)

    async def _drop_viewer(self, session: Session, viewer_id: str) -> None:
        viewer = session.viewers.pop(viewer_id, None)
        if viewer is not None:
            await viewer.close()

    # -- live changes and ending ----------------------------------------------------------------

    async def update(self, session_id: str, body: object) -> Session:
        session = self.get(session_id)
        if not isinstance(body, dict) or not body:
            raise BadRequestError('expected a JSON object with any of "enabled", "face_id", "options"')
        unknown = sorted(set(body) - PATCH_KEYS)
        if unknown:
            raise BadRequestError(f"unknown field(s) {', '.join(unknown)}; expected enabled, face_id, options")
        enabled = body.get("enabled")
        if "enabled" in body and not isinstance(enabled, bool):
            raise BadRequestError("enabled must be true or false")
        async with session.updates:
            options = self.resolve_options(session.options, body["options"]) if "options" in body else None
            face = None
            if "face_id" in body:
                if not isinstance(body["face_id"], str) or not body["face_id"]:
                    raise BadRequestError("face_id must be a face id (see GET /api/v1/faces)")
                face = await self.faces.get(body["face_id"])
            await session.apply(enabled=enabled, face=face, face_id=face.id if face else None, options=options)
        return session

    async def close(self, session_id: str) -> None:
        session = self.get(session_id)
        await session.close()
        self._sessions.pop(session_id, None)
        log.info("session %s closed", session_id)

    @staticmethod
    def resolve_options(base, changes: object):
        """``base`` (a ``SwapConfig``) with ``changes`` applied, validated by the schema."""
        if changes is None:
            return base
        if not isinstance(changes, dict):
            raise BadRequestError("options must be a JSON object of swap settings")
        try:
            merged = type(base).model_validate({**base.model_dump(), **changes})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}" for err in exc.errors()
            )
            raise BadRequestError(f"invalid options: {problems}") from None
        if merged.face_selection == "reference":
            raise BadRequestError("invalid options: face_selection 'reference' needs a reference photo, "
                                  "which live sessions do not take yet; use 'all' or 'largest'")
        return merged

    def snapshot(self) -> list[dict[str, Any]]:
        return [session.describe() for session in self._sessions.values()]
