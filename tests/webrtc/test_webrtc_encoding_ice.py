"""Real-time encoder tuning inside aiortc, codec preference, and the ICE configuration."""

from __future__ import annotations

import fractions
import re
import time

import aioice.ice
import aiortc.rtcrtpsender
import av
import numpy as np
import pytest
from aiortc.codecs.h264 import H264Encoder
from aiortc.codecs.opus import OpusEncoder
from aiortc.rtcrtpparameters import RTCRtpCodecParameters
from webrtc_harness import camera_offer, client_peer, node, run

from streamer.webrtc import encoders, ice
from swapcast.config import WebRtcConfig

H264 = RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=102)
VP8 = RTCRtpCodecParameters(mimeType="video/VP8", clockRate=90000, payloadType=96)
OPUS = RTCRtpCodecParameters(mimeType="audio/opus", clockRate=48000, channels=2, payloadType=111)


@pytest.fixture
def tuning():
    before = encoders.current_tuning()
    tuned = encoders.EncoderTuning.from_config(WebRtcConfig(min_bitrate_kbps=300, max_bitrate_kbps=6000))
    encoders.install(tuned)
    yield tuned
    encoders.install(before)


def frames(count: int, size=(640, 480)) -> list[av.VideoFrame]:
    rng = np.random.default_rng(1)
    base = rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)
    out = []
    for i in range(count):
        frame = av.VideoFrame.from_ndarray(np.roll(base, i * 4, axis=1), format="rgb24").reformat(format="yuv420p")
        frame.pts, frame.time_base = i * 3000, fractions.Fraction(1, 90000)
        out.append(frame)
    return out


def test_h264_is_ultrafast_zerolatency_with_configured_bounds(tuning):
    assert aiortc.rtcrtpsender.get_encoder is encoders.realtime_encoder
    encoder = aiortc.rtcrtpsender.get_encoder(H264)
    assert isinstance(encoder, encoders.RealtimeH264Encoder)
    encoder.target_bitrate = 50_000_000
    assert encoder.target_bitrate == 6_000_000  # aiortc alone: 3 Mbps
    encoder.target_bitrate = 10_000
    assert encoder.target_bitrate == 300_000
    encoder.target_bitrate = 2_000_000
    video = frames(25)
    payloads, _ = encoder.encode(video[0], force_keyframe=True)
    assert payloads
    assert encoder.applied_options["preset"] == "ultrafast" and encoder.applied_options["tune"] == "zerolatency"
    assert (encoder.codec.width, encoder.codec.height) == (640, 480)  # the peer's resolution, kept
    assert encoder.codec.bit_rate == 2_000_000

    def fps(enc) -> float:
        enc.encode(video[0], force_keyframe=True)
        started = time.perf_counter()
        for frame in video[1:]:
            enc.encode(frame)
        return (len(video) - 1) / (time.perf_counter() - started)

    ours, theirs = fps(encoder), fps(H264Encoder())
    print(f"H.264 640x480 on this machine: ultrafast {ours:.0f} fps, aiortc's medium {theirs:.0f} fps")
    assert ours > 2 * theirs


def test_vp8_is_realtime_with_configured_bounds(tuning):
    encoder = aiortc.rtcrtpsender.get_encoder(VP8)
    assert isinstance(encoder, encoders.RealtimeVp8Encoder)
    encoder.target_bitrate = 50_000_000
    assert encoder.target_bitrate == 6_000_000
    payloads, _ = encoder.encode(frames(1)[0])
    assert payloads
    options = encoder.applied_options
    assert options["deadline"] == "realtime" and int(options["cpu-used"]) <= -8
    assert isinstance(aiortc.rtcrtpsender.get_encoder(OPUS), OpusEncoder)  # audio untouched


def test_codec_preference_and_loopback_candidates(engine, tmp_path):
    async def first_video_codec(codec: str):
        async with node(engine, tmp_path, codec=codec) as client:
            pc = client_peer()
            offer = await camera_offer(pc)
            response = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut"})
            assert response.status == 201, await response.text()
            sdp = (await response.json())["sdp"]
            await pc.close()
        video = sdp[sdp.index("m=video"):]
        first_pt = video.split("\r\n")[0].split()[3]
        rtpmap = re.search(rf"a=rtpmap:{first_pt} ([\w]+)/", video).group(1)
        hosts = set(re.findall(r"a=candidate:\S+ \d \w+ \d+ (\S+) \d+ typ host", sdp))
        return rtpmap, hosts

    async def scenario():
        return await first_video_codec("h264"), await first_video_codec("vp8")

    (h264, hosts_a), (vp8, hosts_b) = run(scenario())
    assert (h264, vp8) == ("H264", "VP8")
    assert hosts_a == hosts_b == {"127.0.0.1"}


def test_ice_configuration():
    config = WebRtcConfig(ice_servers=[{"urls": ["stun:stun.example.org:3478"]},
                                       {"urls": ["turn:turn.example.org"], "username": "u", "credential": "p"}])
    rtc = ice.rtc_configuration(config.ice_servers)
    assert [s.urls for s in rtc.iceServers] == [["stun:stun.example.org:3478"], ["turn:turn.example.org"]]
    assert rtc.iceServers[1].username == "u" and rtc.iceServers[1].credential == "p"
    assert ice.rtc_configuration([]).iceServers == []  # no silent fallback to a public STUN server

    ice.install(["127.0.0.1", "::1"])
    try:
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=False) == ["127.0.0.1"]
        assert aioice.ice.get_host_addresses(use_ipv4=True, use_ipv6=True) == ["127.0.0.1", "::1"]
        with pytest.raises(ValueError):
            ice.install(["localhost"])
    finally:
        ice.install(["127.0.0.1"])
