"""All live WebRTC sessions of a node: negotiation, the session limit, live changes and
teardown. The HTTP routes are a thin layer over this object.

Every session has a record in the registry (``signaling.registry``): created ``placed``
(by this node, or by the gateway, which then forwards the request with
``X-Swapcast-Session-Id``), ``live`` once its media is negotiated here. The record holds the
face id and option overrides, so an offer for a known id on any node resumes the session
(after a node died, the browser re-offers through the gateway). A session that ends (hang-up,
``DELETE``) ends its record; a node shutting down leaves them for another node.

Negotiation (aiortc answers, no trickle ICE): the offer is checked first; then the
transceivers are created *before* ``setRemoteDescription`` so their directions and codec
preferences are ours (aiortc fixes codecs there), the peer's tracks are attached to the
session's swapped video / delayed audio, and the answer carries every candidate.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiortc import RTCPeerConnection, RTCSessionDescription
from aiortc.sdp import candidate_from_sdp

from gpu.analysis.people import People
from gpu.engine import FaceEngine
from gpu.errors import SwapcastError
from signaling.registry import MemoryRegistry, Registry, RegistryUnavailable, SessionRecord
from signaling.stream_keys import StreamKey, StreamKeyError, StreamKeyStore, hash_key
from streamer.faces import FaceEntry, FaceLibrary
from streamer.media.images import jpeg_preview
from streamer.live.swap_worker import ObserveStats
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.pipeline.people_map import PeopleMap
from streamer.provenance.marker import ProvenanceSettings
from streamer.webrtc import encoders, ice
from streamer.webrtc.delayed_audio import DelayedAudio
from streamer.webrtc.errors import (
    ConflictError,
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    ServerFullError,
    SessionLimitError,
    UnprocessableError,
)
from streamer.webrtc.offers import MAX_REMOTE_CANDIDATES, Offer, parse_offer
from streamer.webrtc.frame_assembly import complete_frames_on_marker
from streamer.webrtc.receive_bounds import bound_receiver
from streamer.webrtc.session import Session, Viewer, iso_utc

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
        registry: Registry | None = None, node_id: str = "local", capacity: int | None = None,
        max_sessions_per_owner: int | None = None,
    ) -> None:
        self.engine = engine
        self.registry = registry or MemoryRegistry()
        self.node_id = node_id
        self.capacity = capacity or webrtc.max_sessions
        self.max_sessions_per_owner = max_sessions_per_owner
        # ends a live RTMP stream of this node (set by the composition root): DELETE of an
        # RTMP session must stop the stream itself, not only forget its record
        self.kill_stream: Callable[[str], Awaitable[bool]] | None = None
        self.preview_stream: Callable[[str], bytes | None] | None = None  # an RTMP stream's newest picture
        # an RTMP stream's person's thumbnail and the stream's owner (session id, person id)
        self.stream_person: Callable[[str, str], tuple[bytes, str] | None] | None = None
        self.provenance: ProvenanceSettings | None = None  # watermarks swapped frames (set by the composition root)
        self.faces = faces
        self.webrtc = webrtc
        self.swap_defaults = swap_defaults
        self.stream_keys = stream_keys
        self.tuning = encoders.EncoderTuning.from_config(webrtc, live)
        self._sessions: dict[str, Session] = {}
        self._reserved = 0  # sessions being negotiated, counted against the limit
        self._background: set[asyncio.Task] = set()
        self._closed = False
        self.observe_stats: ObserveStats | None = None  # set by the node: its metrics

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

    async def place(self, face_id: object, options: object, *, session_id: str | None = None,
                    owner: str = "") -> SessionRecord:
        """A browser session without media yet: its face and options are checked and
        recorded; the browser's offer follows (``offer``). ``session_id`` is the id the
        gateway already placed on this node."""
        if not isinstance(face_id, str) or not face_id:
            raise BadRequestError("face_id is required (see GET /api/v1/faces)")
        options = self.normalised_options(self.swap_defaults, options)
        await self.people_map(self.resolve_options(self.swap_defaults, options))  # its faces must exist
        await self.faces.get(face_id)
        if session_id is not None:
            await self._check_placed(session_id, "webrtc", owner)
        else:
            mine = await self.registry.sessions(self.node_id)
            if len(mine) >= self.capacity:
                raise ServerFullError(f"server full: {self.capacity} of {self.capacity} sessions in use; try again later")
        await self._check_owner_quota(owner, session_id)
        record = SessionRecord(
            id=session_id or secrets.token_urlsafe(12), protocol="webrtc", node_id=self.node_id, owner=owner,
            face_id=face_id, options=options, state="placed",
        )
        await self.registry.save_session(record)
        return record

    async def _check_placed(self, session_id: str, protocol: str, owner: str) -> None:
        """A session id from the gateway (``X-Swapcast-Session-Id``) is taken only when the
        registry shows the gateway placed it on this node, for this protocol and caller, and
        it has no media yet. So a client reaching a node directly cannot take over another
        user's session, nor skip placement (and its capacity count) with an id of its own."""
        record = await self.registry.get_session(session_id)
        if (record is None or record.node_id != self.node_id or record.protocol != protocol
                or record.state != "placed" or record.owner not in ("", owner)):
            raise ConflictError(f"session id {session_id!r} was not placed on this node for this caller "
                                "(X-Swapcast-Session-Id is set by the gateway)")

    async def _check_owner_quota(self, owner: str, session_id: str | None) -> None:
        """One user holds at most ``max_sessions_per_owner`` sessions, across the cluster."""
        limit = self.max_sessions_per_owner
        if limit is None or not owner:
            return
        held = [r for r in await self.registry.sessions() if r.owner == owner and r.id != session_id]
        if len(held) >= limit:
            raise SessionLimitError(f"user {owner} already has {len(held)} live session(s), the most one user may "
                                    "hold; end one first")

    async def owner_of(self, session_id: str, *, anywhere: bool = False) -> str:
        """Who a session of this node belongs to (404 when it is not this node's, unless
        ``anywhere``: an offer may resume a session recorded on another node)."""
        session = self._sessions.get(session_id)
        if session is not None:
            return session.record.owner
        if anywhere:
            record = await self.registry.get_session(session_id)
            if record is None:
                raise NotFoundError(f"no session with id {session_id!r}")
            return record.owner
        return (await self._record_here(session_id)).owner

    async def create_webrtc(self, offer_sdp: object, face_id: object, options: object, *,
                            session_id: str | None = None, owner: str = "") -> tuple[Session, str]:
        """A browser session in one step (place, then offer): its swapped video goes back
        on the same connection."""
        parse_offer(offer_sdp, need="send")
        record = await self.place(face_id, options, session_id=session_id, owner=owner)
        try:
            return await self.offer(record.id, offer_sdp)
        except BaseException:
            await self.registry.end_session(record.id, node_id=self.node_id)
            raise

    async def offer(self, session_id: str, offer_sdp: object) -> tuple[Session, str]:
        """Negotiate media for a recorded session: the first offer after ``place``, or a
        re-offer (the browser reconnecting, here or on another node after a failover),
        which replaces any connection the session had on this node."""
        offer = parse_offer(offer_sdp, need="send")
        record = await self.registry.get_session(session_id)
        if record is None:
            raise NotFoundError(f"no session with id {session_id!r}")
        if record.protocol != "webrtc":
            raise BadRequestError(f"session {session_id} is a {record.protocol.upper()} session; it takes no offers here")
        face = await self.faces.get(record.face_id or "")
        swap = self.resolve_options(self.swap_defaults, record.options)
        previous = self._sessions.pop(session_id, None)
        if previous is not None:
            await previous.close()
        record = record.with_changes(node_id=self.node_id, state="live")
        return await self._create("webrtc", offer, face, record.face_id, swap, record=record)

    async def create_whip(self, offer_sdp: object, record: StreamKey, *,
                          session_id: str | None = None) -> tuple[Session, str]:
        """A WHIP publisher with the key ``check_stream_key`` found: the key's face and
        options apply; no video goes back to the publisher; viewers watch over WHEP."""
        offer = parse_offer(offer_sdp, need="send")
        try:
            swap = self.resolve_options(self.swap_defaults, record.stream.swap)
        except BadRequestError as exc:
            raise UnprocessableError(f"stream key {record.key_id}: {exc.reason}") from None
        try:
            face = await self.faces.for_stream(record.stream)
        except Exception as exc:
            reason = getattr(exc, "reason", None) or str(exc)
            raise UnprocessableError(f"stream key {record.key_id}: source face unusable: {reason}") from None
        if session_id is not None:
            await self._check_placed(session_id, "whip", record.owner)
        session_record = SessionRecord(
            id=session_id or secrets.token_urlsafe(12), protocol="whip", node_id=self.node_id, owner=record.owner,
            options=dict(record.stream.swap), label=record.stream.name, state="live",
        )
        try:
            photos = dict(record.stream.map_photos)
            await self.people_map(swap, photos)
        except BadRequestError as exc:
            raise UnprocessableError(f"stream key {record.key_id}: {exc.reason}") from None
        session, answer = await self._create("whip", offer, face, None, swap, record=session_record, map_photos=photos)
        session.publisher_key_hash = record.key_hash
        return session, answer

    @staticmethod
    def is_publisher(session: Session, stream_key: str) -> bool:
        """Whether ``stream_key`` is the one that publishes ``session`` (revoked since or not)."""
        wanted = session.publisher_key_hash
        return wanted is not None and stream_key.isascii() and hmac.compare_digest(wanted, hash_key(stream_key))

    async def check_stream_key(self, stream_key: str) -> StreamKey:
        """The active record of a WHIP publisher's key: one indexed read on the store's
        threads, whatever the store's size (``ForbiddenError`` saying why not)."""
        if self.stream_keys is None:
            raise ForbiddenError("this node has no stream keys")
        try:
            record = await self.stream_keys.lookup(stream_key)
        except StreamKeyError as exc:
            log.warning("whip: stream key lookup failed: %s", exc)
            raise ServerFullError("the stream key store cannot be read; try again shortly") from None
        if record is None:
            raise ForbiddenError("stream key not recognised")
        if not record.active:
            raise ForbiddenError("stream key revoked")
        return record

    def live_key_hashes(self) -> set[str]:
        """The stream keys of this node's WHIP publishers."""
        return {s.publisher_key_hash for s in self._sessions.values() if s.publisher_key_hash is not None}

    async def end_key(self, key_hash: str, reason: str) -> None:
        """End the WHIP sessions (and their WHEP viewers) a key publishes: it was revoked."""
        for session in [s for s in self._sessions.values() if s.publisher_key_hash == key_hash]:
            log.info("whip session %s ends: %s", session.id, reason)
            await self._drop(session)

    async def _create(self, protocol, offer: Offer, face: FaceEntry, face_id: str | None, swap,
                      record: SessionRecord, map_photos: dict[str, str] | None = None) -> tuple[Session, str]:
        mapping = await self.people_map(swap, map_photos)
        self._reserve()
        session = None
        try:
            pc = RTCPeerConnection(ice.rtc_configuration(self.webrtc.ice_servers))
            session = Session(record.id, protocol, pc, face, face_id, swap, enabled=record.enabled,
                              label=record.label, record=record)
            session.map_photos = dict(map_photos or {})
            if self.observe_stats is not None:
                session.video.stats.observer = self.observe_stats(protocol)
            engine, source, options = self.engine, face.source, swap.options()
            batch_id = f"{protocol}-{session.id}"  # the batcher's fairness unit, named in its metrics
            marker = self.provenance.marker(session.id) if self.provenance is not None else None
            # who is who, always (the page lists the people to map); one descriptor a frame at most
            people = People(engine.frontal_identity, per_frame=1)
            await session.video.start_swapper(lambda: FrameSwapper(engine, source, options, session_id=batch_id, marker=marker,
                                                                   people=people, mapping=mapping))

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

            answer = await self._answer(pc, offer, f"{protocol} session {session.id}",
                                        on_refused=lambda reason: self._close_later(session, reason))
            session.video.attach(video.receiver.track, on_end=lambda: self._close_later(session, "video ended"))
            if audio is not None and offer.peer_sends_audio and audio.receiver.track is not None:
                session.audio.attach(audio.receiver.track)
            self._watch(pc, lambda: self._close_later(session, "connection ended"))
            self._sessions[session.id] = session
            await self.registry.save_session(record)  # live here: the registry is the truth for the cluster
            log.info("%s session %s started (face %s)", protocol, session.id, face.id)
            return session, answer
        except BaseException:
            if session is not None:
                if self._sessions.get(session.id) is session:
                    del self._sessions[session.id]
                await session.close()
            raise
        finally:
            self._reserved -= 1

    def _reserve(self) -> None:
        if self._closed:
            raise ServerFullError("the server is shutting down")
        limit = max(self.webrtc.max_sessions, self.capacity)
        if len(self._sessions) + self._reserved >= limit:
            raise ServerFullError(f"server full: {limit} of {limit} live sessions in use; try again later")
        self._reserved += 1

    async def _answer(self, pc: RTCPeerConnection, offer: Offer, name: str,
                      on_refused: Callable[[str], None] | None = None) -> str:
        try:
            await pc.setRemoteDescription(RTCSessionDescription(sdp=offer.sdp, type="offer"))
        except Exception as exc:  # aiortc raises ValueError, OperationError, ... for bad offers
            raise BadRequestError(f"the offer cannot be used: {exc or type(exc).__name__}") from None
        for transceiver in pc.getTransceivers():  # every media section's, before connecting starts their decoders
            bound_receiver(transceiver.receiver, f"{name} {transceiver.kind} (mid {transceiver.mid})", on_refused)
            if transceiver.kind == "video":
                complete_frames_on_marker(transceiver.receiver)  # decoded a frame interval sooner
        try:
            await pc.setLocalDescription(await pc.createAnswer())
        except Exception as exc:  # an offer aiortc took but cannot answer (it trips on what it accepted)
            log.info("an offer could not be answered: %r", exc)
            raise BadRequestError(f"the offer cannot be answered: {exc or type(exc).__name__}") from None
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

    def _close_later(self, session: Session, why: str) -> None:
        if self._sessions.get(session.id) is session and not session.closed:
            log.info("session %s ends: %s", session.id, why)
            self._spawn(self._drop(session))

    async def add_candidate(self, session_id: str, body: object) -> None:
        """Trickle ICE: one remote candidate (``{candidate, sdpMid, sdpMLineIndex}``, as the
        browser's ``RTCIceCandidate.toJSON()``), or the end of them (``candidate: ""``).
        Answers carry every local candidate, so only the peer trickles."""
        session = self.get(session_id)
        if not isinstance(body, dict) or not isinstance(body.get("candidate"), str):
            raise BadRequestError('expected a JSON object {"candidate", "sdpMid", "sdpMLineIndex"}')
        line = body["candidate"].strip()
        if not line:
            for transceiver in session.pc.getTransceivers():
                await transceiver.receiver.transport.transport.addRemoteCandidate(None)
            return
        try:
            candidate = candidate_from_sdp(line.removeprefix("candidate:"))
        except (ValueError, IndexError, AssertionError):  # aiortc asserts on a short candidate
            raise BadRequestError(f"malformed ICE candidate: {line[:80]!r}") from None
        candidate.sdpMid = body.get("sdpMid") if isinstance(body.get("sdpMid"), str) else None
        index = body.get("sdpMLineIndex")
        candidate.sdpMLineIndex = index if isinstance(index, int) and not isinstance(index, bool) else None
        if candidate.sdpMid is None and candidate.sdpMLineIndex is None:
            raise BadRequestError("the candidate needs sdpMid or sdpMLineIndex")
        if session.remote_candidates >= MAX_REMOTE_CANDIDATES:
            raise BadRequestError(f"this session has {MAX_REMOTE_CANDIDATES} ICE candidates of its peer already, "
                                  "the most it takes")
        session.remote_candidates += 1
        try:
            await session.pc.addIceCandidate(candidate)
        except ValueError as exc:
            raise BadRequestError(f"the candidate cannot be used: {exc}") from None

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
            answer = await self._answer(pc, offer, f"whep viewer {viewer.id} of {session_id}")
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

    async def describe(self, session_id: str) -> dict[str, Any]:
        """A live session on this node, or one recorded here that has no media yet."""
        session = self._sessions.get(session_id)
        if session is not None:
            return self._describe(session)
        return describe_record(await self._record_here(session_id))

    async def _record_here(self, session_id: str) -> SessionRecord:
        record = await self.registry.get_session(session_id)
        if record is None or record.node_id != self.node_id:
            raise NotFoundError(f"no session with id {session_id!r}")
        return record

    def _describe(self, session: Session) -> dict[str, Any]:
        return {**session.describe(), "node_id": self.node_id, "owner": session.record.owner}

    async def update(self, session_id: str, body: object) -> dict[str, Any]:
        """Apply ``{enabled, face_id, options}`` live (or to the record of a session that
        has no media yet); returns the new state."""
        self._check_patch(body)
        session = self._sessions.get(session_id)
        if session is None:
            record = await self._record_here(session_id)
            options = self.normalised_options(self.swap_defaults, {**record.options, **body.get("options", {})})
            await self.people_map(self.resolve_options(self.swap_defaults, options))  # its faces must exist
            changes: dict[str, Any] = {"options": options}
            if "face_id" in body:
                changes["face_id"] = (await self.faces.get(body["face_id"])).id
            if "enabled" in body:
                changes["enabled"] = body["enabled"]
            return describe_record(await self.registry.update_session(session_id, **changes))
        async with session.updates:
            changed = self.normalised_options(session.options, body["options"]) if "options" in body else {}
            options = self.resolve_options(session.options, changed) if "options" in body else None
            mapping = await self.people_map(options, session.map_photos) if options is not None else None
            face = await self.faces.get(body["face_id"]) if "face_id" in body else None
            await session.apply(enabled=body.get("enabled"), face=face, face_id=face.id if face else None, options=options,
                                mapping=mapping)
            session.record = session.record.with_changes(
                enabled=session.enabled, face_id=session.face_id, options={**session.record.options, **changed},
            )
            try:
                await self.registry.save_session(session.record)
            except RegistryUnavailable:
                log.warning("session %s changed while the registry is down; it is re-saved when it returns", session_id)
        return self._describe(session)

    @staticmethod
    def _check_patch(body: object) -> None:
        if not isinstance(body, dict) or not body:
            raise BadRequestError('expected a JSON object with any of "enabled", "face_id", "options"')
        unknown = sorted(set(body) - PATCH_KEYS)
        if unknown:
            raise BadRequestError(f"unknown field(s) {', '.join(unknown)}; expected enabled, face_id, options")
        if "enabled" in body and not isinstance(body["enabled"], bool):
            raise BadRequestError("enabled must be true or false")
        if "options" in body and not isinstance(body["options"], dict):
            raise BadRequestError("options must be a JSON object of swap settings")
        if "face_id" in body and (not isinstance(body["face_id"], str) or not body["face_id"]):
            raise BadRequestError("face_id must be a face id (see GET /api/v1/faces)")

    async def close(self, session_id: str) -> None:
        """End a session for good (``DELETE``, hang-up): its connection and its record."""
        session = self._sessions.get(session_id)
        if session is None:
            record = await self._record_here(session_id)
            if record.protocol == "rtmp" and self.kill_stream is not None and await self.kill_stream(session_id):
                log.info("rtmp session %s ended", session_id)
                return
            await self.registry.end_session(session_id, node_id=self.node_id)
            log.info("session %s (no media yet) ended", session_id)
            return
        await self._drop(session)
        log.info("session %s closed", session_id)

    async def _drop(self, session: Session) -> None:
        await session.close()
        if self._sessions.get(session.id) is session:
            del self._sessions[session.id]
        try:
            await self.registry.end_session(session.id, node_id=self.node_id)
        except RegistryUnavailable:
            log.warning("session %s ended while the registry is down; its record goes when the node re-registers", session.id)

    async def preview_jpeg(self, session_id: str) -> bytes:
        """The session's newest swapped frame as a small JPEG, whatever its protocol."""
        session = self._sessions.get(session_id)
        if session is not None:
            jpeg = await asyncio.get_running_loop().run_in_executor(None, session.video.preview_jpeg)
        elif self.preview_stream is not None:
            await self._record_here(session_id)
            jpeg = await asyncio.get_running_loop().run_in_executor(None, self.preview_stream, session_id)
        else:
            jpeg = None
        if jpeg is None:
            raise NotFoundError(f"session {session_id} has no swapped frame yet")
        return jpeg

    async def disown(self, session_id: str) -> None:
        """Close this node's copy of a session that now lives elsewhere (or was killed by
        an operator elsewhere), leaving the record alone."""
        session = self._sessions.pop(session_id, None)
        if session is not None:
            await session.close()
            log.info("session %s closed here: it moved to another node", session_id)

    def records(self) -> list[SessionRecord]:
        """The records of the sessions with media on this node (re-saved after Redis returns)."""
        return [session.record for session in self._sessions.values()]

    async def people_map(self, swap: SwapConfig, photos: dict[str, str] | None = None) -> PeopleMap | None:
        """The options' ``faces_map`` (and a command-line stream key's map ``photos``) as
        sources (None: nobody named, the rest wear the session's face); an unknown face in
        it is a 400 saying which."""
        try:
            return await self.faces.people_map(swap.faces_map, swap.unmapped, swap.reference_threshold, photos)
        except SwapcastError as exc:
            raise BadRequestError(f"faces_map: {exc}") from None

    def person_thumbnail(self, session_id: str, person_id: str) -> tuple[bytes, str] | None:
        """A live session's person's thumbnail as JPEG, and the session's owner (None: no
        such person or session here). Blocking (encodes): run it in a thread."""
        session = self._sessions.get(session_id)
        if session is None:
            return self.stream_person(session_id, person_id) if self.stream_person is not None else None
        swapper = session.video.swapper
        person = swapper.people.person(person_id) if swapper is not None and swapper.people is not None else None
        if person is None or person.thumbnail is None:
            return None
        return jpeg_preview(person.thumbnail), session.record.owner

    @staticmethod
    def normalised_options(base: SwapConfig, changes: object) -> dict[str, Any]:
        """``changes`` validated against ``base`` and written as the schema reads them
        (``"off"`` is ``false``): what a record stores and the API answers."""
        if changes is None:
            return {}
        try:
            return base.normalised_changes(changes)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None

    @staticmethod
    def resolve_options(base: SwapConfig, changes: object) -> SwapConfig:
        """``base`` with ``changes`` applied, validated by the schema (``SwapConfig.with_live_changes``)."""
        if changes is None:
            return base
        try:
            return base.with_live_changes(changes)
        except ValueError as exc:
            raise BadRequestError(str(exc)) from None

    async def snapshot(self) -> list[dict[str, Any]]:
        """Live sessions of this node, then those recorded here without media yet."""
        live = [self._describe(session) for session in self._sessions.values()]
        try:
            waiting = [describe_record(r) for r in await self.registry.sessions(self.node_id)
                       if r.id not in self._sessions and r.protocol in ("webrtc", "whip")]
        except RegistryUnavailable:
            waiting = []
        return [*live, *waiting]


def describe_record(record: SessionRecord) -> dict[str, Any]:
    """A recorded session that has no media on this node (yet)."""
    return {
        "id": record.id, "protocol": record.protocol, "face_id": record.face_id,
        "created": iso_utc(record.created),
        "enabled": record.enabled, "options": record.options, "state": record.state, "node_id": record.node_id,
        "owner": record.owner, "viewers": 0, "stats": None,
    }
