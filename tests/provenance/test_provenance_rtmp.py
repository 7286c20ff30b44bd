"""RTMP: a stream published with ffmpeg is swapped, re-encoded and recorded by the node; the
verifier finds the stream's mark both in the live play URL and in the recording."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from signaling.stream_keys import StreamKeyStore
from streamer.faces import FaceLibrary
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings
from streamer.media.images import write_image
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.payload import stream_hash
from streamer.provenance.verify import verify
from streamer.rtmp.client import RtmpPublishClient
from streamer.rtmp.server import RtmpServer
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.config import SwapConfig
from provenance_kit import h264

pytestmark = pytest.mark.slow

SETTINGS = ProvenanceSettings(key=b"rtmp test key", issuer=5)


def test_live_play_url_and_recording_carry_the_streams_mark(engine, astronaut_image, tmp_path):
    clip = tmp_path / "camera.mp4"
    h264(moving_face_frames(grace_hopper(), 105, (640, 480)), 2000, clip)
    face = tmp_path / "astronaut.png"
    write_image(face, astronaut_image)
    recordings = tmp_path / "recordings"
    recordings.mkdir()

    async def scenario():
        keys = StreamKeyStore(tmp_path / "data")
        faces = FaceLibrary(engine)
        settings = IngestSettings(EncoderSettings(bitrate_kbps=1500, keyframe_interval_s=1.0), provenance=SETTINGS)
        ingest = RtmpIngest(keys, engine, lambda swap: SwapConfig(**swap).options(), settings, RtmpPublishClient, faces)
        server = RtmpServer(ingest, port=0)
        await server.start()
        try:
            key, record = keys.add("cam", face, record=str(recordings))
            url = f"rtmp://127.0.0.1:{server.port}/live"
            publisher = await asyncio.create_subprocess_exec(
                "ffmpeg", "-hide_banner", "-loglevel", "error", "-re", "-i", str(clip), "-c:v", "copy",
                "-f", "flv", f"{url}/{key}", stdin=subprocess.DEVNULL)
            for _ in range(100):
                if record.key_id in ingest.streams:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # past the first keyframe out
            live = await asyncio.to_thread(verify, f"{url}/{record.play_token}", SETTINGS, seconds=2.0)
            await asyncio.wait_for(publisher.wait(), 30)
            return record.key_id, live
        finally:
            await ingest.close()
            await server.close()
            faces.close()

    key_id, live = asyncio.run(asyncio.wait_for(scenario(), 90))
    assert live.kind == "stream" and live.detection.found, live.summary()
    assert live.payload.stream == stream_hash(key_id) and live.payload.issuer == 5
    recording = next(Path(recordings).glob("*.flv"))
    recorded = verify(recording, SETTINGS)
    assert recorded.detection.found and recorded.payload.stream == stream_hash(key_id), recorded.summary()
