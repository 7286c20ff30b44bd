"""The live latency policy, for one stream: decode every packet, swap and encode every frame
that has waited at most ``catch_up_s``, drop older ones.

One thread per stream. Decoding must see every packet (inter-frame prediction), but when
the swap falls behind, frames that have waited longer than ``catch_up_s`` since their own
packet arrived are dropped instead of swapped (the newest is always kept), so the added
latency stays bounded however slow the machine is. With ``catch_up_s`` 0 only the newest
frame is ever swapped; an RTMP stream allows a little more (``live.rtmp_catch_up_ms``), so
the burst a publisher sends when it starts (what it encoded while it connected) or after a
network hiccup is swapped, not dropped, while a machine that cannot keep up still drops.
When the publisher leaves, the frames its decoder still holds back for reordering
(B-frames) are flushed out and sent too: every frame published comes out.

While other streams share the node's batcher and it waits for company (a GPU node's), the
thread overlaps two frames, as a WebRTC session does: it tracks and prepares the newest frame
while the previous one's faces run in the batcher, then pastes and encodes that one
(``FrameSwapper.begin``/``complete``, ``FrameSwapper.overlaps``); otherwise each frame runs
start to end, its rows inline."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import av
import numpy as np

from gpu.processors.content_gate import ContentRefused
from streamer.live.h264 import EncodedVideo, H264Decoder, H264Encoder
from streamer.media.publish_pace import PublishingTooFast, PublishPace
from streamer.media.hwcodecs import SOFTWARE_DECODE, SOFTWARE_ENCODE, CodecChoice, scale_threads
from streamer.media.picture_limits import FrameSizeError, UnreadableHeader, check_frame_size
from streamer.pipeline.failure_log import FailureLog
from streamer.pipeline.frame_swapper import FrameSwapper, StageTimes, SwapInFlight

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VideoSample:
    """One compressed video frame as received (AVCC), times in ms."""

    data: bytes
    dts: int
    composition_offset: int = 0
    keyframe: bool = True  # where decoding can start again after samples were dropped
    arrived: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class SequenceHeader:
    record: bytes  # avcC


@dataclass(frozen=True)
class EndOfPublish:
    """The publisher left (or was replaced by a new connection): the frames the decoder
    holds come out now, and the next samples start afresh from a keyframe."""


Item = VideoSample | SequenceHeader | EndOfPublish


@dataclass(frozen=True)
class EncoderSettings:
    """How a stream is re-encoded, and which H.264 decoder reads it in (the node's
    ``live.video_encoder`` / ``live.video_decoder``, chosen once at start)."""

    preset: str = "ultrafast"
    bitrate_kbps: int = 2500
    keyframe_interval_s: float = 2.0
    video_encoder: CodecChoice = SOFTWARE_ENCODE
    video_decoder: CodecChoice = SOFTWARE_DECODE


# (encoded frame, the encoder's avcC when it is new or changed, else None)
Emit = Callable[[EncodedVideo, bytes | None], None]
# told of every output frame: (the stream's stats, its latency in ms, its stage times); the
# node's metrics (streamer.metrics.StreamObserver)
StatsObserver = Callable[["LiveStats", float, StageTimes], None]
ObserveStats = Callable[[str], StatsObserver]  # a new stream's observer, by protocol


class LiveStats:
    """Counters and recent latencies of one stream; read from any thread."""

    def __init__(self, window: int = 600) -> None:
        self.frames_in = 0
        self.frames_out = 0
        self.frames_dropped = 0
        self.decode_errors = 0
        self.frames_unswapped_busy = 0  # sent on unswapped: the node's batcher was saturated
        self.swap_errors = 0  # frames sent on unswapped because the swap raised
        self.latencies_ms: deque[float] = deque(maxlen=window)
        self.last_stages: StageTimes | None = None
        self.stage_cpu_ms: dict[str, float] = {}  # stage -> CPU ms of the stream's thread, all frames out so far
        self.observer: StatsObserver | None = None
        self._in_times: deque[float] = deque(maxlen=window)
        self._out_times: deque[float] = deque(maxlen=window)

    def record_input(self) -> None:
        self.frames_in += 1
        self._in_times.append(time.monotonic())

    def record_output(self, latency_ms: float, stages: StageTimes) -> None:
        self.frames_out += 1
        self.frames_unswapped_busy += stages.dropped_by_batcher
        self.latencies_ms.append(latency_ms)
        self.last_stages = stages
        for stage, cpu_ms in stages.cpu_ms.items():
            self.stage_cpu_ms[stage] = self.stage_cpu_ms.get(stage, 0.0) + cpu_ms
        self._out_times.append(time.monotonic())
        if self.observer is not None:
            self.observer(self, latency_ms, stages)

    def snapshot(self) -> dict[str, float | int | None]:
        latencies = np.array(self.latencies_ms) if self.latencies_ms else None
        since = time.monotonic() - 2.0
        stages = self.last_stages
        return {
            "frames_in": self.frames_in,
            "frames_out": self.frames_out,
            "frames_dropped": self.frames_dropped,
            "decode_errors": self.decode_errors,
            "frames_unswapped_busy": self.frames_unswapped_busy,
            "swap_errors": self.swap_errors,
            "fps_in": sum(1 for t in self._in_times if t > since) / 2.0,
            "fps_out": sum(1 for t in self._out_times if t > since) / 2.0,
            "latency_p50_ms": float(np.percentile(latencies, 50)) if latencies is not None else None,
            "latency_p99_ms": float(np.percentile(latencies, 99)) if latencies is not None else None,
            "swap_ms": stages.total if stages else None,
            "stage_cpu_ms_total": dict(self.stage_cpu_ms),
        }


class SampleInbox:
    """The bounded hand-over from the event loop to a stream's thread. Decoding needs every
    sample since the last keyframe, so when the thread falls ``limit`` samples (or
    ``max_bytes``) behind, what is queued is dropped and so are the samples after it, up to
    the next keyframe: the newest pictures win and memory stays bounded however fast the
    publisher sends."""

    def __init__(self, limit: int = 300, max_bytes: int = 64 << 20) -> None:
        self.limit, self.max_bytes = limit, max_bytes
        self.dropped = 0  # samples thrown away to catch up
        self._bytes = 0  # of the samples queued
        self._items: deque[Item] = deque()
        self._ready = threading.Condition()
        self._skip_to_keyframe = False
        self._closed = False
        self._refusal: Exception | None = None

    def put(self, item: Item) -> None:
        with self._ready:
            if self._closed or self._refusal is not None:
                return
            if isinstance(item, VideoSample):
                if len(self._items) >= self.limit or self._bytes + len(item.data) > self.max_bytes:
                    self._drop_samples()
                    self._skip_to_keyframe = True
                if self._skip_to_keyframe and not item.keyframe:
                    self.dropped += 1
                    return
                self._skip_to_keyframe = False
                self._bytes += len(item.data)
            self._items.append(item)
            self._ready.notify()

    def __len__(self) -> int:
        return len(self._items)

    def take_all(self, wait: bool = True) -> list[Item] | None:
        """Everything queued (with ``wait``, waits for something); None once closed; the
        reason given to ``refuse`` is raised here."""
        with self._ready:
            while wait and not self._items and not self._closed and self._refusal is None:
                self._ready.wait()
            if self._closed:
                return None
            if self._refusal is not None:
                raise self._refusal
            items = list(self._items)
            self._items.clear()
            self._bytes = 0
            return items

    def close(self) -> None:
        """Wake the reader for good and refuse what comes after."""
        with self._ready:
            self._closed = True
            self._items.clear()
            self._bytes = 0
            self._ready.notify_all()

    def refuse(self, reason: Exception) -> None:
        """Hand the reader ``reason`` to end on (raised by its next ``take_all``); what is
        queued and what comes after is dropped."""
        with self._ready:
            self._refusal = reason
            self._items.clear()
            self._bytes = 0
            self._ready.notify_all()

    def _drop_samples(self) -> None:
        """Drop the queued samples; the newest sequence header and any end of a publish stay."""
        headers = [item for item in self._items if isinstance(item, SequenceHeader)]
        kept = [item for item in self._items if isinstance(item, EndOfPublish) or (headers and item is headers[-1])]
        self.dropped += sum(1 for item in self._items if isinstance(item, VideoSample))
        self._items, self._bytes = deque(kept), 0


@dataclass(frozen=True)
class _Decoded:
    """A decoded frame waiting for the swap: when its own packet arrived, and whether it
    was flushed out at the end of a publish (then it is never dropped)."""

    frame: av.VideoFrame
    arrived: float
    flushed: bool = False


@dataclass
class _Frame:
    """A decoded frame between the start of its swap and its encode."""

    rgb: np.ndarray
    pts: int
    arrived: float
    flight: SwapInFlight | None = None  # None: the swap failed, the frame goes out unswapped


class LiveSwapWorker:
    """Runs decode -> swap -> encode for one stream on its own thread.

    Whatever ends the thread (``stop()``, or a failure it cannot carry on after, such as a
    picture size the encoder refuses) frees its codecs and swapper at once, and a failure
    is reported through ``on_failure`` so the stream's owner can end the stream."""

    ARRIVALS_KEPT = 256  # packets whose frame has not come out yet (B-frames hold back a few)

    def __init__(self, swapper: FrameSwapper, encoder: EncoderSettings, emit: Emit, name: str = "stream",
                 on_failure: Callable[[str], None] | None = None, catch_up_s: float = 0.0,
                 pace: PublishPace | None = None) -> None:
        self.swapper = swapper
        self.catch_up_s = catch_up_s
        self.encoder_settings = encoder
        self.stats = LiveStats()
        self.latest_rgb: np.ndarray | None = None
        self.failure: str | None = None  # why the thread ended on its own
        self._emit: Emit | None = emit
        self._on_failure = on_failure
        self._inbox = SampleInbox()
        self._pace = pace or PublishPace()
        self._decoded: deque[_Decoded] = deque()  # decoded, not yet swapped, oldest first
        self._arrivals: dict[int, float] = {}  # a decoded frame's pts -> when its own packet arrived
        self._decoder: H264Decoder | None = H264Decoder(encoder.video_decoder)
        self._refused_header: FrameSizeError | None = None  # a sequence header's size, told with the next picture
        self._swap_failures = FailureLog(log, f"stream {name}: swap failed on a frame; sending it unswapped")
        self._encoder: H264Encoder | None = None
        self._name = name
        self._thread = threading.Thread(target=self._run, name=f"swap-{name}", daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def push(self, item: Item) -> None:
        """Hand over one message (one thread, never blocks; dropped once the thread ended).
        Samples are counted as they come (``PublishPace``): a publisher far faster than
        real time ends the stream, told why."""
        if isinstance(item, VideoSample):
            try:
                self._pace.count(item.dts)
            except PublishingTooFast as exc:
                self._inbox.refuse(exc)
                return
        elif isinstance(item, EndOfPublish):
            self._pace.restart()
        self._inbox.put(item)

    def stop(self, timeout: float = 5.0) -> None:
        self._inbox.close()
        self._thread.join(timeout)

    def _run(self) -> None:
        waiting: _Frame | None = None  # begun, its faces at the batcher
        try:
            while (items := self._inbox.take_all(wait=waiting is None and not self._decoded)) is not None:
                self._decode_all(items)
                ready = self._next_decoded()
                begun = self._begin(ready.frame, ready.arrived) if ready is not None else None
                if waiting is not None:
                    self._finish_and_encode(waiting)
                    waiting = None
                if begun is not None and begun.flight is not None and begun.flight.rows is not None:
                    waiting = begun
                elif begun is not None:
                    self._finish_and_encode(begun)
        except Exception as exc:
            # the publisher is told this: the stream's own fault in words, never our internals
            stream_fault = isinstance(exc, (FrameSizeError, ContentRefused, PublishingTooFast))
            self.failure = str(exc) if stream_fault else "internal error; publish again to start afresh"
            if stream_fault:
                log.warning("stream %s: %s", self._name, self.failure)
            else:
                log.exception("stream %s: the swap thread failed", self._name)
        finally:
            self._inbox.close()
            self._release()
        on_failure, self._on_failure, self._emit = self._on_failure, None, None  # the stream owns us, not we it
        if self.failure is not None and on_failure is not None:
            on_failure(self.failure)

    def _release(self) -> None:
        """Free the codecs and the swapper now rather than whenever the stream is collected."""
        self.stats.frames_dropped += self._inbox.dropped
        self._decoder = self._encoder = None
        self._decoded.clear()
        self.latest_rgb = None
        try:
            self.swapper.close()
        except Exception:
            log.exception("stream %s: closing the frame swapper failed", self._name)

    def _decode_all(self, items: list[Item]) -> None:
        """Decode every item into ``_decoded``, each frame stamped with its own packet's
        arrival (with B-frames, the packet that releases a frame is a later one)."""
        decoder = self._decoder
        assert decoder is not None
        for item in items:
            if isinstance(item, SequenceHeader):
                try:
                    decoder.configure(item.record)
                    self._refused_header = None
                except UnreadableHeader:  # a damaged header: the decoder keeps the one it had
                    self.stats.decode_errors += 1
                except FrameSizeError as exc:
                    # never given to the decoder, and the stream ends at its next picture, as for a
                    # decoded picture's size: publishers read the server's notices between pictures
                    # (ffmpeg, refused at the header, wrote nothing through x264's first 2 s and
                    # was cut by the drain after the notice without having read it)
                    self._refused_header = exc
                continue
            if isinstance(item, EndOfPublish):
                self._add_decoded(decoder.flush(), None, flushed=True)
                continue
            if self._refused_header is not None:
                raise self._refused_header
            try:
                frames = decoder.decode(item.data, item.dts, item.composition_offset)
            except (av.error.FFmpegError, ValueError, UnreadableHeader):
                self.stats.decode_errors += 1
                continue
            self._arrivals[item.dts + item.composition_offset] = item.arrived
            while len(self._arrivals) > self.ARRIVALS_KEPT:
                del self._arrivals[next(iter(self._arrivals))]
            self._add_decoded(frames, item.arrived)

    def _add_decoded(self, frames: list[av.VideoFrame], released_at: float | None, flushed: bool = False) -> None:
        for frame in frames:
            self.stats.record_input()
            arrived = self._arrivals.pop(frame.pts, None) if frame.pts is not None else None
            self._decoded.append(_Decoded(frame, arrived or released_at or time.monotonic(), flushed))

    def _next_decoded(self) -> _Decoded | None:
        """The oldest decoded frame that has waited at most ``catch_up_s`` (older ones are
        dropped, flushed ones never), else the newest."""
        decoded = self._decoded
        limit = time.monotonic() - self.catch_up_s
        while len(decoded) > 1 and not decoded[0].flushed and decoded[0].arrived < limit:
            decoded.popleft()
            self.stats.frames_dropped += 1
        return decoded.popleft() if decoded else None

    def _begin(self, frame: av.VideoFrame, arrived: float) -> _Frame:
        """Track and prepare the frame; its faces are queued at the batcher when overlapping
        pays (``FrameSwapper.overlaps``), else they run in ``_finish_and_encode``."""
        check_frame_size(frame.width, frame.height)  # refuses sizes the encoder cannot take, before any work
        item = _Frame(frame.to_ndarray(format="rgb24", threads=scale_threads()), int(frame.pts), arrived)
        try:
            item.flight = self.swapper.begin(item.rgb, item.pts / 1000.0, overlap=self.swapper.overlaps())
        except ContentRefused:
            raise  # the content gate ends the stream (the publisher is told why)
        except Exception:  # a swap bug must not end the broadcast: the frame goes out unswapped
            self._swap_failed()
        return item

    def _finish_and_encode(self, item: _Frame) -> None:
        stages = StageTimes()
        if item.flight is not None:
            try:
                stages = self.swapper.complete(item.flight)
            except Exception:  # as in _begin: the frame goes out unswapped
                self._swap_failed()
        rgb, pts = item.rgb, item.pts
        encoder = self._encoder_for(rgb.shape[1], rgb.shape[0])
        self.latest_rgb = rgb  # the newest swapped picture, for operators' previews
        known = encoder.sequence_header
        for packet in encoder.encode(rgb, pts):
            # new with a new encoder, and when NVENC's fall back to x264 changed the SPS/PPS
            header = encoder.sequence_header if encoder.sequence_header != known else None
            known = encoder.sequence_header
            assert self._emit is not None  # only cleared when the thread ends
            self._emit(packet, header)
        self.stats.record_output((time.monotonic() - item.arrived) * 1000.0, stages)

    def _swap_failed(self) -> None:
        self._swap_failures.failed()
        self.stats.swap_errors += 1

    def _encoder_for(self, width: int, height: int) -> H264Encoder:
        if self._encoder is None or (self._encoder.width, self._encoder.height) != (width - width % 2, height - height % 2):
            settings = self.encoder_settings
            # a stream whose NVENC failed stays on x264
            codec = self._encoder.codec_choice if self._encoder is not None else settings.video_encoder
            self._encoder = H264Encoder(
                width, height, preset=settings.preset, bitrate_kbps=settings.bitrate_kbps,
                keyframe_interval_s=settings.keyframe_interval_s, codec=codec,
            )
        return self._encoder
