"""A stream whose headers declare a huge picture, on each way media enters a node: decoders
allocate what an H.264 SPS or a VP8 keyframe declares before any frame is checked (a 64x64
stream whose SPS says 16000x16000 grew a decoder by 1.1 GB, 2.6 GB with frame threads). The
headers are read first: over RTMP the publisher is told why in an error onStatus and its
stream ends; over WebRTC the session ends with the reason in the node's log and none of its
frames reaches the decoder; an offline job fails saying why. Another stream of the same node
goes on meanwhile."""

from __future__ import annotations

import asyncio
import fractions
import logging
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest
from aiortc import MediaStreamTrack
from media_fixtures import camera_messages

from signaling.stream_keys import StreamKeyStore
from streamer.faces import FaceLibrary
from streamer.jobs.split import split_video
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings
from streamer.media.errors import VideoError
from streamer.media.transcode import transcode_video
from streamer.rtmp.client import RtmpClientError, RtmpPublishClient
from streamer.rtmp.flv import VideoPacketType, build_video_tag, parse_avc_decoder_config, parse_video_tag, split_annexb
from streamer.rtmp.handler import MediaMessage
from streamer.rtmp.server import RtmpServer
from swapcast.app import NODE_KEY
from swapcast.benchmarks.fuzz.picture_bombs import resize_avcc, resize_sps, resize_vp8_keyframe
from swapcast.config import SwapConfig
from verifier_client import post_to_verifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import answer, camera_offer, client_peer, collect_video, node, run, whip_publish  # noqa: E402

pytestmark = pytest.mark.slow

HUGE = (1000, 1000)  # macroblocks a side: 16000x16000


def _x264(width: int, height: int, frames: int, keyframe_every: int = 1000) -> list[bytes]:
    """Annex B access units of a small real stream, SPS and PPS in-band on keyframes."""
    encoder = av.CodecContext.create("libx264", "w")
    encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuv420p"
    encoder.time_base = fractions.Fraction(1, 25)
    encoder.options = {"preset": "ultrafast", "tune": "zerolatency", "x264-params": f"keyint={keyframe_every}"}
    rng = np.random.default_rng(0)
    packets = []
    for index in range(frames):
        frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (height, width, 3), np.uint8), format="rgb24")
        frame.pts = index
        packets += [bytes(p) for p in encoder.encode(frame)]
    return packets + [bytes(p) for p in encoder.encode(None)]


def _huge_sps(packet: bytes) -> bytes:
    return b"".join(b"\x00\x00\x00\x01" + (resize_sps(u, *HUGE) if u[0] & 0x1F == 7 else u) for u in split_annexb(packet))


# -- RTMP ---------------------------------------------------------------------------------------


def _crafted_publish(grace_image, way: str) -> list[MediaMessage]:
    """A camera publish whose SPS declares 16000x16000: in its sequence header, or in-band in
    a keyframe after a sequence header that is fine."""
    messages = camera_messages(grace_image, 10)
    header = parse_video_tag(messages[0].payload)
    if way == "sequence header":
        body = build_video_tag(resize_avcc(header.data, *HUGE), keyframe=True, packet_type=VideoPacketType.SEQUENCE_HEADER)
        return [MediaMessage("video", 0, body), *messages[1:]]
    config = parse_avc_decoder_config(header.data)
    in_band = [resize_sps(config.sps[0], *HUGE), config.pps[0]]
    keyframe = parse_video_tag(messages[1].payload)
    body = build_video_tag(b"".join(len(u).to_bytes(4, "big") + u for u in in_band) + keyframe.data, keyframe=True)
    return [messages[0], MediaMessage("video", messages[1].timestamp, body), *messages[2:]]


