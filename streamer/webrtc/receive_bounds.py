"""A bound on the encoded frames one WebRTC peer can make a node hold before they are decoded.

aiortc bounds one frame: its jitter buffer reassembles at most 512 RTP packets, each at most
1500 bytes (pylibsrtp's buffer refuses longer ones), ~750 KB. But it hands every complete
frame to the receiver's decoder thread through an unbounded ``queue.Queue``: a peer sending
frames faster than they decode (an SPS claiming 8K, slow slices) grows the node without end.
Here a frame that would take the bytes waiting for the decoder past ``MAX_QUEUED_BYTES`` is
dropped; the receiver is told, as for a decode error, so it asks the peer for a keyframe
(PLI) to start again from."""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from aiortc import RTCRtpReceiver

log = logging.getLogger(__name__)

MAX_QUEUED_BYTES = 16 * 1024 * 1024  # ~20 of the largest frames aiortc reassembles; 30 s of 4 Mbit/s video


class BoundedDecoderQueue(queue.Queue):
    """The receiver's decoder queue, bounded in bytes; ``put`` never blocks (the event loop
    calls it) and drops what is over the bounds. Items are ``(codec, JitterFrame)``, or
    ``None`` (the end, always taken)."""

    def __init__(self, on_drop: threading.Event, name: str) -> None:
        super().__init__()
        self.dropped = 0
        self.passed = 0  # frames handed to the decoder
        self.queued_bytes = 0
        self._on_drop = on_drop
        self._name = name

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
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


def bound_receiver(receiver: RTCRtpReceiver, name: str) -> BoundedDecoderQueue:
    """Swap a receiver's decoder queue for a bounded one, before its decoder thread starts
    (it is handed the queue then: at ``setRemoteDescription``'s connect, not before)."""
    if getattr(receiver, "_RTCRtpReceiver__decoder_thread", None) is not None:
        raise RuntimeError(f"{name}: the receiver's decoder thread already runs; bound it before negotiating")
    bounded = BoundedDecoderQueue(receiver._RTCRtpReceiver__decoder_error, name)  # type: ignore[attr-defined]
    receiver._RTCRtpReceiver__decoder_queue = bounded  # type: ignore[attr-defined]
    return bounded
