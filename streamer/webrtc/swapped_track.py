"""The swapped video of one session, and the latency policy that produces it.

A reader task pulls frames from the peer's track as fast as they arrive and keeps only the
newest one; a single worker (the session's own one-thread executor) swaps that newest frame
and publishes it. Frames that arrive while the worker is busy are dropped and counted, never
queued, so the latency the server adds stays bounded by one frame's processing time.
While other sessions share the node's batcher and it waits for company (a GPU node's), the
worker overlaps two frames: it tracks and prepares the newest frame while the previous one's
faces run in the batcher, then pastes and publishes that one (a lone session, and every
session of a CPU node, runs each frame start to end: its rows run inline).

Consumers (the peer's own sender, WHEP viewers) each get a :class:`SwappedOutput` track from
:meth:`SwappedVideo.output`: its ``recv()`` returns the newest swapped frame that consumer
has not had yet, with the original pts. That is the relay: one swap, any number of viewers,
each encoder at its own pace.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any

import av
import cv2
import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from gpu.processors.content_gate import ContentRefused
from streamer.live.heap import release_freed_memory
from streamer.live.swap_worker import LiveStats
from streamer.media.hwcodecs import scale_threads
from streamer.media.images import jpeg_preview
from streamer.media.picture_limits import FrameSizeError, check_frame_size
from streamer.media.yuv import i420_frame, rgb_to_i420
from streamer.pipeline.failure_log import FailureLog
from streamer.pipeline.frame_swapper import FrameSwapper, StageTimes, SwapInFlight

log = logging.getLogger(__name__)

STAGES = ("track", "identity", "prepare", "run", "paste")


class SessionStats(LiveStats):
    """``LiveStats`` plus the per-stage times of the last frame."""

    def snapshot(self) -> dict[str, Any]:
        snap = super().snapshot()
        snap["latency_ms"] = self.latencies_ms[-1] if self.latencies_ms else None
        stages = self.last_stages
        snap["stages_ms"] = {name: getattr(stages, name) for name in STAGES} if stages else None
        snap["faces_seen"] = stages.faces_seen if stages else 0
        snap["faces_swapped"] = stages.faces_swapped if stages else 0
        return snap


class _Frame:
    """One decoded frame on its way through the worker."""

    def __init__(self, frame: av.VideoFrame, arrived: float) -> None:
        self.frame, self.arrived = frame, arrived
        self.rgb: np.ndarray | None = None
        self.convert_s = 0.0  # worker CPU seconds spent converting it
        self.swapper: FrameSwapper | None = None
        self.flight: SwapInFlight | None = None  # between FrameSwapper.begin and complete
        self.yuv: np.ndarray | None = None  # set once it is done
        self.stages = StageTimes()


class SwappedVideo:
    """One session's swap: its own worker thread, its ``FrameSwapper``, its stats."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stats = SessionStats()
        self._swap_failures = FailureLog(log, f"session {name}: swap failed on a frame; sending it unswapped")
        self.swapper: FrameSwapper | None = None
        self.latency_s = 0.0  # smoothed server-added latency, for the audio delay
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"swap-{name}")
        self._pending: tuple[av.VideoFrame, float] | None = None
        self._wake = asyncio.Event()
        self._published = asyncio.Event()  # replaced on every publish: wakes all consumers
        self._latest: tuple[np.ndarray, int, Fraction] | None = None
        self._sequence = 0
        self._tasks: list[asyncio.Task] = []
        self._closed = False
        self._on_source_end: Callable[[], None] | None = None
        self.failure: str | None = None  # why the worker could not go on (the session then ends)

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self, fn: Callable, *args) -> Any:
        """Run ``fn`` on the session's worker thread, between two frames."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def start_swapper(self, factory: Callable[[], FrameSwapper]) -> None:
        self.swapper = await self.run(factory)

    def attach(self, source: MediaStreamTrack, on_end: Callable[[], None] | None = None) -> None:
        """Start reading the peer's video track and swapping it."""
        self._on_source_end = on_end
        self._tasks.append(asyncio.ensure_future(self._read(source)))
        self._tasks.append(asyncio.ensure_future(self._work()))

    def output(self) -> SwappedOutput:
        return SwappedOutput(self)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        self._publish_event()  # wake consumers: they see closed and end
        if self.swapper is not None:
            try:  # after any frame still on the worker
                await self.run(self.swapper.close)
            except Exception:
                log.exception("session %s: closing the frame swapper failed", self.name)
        self._executor.shutdown(wait=False)
        self.swapper, self._latest, self._pending = None, None, None  # freed now, not when the session is collected
        await asyncio.get_running_loop().run_in_executor(None, release_freed_memory)

    # -- reader and worker --------------------------------------------------------------------

    async def _read(self, source: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await source.recv()
                self.stats.record_input()
                if self._pending is not None:
                    self.stats.frames_dropped += 1
                self._pending = (frame, time.monotonic())
                self._wake.set()
        except MediaStreamError:
            if self._on_source_end is not None:
                self._on_source_end()

    async def _work(self) -> None:
        try:
            await self._work_on_frames()
        except Exception as exc:  # the session cannot go on: end it, never leave it without a worker
            session_fault = isinstance(exc, (FrameSizeError, ContentRefused))
            self.failure = str(exc) if session_fault else "internal error; start a new session"
            log.warning("session %s: the swap worker stopped: %s", self.name, self.failure, exc_info=not session_fault)
            if self._on_source_end is not None:
                self._on_source_end()

    async def _work_on_frames(self) -> None:
        waiting: _Frame | None = None  # begun, its faces at the batcher
        while True:
            if waiting is None:
                await self._wake.wait()
            self._wake.clear()
            item, self._pending = self._pending, None
            begun = await self.run(self._begin, *item) if item is not None else None
            if waiting is not None:
                self._publish(await self.run(self._complete, waiting))
                waiting = None
            if begun is not None and begun.yuv is None:
                waiting = begun
            elif begun is not None:
                self._publish(begun)

    def _publish(self, done: _Frame) -> None:
        latency_ms = (time.monotonic() - done.arrived) * 1000.0
        self.stats.record_output(latency_ms, done.stages)
        self.latency_s += 0.1 * (latency_ms / 1000.0 - self.latency_s)
        frame = done.frame
        self._latest = (done.yuv, frame.pts or 0, frame.time_base or Fraction(1, 90000))
        self._sequence += 1
        self._publish_event()

    def preview_jpeg(self) -> bytes | None:
        """The newest swapped frame as a small JPEG (None before the first)."""
        latest = self._latest
        if latest is None:
            return None
        return jpeg_preview(cv2.cvtColor(latest[0], cv2.COLOR_YUV2RGB_I420))

    def _publish_event(self) -> None:
        event, self._published = self._published, asyncio.Event()
        event.set()

    def _begin(self, frame: av.VideoFrame, arrived: float) -> _Frame:
        """Worker thread: track and prepare a decoded frame; done at once (``yuv`` set)
        unless its faces were queued at a shared batcher."""
        check_frame_size(frame.width, frame.height)  # what the encoders could not take ends the session
        item = _Frame(frame, arrived)
        swapper = item.swapper = self.swapper
        if swapper is None or not swapper.enabled or swapper.source is None:
            item.yuv = _i420(frame)
            return item
        converting = time.thread_time()
        item.rgb = frame.to_ndarray(format="rgb24", threads=scale_threads())
        item.convert_s = time.thread_time() - converting
        seconds = float((frame.pts or 0) * (frame.time_base or Fraction(1, 90000)))
        try:
            item.flight = swapper.begin(item.rgb, seconds, overlap=swapper.overlaps())
        except ContentRefused:
            raise  # the content gate ends the session (its failure says why)
        except Exception:  # a swap bug must not end the session: the frame goes out unswapped
            return self._unswapped(item)
        return item if item.flight.rows is not None else self._complete(item)

    def _complete(self, item: _Frame) -> _Frame:
        """Worker thread: paste the frame's swapped faces back -> I420 planes."""
        try:
            item.stages = item.swapper.complete(item.flight)
        except Exception:  # a swap bug must not end the session: the frame goes out unswapped
            return self._unswapped(item)
        converting = time.thread_time()
        item.yuv = rgb_to_i420(item.rgb)
        item.stages.cpu_ms["convert"] = (item.convert_s + time.thread_time() - converting) * 1000.0  # decoded -> RGB -> I420
        return item

    def _unswapped(self, item: _Frame) -> _Frame:
        self._swap_failures.failed()
        self.stats.swap_errors += 1
        item.yuv, item.stages = _i420(item.frame), StageTimes()
        return item

    # -- consumers ------------------------------------------------------------------------------

    async def next_frame(self, seen: int) -> tuple[int, av.VideoFrame]:
        """The newest swapped frame after sequence number ``seen`` (waits for one)."""
        while self._sequence <= seen or self._latest is None:
            if self._closed:
                raise MediaStreamError
            await self._published.wait()
        if self._closed:
            raise MediaStreamError
        yuv, pts, time_base = self._latest
        frame = i420_frame(yuv)
        frame.pts = pts
        frame.time_base = time_base
        return self._sequence, frame


def _i420(frame: av.VideoFrame) -> np.ndarray:
    if frame.format.name != "yuv420p" or frame.width % 2 or frame.height % 2:
        frame = frame.reformat(width=frame.width & ~1, height=frame.height & ~1, format="yuv420p", threads=scale_threads())
    return frame.to_ndarray()


class SwappedOutput(MediaStreamTrack):
    """One consumer's view of a session's swapped video."""

    kind = "video"

    def __init__(self, video: SwappedVideo) -> None:
        super().__init__()
        self._video = video
        self._seen = 0

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        self._seen, frame = await self._video.next_frame(self._seen)
        return frame