@pytest.mark.parametrize("way", ["sequence header", "in-band SPS"])
def test_an_rtmp_publisher_declaring_16000x16000_is_told_why_and_another_stream_goes_on(engine, grace_image, tmp_path, way):
    async def scenario():
        keys, faces = StreamKeyStore(tmp_path / "data"), FaceLibrary(engine)
        ingest = RtmpIngest(keys, engine, lambda swap: SwapConfig(**swap).options(),
                            IngestSettings(EncoderSettings()), RtmpPublishClient, faces)
        server = RtmpServer(ingest, port=0)
        await server.start()
        url = f"rtmp://127.0.0.1:{server.port}/live"
        try:
            good_key, good = keys.add("good cam", face_id="astronaut")
            bad_key, bad = keys.add("bad cam", face_id="astronaut")
            camera = camera_messages(grace_image, 150)
            well_behaved = RtmpPublishClient(f"{url}/{good_key}", timeout=10)
            await well_behaved.connect()
            for message in camera[:20]:
                await well_behaved.send(message)
                await asyncio.sleep(0.04)
            attacker = RtmpPublishClient(f"{url}/{bad_key}", timeout=10)
            await attacker.connect()
            refusal = None
            for message in _crafted_publish(grace_image, way) * 5:
                try:
                    await attacker.send(message)
                except RtmpClientError as exc:
                    refusal = exc
                    break
                await asyncio.sleep(0.04)
            for _ in range(100):  # ended, not kept for a reconnect
                if bad.key_id not in ingest.streams:
                    break
                await asyncio.sleep(0.05)
            out_before = ingest.streams[good.key_id].worker.stats.frames_out
            for message in camera[20:]:  # the well-behaved stream goes on after the refusal
                await well_behaved.send(message)
                await asyncio.sleep(0.04)
            for _ in range(400):
                if ingest.streams[good.key_id].worker.stats.frames_out >= out_before + 10:
                    break
                await asyncio.sleep(0.05)
            good_stream = ingest.streams[good.key_id]
            result = (refusal, bad.key_id in ingest.streams, good_stream.failed,
                      good_stream.worker.stats.frames_out - out_before)
            await well_behaved.close()
            await attacker.close()
            return result
        finally:
            await ingest.close()
            await server.close()
            faces.close()

    refusal, bad_still_listed, good_failed, good_frames_after = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert refusal is not None
    assert "declares 16000x16000 pictures, which cannot be re-encoded: each side must be 16 to 4096 pixels" in str(refusal)
    assert not bad_still_listed
    assert good_failed is None and good_frames_after >= 10


# -- WebRTC -------------------------------------------------------------------------------------


class CraftedVideo(MediaStreamTrack):
    """A hostile WHIP publisher: encoded access units whose first keyframe declares 16000x16000
    (an H.264 SPS) or 16383x16383 (a VP8 keyframe), then the rest of a real 64x64 stream."""

    kind = "video"

    def __init__(self, codec: str) -> None:
        super().__init__()
        self._packets = self._crafted(codec)
        self._index = 0

    @staticmethod
    def _crafted(codec: str) -> list[bytes]:
        if codec == "h264":
            packets = _x264(64, 64, 30, keyframe_every=10)
            return [_huge_sps(p) for p in packets]
        encoder = av.CodecContext.create("libvpx", "w")
        encoder.width = encoder.height = 64
        encoder.pix_fmt, encoder.time_base = "yuv420p", fractions.Fraction(1, 25)
        packets = []
        for index in range(30):
            frame = av.VideoFrame.from_ndarray(np.full((64, 64, 3), index * 8, np.uint8), format="rgb24")
            frame.pts = index
            packets += [bytes(p) for p in encoder.encode(frame)]
        return [p if p[0] & 1 else resize_vp8_keyframe(p, 16383, 16383) for p in packets]

    async def recv(self) -> av.Packet:
        await asyncio.sleep(0.04)
        packet = av.Packet(self._packets[self._index % len(self._packets)])
        packet.pts, packet.time_base = self._index * 3600, fractions.Fraction(1, 90000)
        self._index += 1
        return packet


@pytest.mark.parametrize("codec", ["h264", "vp8"])
def test_a_webrtc_peer_declaring_a_huge_picture_ends_its_session_and_another_goes_on(engine, tmp_path, caplog, codec):
    caplog.set_level(logging.INFO, logger="streamer.webrtc")

    async def scenario():
        async with node(engine, tmp_path, codec=codec) as client:
            good_pc = client_peer()
            collector = collect_video(good_pc)
            response = await client.post("/api/v1/sessions", json={"sdp": await camera_offer(good_pc), "type": "offer",
                                                                   "face_id": "astronaut"})
            assert response.status == 201, await response.text()
            await answer(good_pc, (await response.json())["sdp"])
            await collector.wait_for(10)

            bad_pc, session_id = await whip_publish(client, CraftedVideo(codec))
            manager = client.server.app[NODE_KEY].sessions
            frames = manager.get(session_id).pc.getTransceivers()[0].receiver._RTCRtpReceiver__decoder_queue
            deadline = time.monotonic() + 20
            while session_id in {s.id for s in manager._sessions.values()} and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            ended = session_id not in {s.id for s in manager._sessions.values()}
            mark = collector.count
            await collector.wait_for(mark + 10)  # the other session goes on
            await bad_pc.close()
            await good_pc.close()
            return ended, frames.refused, frames.passed

    ended, refused, passed = run(scenario(), timeout=60)
    declared = "H.264 SPS declares 16000x16000" if codec == "h264" else "VP8 keyframe declares 16383x16383"
    assert ended and refused.startswith(f"the stream's {declared} pictures")
    assert passed == 0  # not one frame of it reached aiortc's decoder
    assert any(f"ends: the stream's {declared}" in record.getMessage() for record in caplog.records)


