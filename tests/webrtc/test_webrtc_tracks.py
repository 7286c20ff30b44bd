"""The latency policy of the swapped track and the audio delay, with stand-in tracks (no
network): newest frame only, drops counted, original pts kept, several consumers, audio held
back by the measured video latency, and nothing left running after close."""

from __future__ import annotations

import asyncio
import fractions
import threading
import time

import av
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from webrtc_harness import client_peer, camera_offer, node, other_tasks, run, settle, swap_threads

from streamer.pipeline.frame_swapper import StageTimes, SwapInFlight
from streamer.webrtc.delayed_audio import DelayedAudio
from streamer.webrtc.swapped_track import SwappedVideo


class FastSource(MediaStreamTrack):
    """Frames as fast as the reader takes them (a burst), numbered in their pts."""

    kind = "video"

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.sent = 0

    async def recv(self) -> av.VideoFrame:
        if self.sent >= self.count:
            await asyncio.sleep(3600)
        await asyncio.sleep(0.002)
        frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), self.sent % 255, np.uint8), format="rgb24")
        frame = frame.reformat(format="yuv420p")
        frame.pts, frame.time_base = 1000 + self.sent * 3000, fractions.Fraction(1, 90000)
        self.sent += 1
        return frame


class SlowSwapper:
    """Stands in for ``FrameSwapper``: 30 ms per frame, inverts the picture."""

    enabled = True
    source = object()

    def __init__(self) -> None:
        self.threads: set[str] = set()
        self.closed = False

    def overlaps(self) -> bool:
        return False

    def begin(self, rgb: np.ndarray, seconds: float, overlap: bool = False) -> SwapInFlight:
        self.threads.add(threading.current_thread().name)
        time.sleep(0.03)
        rgb[:] = 255 - rgb
        return SwapInFlight(rgb, StageTimes(track=1.0, run=29.0, faces_seen=1, faces_swapped=1))

    def complete(self, flight: SwapInFlight) -> StageTimes:
        self.threads.add(threading.current_thread().name)
        return flight.times

    def close(self) -> None:
        self.closed = True


def test_newest_frame_only_drops_counted_pts_kept():
    async def scenario():
        baseline = len(other_tasks())
        video = SwappedVideo("unit")
        swapper = SlowSwapper()
        await video.start_swapper(lambda: swapper)
        source = FastSource(60)
        video.attach(source)
        first, second = video.output(), video.output()
        got_first, got_second = [], []
        for _ in range(5):
            got_first.append((await asyncio.wait_for(first.recv(), 5)).pts)
        got_second.append((await asyncio.wait_for(second.recv(), 5)).pts)
        await settle(lambda: source.sent >= 60, timeout=5)
        await asyncio.sleep(0.1)
        stats = video.stats.snapshot()
        await video.close()
        ended = []
        for output in (first, second):
            try:
                await asyncio.wait_for(output.recv(), 2)
            except MediaStreamError:
                ended.append(True)
        left = await settle(lambda: len(other_tasks()) <= baseline)
        return swapper, stats, got_first, got_second, ended, left, video.latency_s

    swapper, stats, got_first, got_second, ended, left, latency = run(scenario())
    assert swapper.threads == {"swap-unit_0"}, "one worker thread per session"
    assert swapper.closed
    assert got_first == sorted(got_first) and len(set(got_first)) == 5, "newest frames, never repeated"
    assert all((pts - 1000) % 3000 == 0 for pts in got_first + got_second), "the original pts"
    assert stats["frames_in"] == 60
    assert stats["frames_dropped"] > 20, "a 30 ms swap cannot keep up with a 2 ms burst: drops, no queue"
    assert stats["frames_out"] + stats["frames_dropped"] <= 60
    assert stats["latency_p99_ms"] < 200, "latency stays bounded by about one frame's work"
    assert stats["stages_ms"]["run"] == 29.0 and stats["fps_in"] > 0
    assert 0 < latency < 0.2
    assert ended == [True, True]
    assert left
    assert swap_threads() == []


class Beeps(MediaStreamTrack):
    kind = "audio"

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.sent = 0

    async def recv(self) -> av.AudioFrame:
        if self.sent >= self.count:
            raise MediaStreamError
        await asyncio.sleep(0.02)
        frame = av.AudioFrame(format="s16", layout="mono", samples=960)
        frame.sample_rate = 48000
        frame.pts, frame.time_base = self.sent * 960, fractions.Fraction(1, 48000)
        self.sent += 1
        return frame


def test_audio_is_delayed_by_the_video_latency():
    async def scenario():
        audio = DelayedAudio(lambda: 0.15)
        source = Beeps(10)
        output = audio.output()
        sent_at = {}
        original = source.recv

        async def stamped():
            frame = await original()
            sent_at[frame.pts] = time.monotonic()
            return frame

        source.recv = stamped
        audio.attach(source)
        delays, pts = [], []
        while True:
            try:
                frame = await asyncio.wait_for(output.recv(), 3)
            except MediaStreamError:
                break
            delays.append(time.monotonic() - sent_at[frame.pts])
            pts.append(frame.pts)
        await audio.close()
        return delays, pts

    delays, pts = run(scenario())
    assert pts == [i * 960 for i in range(10)], "every audio frame, in order"
    assert min(delays) >= 0.14 and max(delays) < 0.4


def test_peer_that_never_connects_is_dropped(engine, tmp_path, monkeypatch):
    import streamer.webrtc.manager as manager_module

    monkeypatch.setattr(manager_module, "CONNECT_TIMEOUT_S", 1.0)

    async def scenario():
        async with node(engine, tmp_path) as client:
            pc = client_peer()
            offer = await camera_offer(pc)
            response = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut"})
            assert response.status == 201
            await pc.close()  # never applies the answer: ICE never starts
            return await settle(lambda: not client.server.app[NODE_KEY].sessions.list(), timeout=8)

    from swapcast.app import NODE_KEY

    assert run(scenario())
    assert swap_threads() == []
