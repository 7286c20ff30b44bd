"""RTMP ingest: OBS/ffmpeg publish with a stream key; the swapped stream is re-published to
the key's destinations, recorded, and can be played from this server.

A stream outlives its publisher for ``resume_window_s``: a publisher that reconnects with
the same key (as OBS does after a network blip) resumes the same stream, and viewers and
destinations carry on with continuous timestamps.

Each live stream has a record in the session registry under ``rtmp_session_id(key)`` (the
id a gateway computes from the key alone), so the gateway routes a reconnecting publisher
back here, or to another node when this one died."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpu.analysis.people import People
from gpu.engine import FaceEngine, SourceFace
from gpu.errors import SwapcastError
from gpu.options import SwapOptions
from signaling.log_safety import quoted
from signaling.registry import MemoryRegistry, Registry, RegistryUnavailable, SessionRecord
from signaling.stream_keys import StreamKey, StreamKeyError, StreamKeyStore, play_handle, rtmp_session_id
from streamer.live.flv_file import FlvFileWriter, recording_path
from streamer.live.h264 import EncodedVideo
from streamer.live.heap import release_freed_memory
from streamer.live.interleave import AudioDelay
from streamer.live.metadata import node_metadata
from streamer.live.outputs import Headers, Output, PlayerOutput, PublishClientFactory, PushOutput, RecordingOutput
from streamer.live.swap_worker import (
    EncoderSettings,
    EndOfPublish,
    LiveSwapWorker,
    ObserveStats,
    SequenceHeader,
    VideoSample,
)
from streamer.faces import FaceLibrary
from streamer.media.images import jpeg_preview
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.pipeline.people_map import PeopleMap, describe_people
from streamer.provenance.marker import ProvenanceSettings
from streamer.rtmp import amf0
from streamer.rtmp.errors import RtmpProtocolError
from streamer.rtmp.flv import VideoPacketType, build_video_tag, is_video_keyframe, parse_video_tag
from streamer.rtmp.handler import MediaMessage, Player, Publisher, PublishRejected

log = logging.getLogger(__name__)

GOP_CACHE_LIMIT = 600  # messages kept since the last keyframe, so a new viewer starts at once
FRAME_GAP_MS = 33  # spacing inserted between a dropped publisher's last frame and the next one's first


@dataclass(frozen=True)
class IngestSettings:
    encoder: EncoderSettings
    push_retry_initial_s: float = 1.0
    push_retry_max_s: float = 30.0
    resume_window_s: float = 30.0
    provenance: ProvenanceSettings | None = None  # watermarks swapped frames (re-publish, recording, play)
    catch_up_s: float = 0.5  # how long a decoded frame may wait for the swap before it is dropped (swap_worker)


class LiveStream:
    """One stream key while it is live: swap worker, headers, GOP cache and outputs."""

    def __init__(self, record: StreamKey, source: SourceFace, options: SwapOptions, engine: FaceEngine,
                 settings: IngestSettings, connect_push: PublishClientFactory, mapping: PeopleMap | None = None) -> None:
        self.key_id = record.key_id
        self.key_hash = record.key_hash
        self.play_token = record.play_token
        self.name = record.stream.name
        self.created = time.time()
        self.publisher: Publisher | None = None
        self.record: SessionRecord | None = None  # set by the ingest: the registry's view
        self.publishes = 0
        self.headers = Headers()
        self.players: set[PlayerOutput] = set()
        self._loop = asyncio.get_running_loop()
        self._gop: list[MediaMessage] = []
        self._published_metadata: dict | None = None  # the publisher's onMetaData (its audio fields are kept)
        self._video_header: bytes | None = None  # the node's encode's avcC, once it has one
        self._audio = AudioDelay(self._fan_out)
        self._offset = 0  # added to the publisher's timestamps: continuity across reconnects
        self._last_in = -FRAME_GAP_MS
        self._settings = settings
        self.outputs: list[Output] = [
            PushOutput(url, self.headers, connect_push, retry_initial_s=settings.push_retry_initial_s,
                       retry_max_s=settings.push_retry_max_s)
            for url in record.stream.push
        ]
        self._final_push: list[dict] | None = None  # the destinations' last state, once closed
        self._record_target = record.stream.record
        marker = settings.provenance.marker(record.key_id) if settings.provenance is not None else None
        swapper = FrameSwapper(engine, source, options, session_id=f"rtmp-{record.key_id}", marker=marker,
                               people=People(engine.frontal_identity, per_frame=1), mapping=mapping)
        self.worker = LiveSwapWorker(swapper, settings.encoder, self._from_worker, quoted(self.name),
                                     on_failure=self._from_worker_failure, catch_up_s=settings.catch_up_s)
        self.teardown: asyncio.Task[None] | None = None  # ends the stream when no publisher comes back
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def failed(self) -> str | None:
        """Why the stream cannot go on (its swap thread ended on a failure), else None."""
        return self.worker.failure

    async def run_publisher(self, publisher: Publisher) -> None:
        self.publisher, self.publishes = publisher, self.publishes + 1
        if self._record_target:
            started = time.strftime("%Y%m%d-%H%M%S")
            writer = FlvFileWriter(recording_path(self._record_target, self.name, started))
            self.outputs.append(RecordingOutput(writer, self.headers))
        first = True
        try:
            async for message in publisher.media():
                if first:
                    self._offset, first = self._last_in + FRAME_GAP_MS - message.timestamp, False
                timestamp = message.timestamp + self._offset
                self._last_in = max(self._last_in, timestamp)
                if message.kind == "video":
                    await self._video_in(publisher, message.payload, timestamp)
                elif message.kind == "audio":
                    self._audio_in(MediaMessage("audio", timestamp, message.payload))
                else:
                    self._metadata_in(message.payload)
        finally:
            self.worker.push(EndOfPublish())  # what the decoder holds back for reordering comes out too
            self._audio.drain()
            if self.publisher is publisher:
                self.publisher = None
            for output in [o for o in self.outputs if isinstance(o, RecordingOutput)]:
                self.outputs.remove(output)
                await output.close()

    async def _video_in(self, publisher: Publisher, payload: bytes, timestamp: int) -> None:
        try:
            tag = parse_video_tag(payload)
        except RtmpProtocolError as exc:
            log.info("%s: skipping a malformed video message (%s)", quoted(self.name), exc)
            return
        if tag.codec != "avc":
            await publisher.close("only H.264 (AVC) video is supported; set the encoder to x264/H.264")
            return
        if tag.is_sequence_header:
            self.worker.push(SequenceHeader(tag.data))
        elif tag.packet_type == VideoPacketType.NALU:
            self.worker.push(VideoSample(tag.data, timestamp, tag.composition_time, keyframe=tag.is_keyframe))

    def _metadata_in(self, payload: bytes) -> None:
        """The publisher's onMetaData (OBS and ffmpeg send it with @setDataFrame): its audio
        fields go into the stream's own metadata (``streamer.live.metadata``), sent again
        when they change after the video started."""
        try:
            values = amf0.decode_all(payload)
        except RtmpProtocolError:
            return
        if values[:1] == ["@setDataFrame"]:
            values = values[1:]
        if len(values) == 2 and values[0] == "onMetaData" and isinstance(values[1], dict):
            self._published_metadata = dict(values[1])
            if self._video_header is not None:
                self._send_metadata()

    def _send_metadata(self) -> None:
        """The node's onMetaData (its encode's size, codec and bitrate, encoder swapcast; the
        publisher's audio), to every output and to every output that joins later."""
        assert self._video_header is not None
        message = node_metadata(self._video_header, self._settings.encoder.bitrate_kbps, self._published_metadata)
        self.headers.metadata = message
        self._fan_out(message)

    def _audio_in(self, message: MediaMessage) -> None:
        if self.headers.update(message):
            self._fan_out(message)
        else:
            self._audio.audio(message)

    def _from_worker(self, packet: EncodedVideo, header: bytes | None) -> None:
        self._loop.call_soon_threadsafe(self._video_out, packet, header)

    def _from_worker_failure(self, reason: str) -> None:
        self._loop.call_soon_threadsafe(self._cut_publisher, reason)

    def _cut_publisher(self, reason: str) -> None:
        """The swap thread is gone: tell the publisher why; the ingest then ends the stream."""
        if self.publisher is not None:
            task = asyncio.ensure_future(self.publisher.close(reason))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    def _video_out(self, packet: EncodedVideo, header: bytes | None) -> None:
        if header is not None:
            self._video_header = header
            self._send_metadata()  # before the video's own header: outputs learn the new size first
            body = build_video_tag(header, keyframe=True, packet_type=VideoPacketType.SEQUENCE_HEADER)
            message = MediaMessage("video", packet.dts, body)
            self.headers.update(message)
            self._fan_out(message)
        body = build_video_tag(packet.data, keyframe=packet.keyframe, composition_time=packet.pts - packet.dts)
        self._audio.video(MediaMessage("video", packet.dts, body))

    def _fan_out(self, message: MediaMessage) -> None:
        if message.kind == "video" and is_video_keyframe(message.payload) and message is not self.headers.video:
            self._gop = []
        if message not in self.headers.messages() and len(self._gop) < GOP_CACHE_LIMIT:
            self._gop.append(message)
        for output in [*self.outputs, *self.players]:
            try:
                output.send(message)
            except Exception:  # one broken output must not stop the others
                log.exception("%s: output %s failed", quoted(self.name), output.name)

    def add_player(self, player: Player) -> PlayerOutput:
        output = PlayerOutput(player, self.headers)
        for message in self._gop:
            output.send(message)
        self.players.add(output)
        return output

    def info(self) -> dict:
        return {
            "id": self.record.id,
            "key_id": self.key_id,
            "protocol": "rtmp",
            "owner": self.record.owner,
            "node_id": self.record.node_id,
            "state": self.record.state,
            "connection": "publishing" if self.publisher is not None else "waiting for the publisher",
            "name": self.name,
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.created)),
            "publishing": self.publisher is not None,
            "publisher": self.publisher.remote if self.publisher else None,
            "players": len(self.players),
            "push": self._push_info() if self._final_push is None else self._final_push,
            "stats": self.worker.stats.snapshot(),
            "people": self.people(),
        }

    def people(self) -> list[dict]:
        swapper = self.worker.swapper
        if swapper.people is None:
            return []
        return describe_people(swapper.people.snapshot(), swapper.mapping, f"/api/v1/sessions/{self.record.id}/people")

    def _push_info(self) -> list[dict]:
        return [{"url": o.url, "connected": o.connected, "attempts": o.attempts, "error": o.last_error}
                for o in self.outputs if isinstance(o, PushOutput)]

    async def close(self) -> None:
        """End the stream and let go of everything it holds (outputs, cached frames, codecs);
        what its push destinations did stays readable in ``info()``."""
        try:
            if self.publisher is not None:
                await self.publisher.close("stream closed")
            for output in [*self.outputs, *self.players]:
                with contextlib.suppress(Exception):
                    await output.close()
            self._final_push = self._push_info()
            self.outputs, self.players, self._gop = [], set(), []
            self._audio.close()
            await asyncio.gather(*self._closing, return_exceptions=True)
        finally:  # the swap thread ends even when closing is cut short (the server shutting down)
            await asyncio.get_running_loop().run_in_executor(None, self.worker.stop)