# -- offline jobs and `swapcast swap` -------------------------------------------------------------


def _write_mp4(path: Path, packets: list[bytes], crafted_from: int) -> None:
    """The access units as an .mp4, those from ``crafted_from`` on with the 16000x16000 SPS; the
    container's own size and avcC are the first access unit's. Remuxed from the real stream,
    whose probe decodes nothing large."""
    raw = path.with_suffix(".h264")
    raw.write_bytes(b"".join(packets))
    with av.open(str(raw), format="h264", options={"framerate": "25"}) as source, av.open(str(path), "w") as output:
        stream = output.add_stream_from_template(source.streams.video[0])
        if crafted_from == 0:
            stream.codec_context.extradata = _huge_sps(stream.codec_context.extradata)
            stream.codec_context.width = stream.codec_context.height = 16000
        for number, packet in enumerate(p for p in source.demux(source.streams.video[0]) if p.size):
            crafted = av.Packet(_huge_sps(bytes(packet)) if number >= crafted_from else bytes(packet))
            crafted.pts, crafted.dts, crafted.time_base = packet.pts, packet.dts, packet.time_base
            crafted.is_keyframe, crafted.stream = packet.is_keyframe, stream
            output.mux(crafted)


@pytest.mark.parametrize("where", ["container", "in-band after the first keyframe"])
def test_a_video_file_declaring_16000x16000_fails_its_job_and_swap_with_the_reason(tmp_path, where):
    packets = _x264(64, 64, 30, keyframe_every=10)
    keyframes = [i for i, p in enumerate(packets) if any(u[0] & 0x1F == 7 for u in split_annexb(p))]
    crafted_from = keyframes[0] if where == "container" else keyframes[1]  # the mp4's avcC says 64x64 then
    video = tmp_path / "crafted.mp4"
    _write_mp4(video, packets, crafted_from)
    with pytest.raises(VideoError, match=r"^upload\.mp4: the (video stream|stream's H\.264 SPS) declares 16000x16000 pictures"):
        split_video(video, tmp_path / "chunks", 2.0, label="upload.mp4")
    assert not (tmp_path / "chunks").exists() or not any((tmp_path / "chunks").iterdir())
    seen = []
    with pytest.raises(VideoError, match="declares 16000x16000 pictures") as refused:
        transcode_video(video, tmp_path / "out.mp4", lambda rgb, seconds: seen.append(rgb.shape) or rgb)
    assert set(seen) <= {(64, 64, 3)} and len(seen) <= keyframes[1]  # nothing of the crafted size was decoded
    assert str(refused.value).startswith(f"{video}: ")



@pytest.mark.parametrize("where", ["container", "in-band after the first keyframe"])
def test_the_verifier_refuses_an_upload_declaring_16000x16000_before_decoding_it(tmp_path, where):
    """``POST /api/v1/provenance/verify`` with the same crafted .mp4: 413 naming the size (the
    open's probe alone took over 1 GB before), while a real 64x64 file is still read."""
    packets = _x264(64, 64, 30, keyframe_every=10)
    keyframes = [i for i, p in enumerate(packets) if any(u[0] & 0x1F == 7 for u in split_annexb(p))]
    crafted, plain = tmp_path / "crafted.mp4", tmp_path / "plain.mp4"
    _write_mp4(crafted, packets, keyframes[0] if where == "container" else keyframes[1])
    _write_mp4(plain, packets, len(packets))
    status, answer = post_to_verifier(crafted.read_bytes(), "clip.mp4", "video/mp4")
    assert status == 413 and "declares 16000x16000 pictures" in answer["error"], (status, answer)
    status, answer = post_to_verifier(plain.read_bytes(), "clip.mp4", "video/mp4")
    assert status == 200 and answer["kind"] == "video", (status, answer)
