"""A bound on the encoded frames one WebRTC peer can make a node hold before they are decoded.

aiortc bounds one frame: its jitter buffer reassembles at most 512 RTP packets, each at most
1500 bytes (pylibsrtp's buffer refuses longer ones), ~750 KB. But it hands every complete
frame to the receiver's decoder thread through an unbounded ``queue.Queue``: a peer sending
frames faster than they decode (an SPS claiming 8K, slow slices) grows the node without end.
Here a frame that would take the bytes waiting for the decoder past ``MAX_QUEUED_BYTES`` is
dropped; the receiver is told, as for a decode error, so it asks the peer for a keyframe
(PLI) to start again from.

The decoder allocates pictures of whatever size an H.264 SPS or a VP8 keyframe declares
(a 16000x16000 SPS in a 64x64 stream: +1.1 GB) before any frame comes out to be checked,
so here each frame's headers are read first (``picture_limits``): a frame declaring a size
the node does not take never reaches the decoder, nor does anything after it, and
``on_refused`` is told why (the session ends); one whose header cannot be read is dropped
as damaged, and a keyframe asked for. So is a peer sending far faster than real time
(``publish_pace``): every frame it sends would be decoded up to the drops."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from aiortc import RTCRtpReceiver

from streamer.media.picture_limits import FrameSizeError, H264SizeGuard, UnreadableHeader, check_vp8_frame
from streamer.media.publish_pace import PublishingTooFast, PublishPace

log = logging.getLogger(__name__)

RTP_TICKS_PER_MS = 90  # video RTP clock, 90 kHz
MAX_QUEUED_BYTES = 16 * 1024 * 1024  # ~20 of the largest frames aiortc reassembles; 30 s of 4 Mbit/s video


class BoundedDecoderQueue(queue.Queue):
    """The receiver's decoder queue, bounded in bytes; ``put`` never blocks (the event loop
    calls it) and drops what is over the bounds. Items are ``(codec, JitterFrame)``, or
    ``None`` (the end, always taken)."""

    def __init__(self, on_drop: threading.Event, name: str, on_refused: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self.dropped = 0
        self.passed = 0  # frames handed to the decoder
        self.queued_bytes = 0
        self.refused: str | None = None  # why the peer's frames stopped reaching the decoder
        self._on_drop = on_drop
        self._name = name
        self._on_refused = on_refused
        self._h264_sizes = H264SizeGuard()  # aiortc's depacketizer hands over Annex B
        self._pace = PublishPace()

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if item is not None and not self._admits(item):
            self.dropped += 1
            return
        size = _size(item)
        if self.queued_bytes + size > MAX_QUEUED_BYTES:
            if not self.dropped:
                log.info("%s: %d bytes of frames wait for the decoder: dropping one of %d bytes (at most %d wait); "
                         "the peer is asked for a keyframe (logged once per receiver)", self._name,
                         self.queued_bytes, size, MAX_QUEUED_BYTES)
            self.dropped += 1
            self._on_drop.set()
            return
        super().put(item, block, timeout)

    def _admits(self, item: Any) -> bool:
        """False for a frame sent faster than real time or whose headers declare a picture
        size the node does not take (and every frame after one), or cannot be read."""
        if self.refused is not None:
            return False
        codec, frame = item
        mime = getattr(codec, "mimeType", "").lower()  # an RTCRtpCodecParameters
        check = {"video/h264": self._h264_sizes.check, "video/vp8": check_vp8_frame}.get(mime)
        try:
            self._pace.count(frame.timestamp // RTP_TICKS_PER_MS)
            if check is not None:
                check(frame.data)
        except (FrameSizeError, PublishingTooFast) as exc:
            self.refused = str(exc)
            log.warning("%s: %s; nothing more of it is decoded", self._name, self.refused)
            if self._on_refused is not None:
                self._on_refused(self.refused)
            return False
        except UnreadableHeader:
            self._on_drop.set()
            return False
        return True

    def _put(self, item: Any) -> None:  # under the queue's lock, as is _get
        self.queued_bytes += _size(item)
        self.passed += item is not None
        super()._put(item)

    def _get(self) -> Any:
        item = super()._get()
        self.queued_bytes -= _size(item)
        return item


def _size(item: Any) -> int:
    return 0 if item is None else len(item[1].data)


def bound_receiver(receiver: RTCRtpReceiver, name: str,
                   on_refused: Callable[[str], None] | None = None) -> BoundedDecoderQueue:
    """Swap a receiver's decoder queue for a bounded one, before its decoder thread starts
    (it is handed the queue then: at ``setRemoteDescription``'s connect, not before);
    ``on_refused(reason)`` when the peer's frames declare a picture size the node does not take."""
    if getattr(receiver, "_RTCRtpReceiver__decoder_thread", None) is not None:
        raise RuntimeError(f"{name}: the receiver's decoder thread already runs; bound it before negotiating")
    on_drop = receiver._RTCRtpReceiver__decoder_error  # type: ignore[attr-defined]
    bounded = BoundedDecoderQueue(on_drop, name, on_refused)
    receiver._RTCRtpReceiver__decoder_queue = bounded  # type: ignore[attr-defined]
    return bounded
