"""Shared helpers of the WebRTC tests: a node on 127.0.0.1 (aiohttp test server), aiortc
client peers that send a moving real face and collect what comes back, and leak checks.

Every wait is bounded: ``run`` gives each test coroutine an overall timeout."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from aiohttp.test_utils import TestClient, TestServer
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription, VideoStreamTrack
from aiortc.mediastreams import MediaStreamError

from signaling.auth import mint_token
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.app import build_app
from swapcast.config import load_config

CAMERA_SIZE = (480, 360)  # what Chromium starts with
_camera_frames: list[np.ndarray] | None = None


def run(coroutine: Awaitable, timeout: float = 40.0):
    """Run one test coroutine on a fresh event loop, bounded."""

    async def bounded():
        return await asyncio.wait_for(coroutine, timeout)

    return asyncio.run(bounded())


def camera_frames() -> list[np.ndarray]:
    global _camera_frames
    if _camera_frames is None:
        _camera_frames = moving_face_frames(grace_hopper(), 60, size=CAMERA_SIZE)
    return _camera_frames


TEST_SECRET = "swapcast-tests-" + "s" * 32  # HS256 secret of the nodes tests start


def bearer(subject: str = "tester", role: str = "user") -> dict[str, str]:
    """An Authorization header for a user of the test nodes."""
    return {"Authorization": f"Bearer {mint_token(TEST_SECRET, subject, role=role)}"}


def node_config(data_dir: Path, **webrtc):
    return load_config(environ={}, overrides={
        "server": {"data_dir": str(data_dir)},
        "rtmp": {"port": 0},
        "webrtc": {"host_addresses": ["127.0.0.1"], **webrtc},
        "auth": {"jwt_secret": TEST_SECRET},
    })


@contextlib.asynccontextmanager
async def node(engine, data_dir: Path, subject: str = "tester", role: str = "user", **webrtc):
    """A running node (the real composition root) and an HTTP client for it, signed in as
    ``subject``."""
    app = build_app(node_config(data_dir, **webrtc), engine=engine)
    client = TestClient(TestServer(app, host="127.0.0.1"), headers=bearer(subject, role))
    await client.start_server()
    try:
        yield client
    finally:
        await client.close()


class CameraTrack(VideoStreamTrack):
    """A webcam: the moving Grace Hopper face at 30 fps."""

    def __init__(self) -> None:
        super().__init__()
        self._frames = camera_frames()
        self._index = 0

    async def recv(self) -> av.VideoFrame:
        pts, time_base = await self.next_timestamp()
        frame = av.VideoFrame.from_ndarray(self._frames[self._index % len(self._frames)], format="rgb24")
        self._index += 1
        frame.pts, frame.time_base = pts, time_base
        return frame


class Collector:
    """Keeps the frames a received video track delivers (RGB), with arrival times."""

    def __init__(self) -> None:
        self.frames: list[np.ndarray] = []
        self.pts: list[int] = []
        self.times: list[float] = []
        self._task: asyncio.Task | None = None
        self._audio_task: asyncio.Task | None = None
        self._got = asyncio.Event()
        self.audio_frames = 0

    def follow(self, track) -> None:
        self._task = asyncio.ensure_future(self._read(track))

    async def _read(self, track) -> None:
        with contextlib.suppress(MediaStreamError):
            while True:
                frame = await track.recv()
                self.frames.append(frame.to_ndarray(format="rgb24"))
                self.pts.append(frame.pts)
                self.times.append(time.monotonic())
                del self.frames[:-10]  # the newest few are enough
                self._got.set()

    def follow_audio(self, track) -> None:
        async def read() -> None:
            with contextlib.suppress(MediaStreamError):
                while True:
                    await track.recv()
                    self.audio_frames += 1

        self._audio_task = asyncio.ensure_future(read())

    @property
    def count(self) -> int:
        return len(self.times)

    async def wait_for(self, count: int, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while self.count < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"only {self.count} of {count} frames arrived within {timeout} s")
            self._got.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._got.wait(), 0.5)

    async def stop(self) -> None:
        tasks = [t for t in (self._task, self._audio_task) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def client_peer() -> RTCPeerConnection:
    return RTCPeerConnection(RTCConfiguration(iceServers=[]))


async def camera_offer(pc: RTCPeerConnection, *, audio: bool = False, direction: str = "sendrecv") -> str:
    """The browser page's offer: the camera (sendrecv: the swapped video comes back)."""
    pc.addTransceiver(CameraTrack(), direction=direction)
    if audio:
        from aiortc.mediastreams import AudioStreamTrack

        pc.addTransceiver(AudioStreamTrack(), direction=direction)
    await pc.setLocalDescription(await pc.createOffer())
    return pc.localDescription.sdp


async def viewer_offer(pc: RTCPeerConnection, audio: bool = False) -> str:
    pc.addTransceiver("video", direction="recvonly")
    if audio:
        pc.addTransceiver("audio", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc.localDescription.sdp


def collect_video(pc: RTCPeerConnection) -> Collector:
    collector = Collector()

    @pc.on("track")
    def on_track(track) -> None:
        if track.kind == "video":
            collector.follow(track)
        else:
            collector.follow_audio(track)

    return collector


async def answer(pc: RTCPeerConnection, sdp: str) -> None:
    await pc.setRemoteDescription(RTCSessionDescription(sdp=sdp, type="answer"))


async def whip_publish(client: TestClient, track) -> tuple[RTCPeerConnection, str]:
    """A WHIP publisher sending ``track`` to the node under a fresh stream key (OBS's way in):
    (its connected peer, the session id from the answer's Location)."""
    import aiohttp

    created = await client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"}, headers=bearer())
    key = (await created.json())["key"]
    pc = client_peer()
    pc.addTransceiver(track, direction="sendonly")
    await pc.setLocalDescription(await pc.createOffer())
    async with aiohttp.ClientSession() as http:
        async with http.post(client.make_url("/whip"), data=pc.localDescription.sdp,
                             headers={"Content-Type": "application/sdp", "Authorization": f"Bearer {key}"}) as reply:
            assert reply.status == 201, await reply.text()
            location, sdp = reply.headers["Location"], await reply.text()
    await answer(pc, sdp)
    return pc, location.rsplit("/", 1)[1]


def swap_threads(timeout: float = 5.0) -> list[str]:
    """Our worker threads still alive, waiting (bounded) for those already told to exit:
    an executor shut down with ``wait=False`` ends its idle thread a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        alive = sorted(t.name for t in threading.enumerate() if t.name.startswith(("swap-", "face-library")))
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def own_threads() -> set[str]:
    """Threads that are not the event loop's shared executor (which is kept for reuse)."""
    return {f"{t.name}#{t.ident}" for t in threading.enumerate() if not t.name.startswith("asyncio_")}


async def settle(check, timeout: float = 5.0):
    """Poll ``check()`` until it returns a truthy value (bounded); returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.05)


def other_tasks() -> set[asyncio.Task]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


def png(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".png", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    assert ok
    return data.tobytes()


def jpeg(image: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR))
    assert ok
    return data.tobytes()


TIME_BASE = Fraction(1, 90000)
