"""A WebRTC peer's encoded frames waiting for the decoder are bounded in bytes: aiortc hands
every frame its jitter buffer reassembles (up to ~750 KB) to the decoder thread through an
unbounded queue. Past the bound a frame is dropped and a keyframe asked for."""

from __future__ import annotations

import asyncio
import fractions
import sys
import threading
from pathlib import Path

import av
from aiortc import MediaStreamTrack
from aiortc.jitterbuffer import JitterFrame

from streamer.webrtc.receive_bounds import MAX_QUEUED_BYTES, BoundedDecoderQueue
from swapcast.app import NODE_KEY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import node, run, whip_publish  # noqa: E402


def _item(size: int) -> tuple[str, JitterFrame]:
    return "h264", JitterFrame(bytes(size), 0)


def test_a_frame_larger_than_the_bound_is_dropped_and_a_keyframe_asked_for():
    asked = threading.Event()
    frames = BoundedDecoderQueue(asked, "test video")
    frames.put(_item(MAX_QUEUED_BYTES + 1))
    assert frames.empty() and frames.dropped == 1 and asked.is_set()


def test_frames_past_the_queued_bytes_are_dropped_until_the_decoder_catches_up():
    asked = threading.Event()
    frames = BoundedDecoderQueue(asked, "test video")
    each = MAX_QUEUED_BYTES // 4
    for _ in range(6):
        frames.put(_item(each))
    assert (frames.qsize(), frames.dropped, frames.queued_bytes) == (4, 2, MAX_QUEUED_BYTES)
    frames.get()
    frames.put(_item(each))
    frames.put(None)  # the end always gets through
    assert (frames.qsize(), frames.dropped) == (5, 2)


def test_a_peer_sending_far_faster_than_real_time_is_refused_and_nothing_more_is_decoded():
    """30 s of 30 fps video by the RTP clock, handed over at once: the pace bound (20 s of
    video in any 10 s) ends the session with a reason; every frame after it is dropped."""
    refused: list[str] = []
    frames = BoundedDecoderQueue(threading.Event(), "test video", refused.append)
    for index in range(900):
        frames.put(("h264", JitterFrame(b"", index * 3000)))  # 33 ms apart at 90 kHz
    assert refused and "faster than real time" in refused[0]
    assert frames.passed <= 20 * 30 + 1 and frames.dropped == 900 - frames.passed


class HugeFrames(MediaStreamTrack):
    """A hostile publisher: already-encoded "H.264" access units of ``size`` bytes."""

    kind = "video"

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size, self._pts = size, 0

    async def recv(self) -> av.Packet:
        await asyncio.sleep(0.1)
        packet = av.Packet(b"\x00\x00\x00\x01\x65" + bytes(self._size))
        packet.pts, packet.time_base = self._pts, fractions.Fraction(1, 90000)
        self._pts += 9000
        return packet


def test_a_whip_publishers_decoder_reads_the_bounded_queue(engine, tmp_path):
    """Over 127.0.0.1, a publisher sending 100 KB access units of junk: the node's decoder
    thread reads the bounded queue, which never holds more than its bound, and the node
    stays healthy."""

    async def scenario():
        async with node(engine, tmp_path) as client:
            pc, session_id = await whip_publish(client, HugeFrames(100_000))
            session = client.server.app[NODE_KEY].sessions.get(session_id)
            receiver = session.pc.getTransceivers()[0].receiver
            frames = receiver._RTCRtpReceiver__decoder_queue
            most = 0
            for _ in range(300):
                most = max(most, frames.queued_bytes)
                if frames.passed >= 10:
                    break
                await asyncio.sleep(0.05)
            thread = receiver._RTCRtpReceiver__decoder_thread
            reads_it = thread is not None and thread._args[1] is frames
            healthy = (await client.get("/healthz")).status
            await pc.close()
            return type(frames), reads_it, frames.passed, most, healthy

    kind, reads_it, passed, most, healthy = run(scenario(), timeout=60)
    assert kind is BoundedDecoderQueue and reads_it and passed >= 10
    assert most <= MAX_QUEUED_BYTES
    assert healthy == 200