class RtmpIngest:
    """The RTMP server's handler: stream keys in, live streams out."""

    def __init__(self, keys: StreamKeyStore, engine: FaceEngine, base_options: Callable[[dict], SwapOptions],
                 settings: IngestSettings, connect_push: PublishClientFactory, faces: FaceLibrary,
                 registry: Registry | None = None, node_id: str = "local") -> None:
        self._keys = keys
        self._faces = faces
        self.registry = registry or MemoryRegistry()
        self.node_id = node_id
        self._engine = engine
        self._options = base_options
        self._settings = settings
        self._connect_push = connect_push
        self.streams: dict[str, LiveStream] = {}
        self.observe_stats: ObserveStats | None = None  # set by the node: its metrics

    async def authorize_publish(self, app: str, name: str) -> None:
        record = await self._key(name)
        try:
            await self._faces.for_stream(record.stream)  # registered once, cached by the library
        except SwapcastError as exc:
            raise PublishRejected("NetStream.Publish.BadName", f"the stream key's source face is unusable: {exc}") from None
        try:
            await self._people_map(record)
        except SwapcastError as exc:
            raise PublishRejected("NetStream.Publish.BadName", f"the stream key's faces map is unusable: {exc}") from None
        try:
            await self.registry.save_session(self._record(record, name))
        except RegistryUnavailable as exc:
            raise PublishRejected("NetStream.Publish.Failed", f"{exc}; try again shortly") from None

    def _record(self, record: StreamKey, stream_key: str) -> SessionRecord:
        return SessionRecord(id=rtmp_session_id(stream_key), protocol="rtmp", node_id=self.node_id, owner=record.owner,
                             options=dict(record.stream.swap), label=record.stream.name, state="live",
                             play_handle=play_handle(record.play_token))

    async def _key(self, name: str) -> StreamKey:
        """The active record of a presented stream key (an indexed read on the store's
        threads), else ``PublishRejected`` saying why."""
        try:
            record = await self._keys.lookup(name)
        except StreamKeyError as exc:
            log.warning("rtmp: stream key lookup failed: %s", exc)
            raise PublishRejected("NetStream.Publish.Failed", "the stream key store cannot be read; try again shortly") from None
        if record is None:
            raise PublishRejected("NetStream.Publish.BadName", "unknown stream key")
        if not record.active:
            raise PublishRejected("NetStream.Publish.BadName", "stream key revoked")
        return record

    async def on_publish(self, publisher: Publisher) -> None:
        try:
            record = await self._key(publisher.name)
        except PublishRejected as exc:  # revoked between authorize and now
            await self._refuse(publisher, exc.description)
            return
        # every await comes before the look-up: a stream is created and listed in one step, so
        # two publishes of one key that start together share it, and none is left unlisted
        # (and never ended) with its swap thread running
        try:
            face = await self._faces.for_stream(record.stream)
            mapping = await self._people_map(record)
        except SwapcastError as exc:  # its owner deleted the face since it was authorised
            await self._refuse(publisher, f"the stream key's source face is unusable: {exc}")
            return
        while (stream := self.streams.get(record.key_id)) is not None and stream.failed:
            await self._end(stream)  # never resume a stream whose swap thread died
        if stream is None:
            stream = LiveStream(record, face.source, self._options(record.stream.swap),
                                self._engine, self._settings, self._connect_push, mapping)
            stream.record = self._record(record, publisher.name)
            if self.observe_stats is not None:
                stream.worker.stats.observer = self.observe_stats("rtmp")
            self.streams[record.key_id] = stream
        elif stream.publisher is not None:
            await stream.publisher.close("replaced by a new connection with the same stream key")
        if stream.teardown is not None:
            stream.teardown.cancel()
            stream.teardown = None
        log.info("rtmp: %s publishing from %s", quoted(stream.name), publisher.remote)
        await stream.run_publisher(publisher)
        log.info("rtmp: %s publisher left (%s)", quoted(stream.name), publisher.ended_reason)
        if self.streams.get(stream.key_id) is not stream:  # ended meanwhile (its key revoked, an operator's kill)
            return
        if stream.failed:
            log.warning("rtmp: %s ended: %s", quoted(stream.name), stream.failed)
            await self._end(stream)
        elif stream.publisher is None:
            if stream.teardown is not None:  # one timer per stream: none left running unseen
                stream.teardown.cancel()
            stream.teardown = asyncio.ensure_future(self._end_later(stream))

    async def _people_map(self, record: StreamKey) -> PeopleMap | None:
        """The key's map faces (face ids over the API, stored photos on the command line)."""
        swap = record.stream.swap
        if not swap.get("faces_map") and not record.stream.map_photos and swap.get("unmapped", "source") == "source":
            return None
        threshold = self._options(swap).reference_threshold
        return await self._faces.people_map(swap.get("faces_map") or {}, swap.get("unmapped", "source"), threshold,
                                            record.stream.map_photos)

    def person_thumbnail(self, session_id: str, person_id: str) -> tuple[bytes, str] | None:
        """A live stream's person's thumbnail as JPEG, and the stream's owner."""
        stream = next((s for s in self.streams.values() if s.record.id == session_id), None)
        people = stream.worker.swapper.people if stream is not None else None
        person = people.person(person_id) if people is not None else None
        if person is None or person.thumbnail is None:
            return None
        return jpeg_preview(person.thumbnail), stream.record.owner

    async def _refuse(self, publisher: Publisher, reason: str) -> None:
        """Cut a publish that cannot start, and end the session record its authorisation
        made unless a stream of the key (a resumable one) still holds it."""
        await publisher.close(reason)
        session_id = rtmp_session_id(publisher.name)
        if not any(stream.record.id == session_id for stream in self.streams.values()):
            with contextlib.suppress(RegistryUnavailable):
                await self.registry.end_session(session_id, node_id=self.node_id)

    async def _end_later(self, stream: LiveStream) -> None:
        await asyncio.sleep(self._settings.resume_window_s)
        stream.teardown = None  # done, not cancelled: _end must not cancel its own caller
        if stream.publisher is None:
            await self._end(stream)

    async def _end(self, stream: LiveStream) -> None:
        """End a listed stream, cutting its publisher if it still has one (a failed stream's
        publisher may not have seen the cut yet); a stream is listed from its creation until
        here, so whatever is not listed has been closed."""
        if stream.teardown is not None:
            stream.teardown.cancel()
            stream.teardown = None
        if self.streams.get(stream.key_id) is stream:
            del self.streams[stream.key_id]
            await stream.close()
            await asyncio.get_running_loop().run_in_executor(None, release_freed_memory)
            try:
                await self.registry.end_session(stream.record.id, node_id=self.node_id)
            except RegistryUnavailable:
                log.warning("rtmp: %s ended while the registry is down", quoted(stream.name))

    def live_key_hashes(self) -> set[str]:
        """The keys publishing (or waiting for their publisher to come back) here."""
        return {stream.key_hash for stream in self.streams.values()}

    async def end_key(self, key_hash: str, reason: str) -> None:
        """End a key's stream at once (its key was revoked): publisher cut with ``reason``,
        pushes and players closed, play token dead, registry record gone."""
        for stream in [s for s in self.streams.values() if s.key_hash == key_hash]:
            log.info("rtmp: %s ended: %s", quoted(stream.name), reason)
            if stream.publisher is not None:
                await stream.publisher.close(reason)
                stream.publisher = None
            await self._end(stream)

    async def kill(self, session_id: str) -> bool:
        """End a live stream at once (an operator's kill): publisher cut, outputs closed."""
        for stream in list(self.streams.values()):
            if stream.record.id == session_id:
                if stream.publisher is not None:
                    await stream.publisher.close("ended by an operator")
                    stream.publisher = None
                await self._end(stream)
                return True
        return False

    def records(self) -> list[SessionRecord]:
        return [stream.record for stream in self.streams.values()]

    def preview_jpeg(self, session_id: str) -> bytes | None:
        """The newest swapped picture of a live stream, as a small JPEG (None: no such
        stream here, or no frame yet)."""
        stream = next((s for s in self.streams.values() if s.record.id == session_id), None)
        rgb = stream.worker.latest_rgb if stream is not None else None
        return jpeg_preview(rgb) if rgb is not None else None

    def _playable(self, name: str) -> LiveStream | None:
        """Play names a stream by its key's play token: a secret of its own, so knowing a
        key id or a session id (shown in lists and logs) is not enough to watch."""
        wanted = name.encode("utf-8", "replace")
        return next((s for s in self.streams.values() if secrets.compare_digest(s.play_token.encode(), wanted)), None)

    async def authorize_play(self, app: str, name: str) -> None:
        if self._playable(name) is None:
            raise PublishRejected("NetStream.Play.StreamNotFound",
                                  "no live stream with that play token (play by the stream key's play token)")

    async def on_play(self, player: Player) -> None:
        stream = self._playable(player.name)
        if stream is None:
            return
        output = stream.add_player(player)
        try:
            await player.wait_closed()
        finally:
            stream.players.discard(output)

    def sessions(self) -> list[dict]:
        return [stream.info() for stream in self.streams.values()]

    async def close(self) -> None:
        for stream in list(self.streams.values()):
            if stream.teardown is not None:
                stream.teardown.cancel()
                stream.teardown = None
            await stream.close()
        self.streams.clear()
