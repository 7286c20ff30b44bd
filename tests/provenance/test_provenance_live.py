"""Live output and the HTTP verifier: the video a WebRTC peer gets back from a node (marked by
default, nothing configured) carries the session's payload; ``POST
/api/v1/provenance/verify`` answers for an upload and refuses what it cannot read."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import datetime, timezone
import sys
from pathlib import Path

import aiohttp
import cv2
import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))  # the node test helpers

from webrtc_harness import CameraTrack, answer, client_peer, node, run  # noqa: E402

from gpu.watermark.detect import Detector  # noqa: E402
from gpu.watermark.embed import LumaPattern, mark  # noqa: E402
from streamer.provenance import routes  # noqa: E402
from streamer.provenance.marker import ProvenanceSettings  # noqa: E402
from streamer.provenance.payload import Payload, stream_hash  # noqa: E402
from streamer.samples import grace_hopper, moving_face_frames  # noqa: E402
from provenance_kit import natural_clip  # noqa: E402

pytestmark = pytest.mark.slow

SECONDS = 2
SETTLE_S = 2.0  # while the congestion controller finds the bitrate


class VgaCamera(CameraTrack):
    """The harness camera at 640x480, what the page sends (Chromium keeps the resolution)."""

    def __init__(self) -> None:
        super().__init__()
        self._frames = moving_face_frames(grace_hopper(), 60, size=(640, 480))


def test_webrtc_session_video_carries_the_sessions_mark(engine, tmp_path):
    async def scenario():
        # a loaded test machine makes aiortc's congestion control sink to the 500 kbps floor,
        # where x264 ultrafast keeps too little of the mark (README "Provenance", limits)
        async with node(engine, tmp_path, min_bitrate_kbps=1200) as client:
            pc = client_peer()
            received: list[np.ndarray] = []

            @pc.on("track")
            def on_track(track) -> None:
                async def read() -> None:
                    with contextlib.suppress(MediaStreamError):
                        while True:
                            received.append((await track.recv()).to_ndarray(format="gray"))

                if track.kind == "video":
                    asyncio.ensure_future(read())

            pc.addTransceiver(VgaCamera(), direction="sendrecv")
            await pc.setLocalDescription(await pc.createOffer())
            offer = pc.localDescription.sdp
            response = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut"})
            assert response.status == 201, await response.text()
            reply = await response.json()
            await answer(pc, reply["sdp"])
            await asyncio.sleep(SETTLE_S)
            settled = len(received)
            deadline = asyncio.get_running_loop().time() + 25
            while len(received) < settled + SECONDS * 30 and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.2)  # a loaded machine swaps slower than 30 fps: wait for the frames
            await pc.close()
            return reply["session_id"], received[settled:settled + SECONDS * 30]

    session_id, frames = run(scenario(), timeout=75)
    assert len(frames) >= 20, f"only {len(frames)} frames came back"
    detector = Detector(ProvenanceSettings().watermark_key)  # the default public key
    for frame in frames:
        detector.add(frame)
    found = detector.result()
    assert found.found, f"sync z {found.sync_z:.1f}, agreement {found.chip_agreement:.2f} over {len(frames)} frames"
    payload = Payload.from_bits(found.message)
    assert payload.issuer == 0 and payload.stream == stream_hash(session_id)


MARKED_AT = datetime(2026, 12, 1, 22, tzinfo=timezone.utc).timestamp()


def test_verify_route(engine, tmp_path, monkeypatch):
    settings = ProvenanceSettings()
    image = natural_clip(640, 480, 1, seed=4)[0]
    # a fixed hour: the payload carries it, and one still decodes for about 97 % of payloads,
    # so a payload of the wall clock's hour made this test fail in some hours
    payload = Payload.for_stream(0, "upload", seconds=MARKED_AT)
    mark(image, LumaPattern.make(settings.watermark_key, payload.bits(), 480, 640, 3.0))
    jpeg = _jpeg(image)

    async def scenario():
        async with node(engine, tmp_path) as client:
            url = "/api/v1/provenance/verify"
            raw = await client.post(url, data=jpeg, headers={"Content-Type": "image/jpeg"})
            form = aiohttp.FormData()
            form.add_field("file", jpeg, filename="photo.jpg", content_type="image/jpeg")
            multipart = await client.post(url, data=form)
            clean = await client.post(f"{url}?name=clean.jpg", data=_jpeg(natural_clip(640, 480, 1, seed=8)[0]))
            unnamed = await client.post(url, data=jpeg, headers={"Content-Type": "application/octet-stream"})
            junk = await client.post(f"{url}?name=clip.mp4", data=b"not a video")
            empty = await client.post(f"{url}?name=a.png", data=b"")
            monkeypatch.setattr(routes, "MAX_UPLOAD_BYTES", 1000)
            big = await client.post(f"{url}?name=a.jpg", data=jpeg)
            return [(r.status, await r.json()) for r in (raw, multipart, clean, unnamed, junk, empty, big)]

    (raw, multipart, clean, unnamed, junk, empty, big) = run(scenario(), timeout=60)
    for status, body in (raw, multipart):
        assert status == 200 and body["watermark"]["found"] and body["exit_code"] == 0, body
        assert body["watermark"]["payload"]["stream_hash"] == f"{stream_hash('upload'):06x}"
    assert clean[0] == 200 and not clean[1]["watermark"]["found"] and clean[1]["exit_code"] == 1
    assert unnamed[0] == 415 and "name=" in unnamed[1]["error"]
    assert junk[0] == 422 and "tmp" not in junk[1]["error"]
    assert empty[0] == 400
    assert big[0] == 413 and "limit" in big[1]["error"]


def _jpeg(rgb: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    return data.tobytes()
