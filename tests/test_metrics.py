"""``/metrics`` of a node (during and after real, short WebRTC and RTMP sessions) and of
the gateway, parsed the way Prometheus parses it."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))  # the aiortc client helpers

from aiohttp.test_utils import TestClient, TestServer
from webrtc_harness import answer, camera_offer, client_peer, collect_video, node, run

from signaling.gateway.app import GatewaySettings, build_gateway_app
from signaling.registry import MemoryRegistry, NodeInfo, SessionRecord
from streamer.live.h264 import H264Encoder
from streamer.rtmp.client import RtmpPublishClient
from streamer.rtmp.flv import VideoPacketType, build_video_tag
from streamer.rtmp.handler import MediaMessage
from streamer.samples import moving_face_frames
from swapcast.app import NODE_KEY


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by (name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(parsed: dict, name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(labels.items())))]


async def scrape(client) -> dict:
    response = await client.get("/metrics", headers={"Authorization": ""})  # needs no token
    assert response.status == 200, await response.text()
    assert response.content_type == "text/plain"
    return samples(await response.text())


async def settle_async(check, timeout: float = 10.0) -> dict:
    """Poll the coroutine ``check()`` until it returns something truthy (bounded)."""
    deadline = time.monotonic() + timeout
    while not (result := await check()):
        assert time.monotonic() < deadline, "the condition did not hold in time"
        await asyncio.sleep(0.1)
    return result


def rtmp_camera(grace_image, count: int) -> list[MediaMessage]:
    """An OBS-like publish as RTMP messages: the AVC sequence header, then 25 fps frames."""
    encoder = H264Encoder(320, 240, bitrate_kbps=800, keyframe_interval_s=1.0, fps_hint=25)
    packets = [p for i, frame in enumerate(moving_face_frames(grace_image, count, (320, 240)))
               for p in encoder.encode(frame, 40 * i)]
    header = build_video_tag(encoder.sequence_header, keyframe=True, packet_type=VideoPacketType.SEQUENCE_HEADER)
    return [MediaMessage("video", 0, header),
            *(MediaMessage("video", p.dts, build_video_tag(p.data, keyframe=p.keyframe)) for p in packets)]


def test_node_metrics_after_webrtc_and_rtmp_sessions(engine, grace_image, tmp_path):
    async def scenario() -> None:
        async with node(engine, tmp_path, subject="ops", role="admin") as client:
            idle = await scrape(client)
            assert value(idle, "swapcast_sessions", protocol="webrtc", state="live") == 0
            assert value(idle, "swapcast_frames_out_total", protocol="webrtc") == 0
            await webrtc_session(client)
            await rtmp_publish(client)

    async def webrtc_session(client) -> None:
        pc = client_peer()
        collector = collect_video(pc)
        offer = await camera_offer(pc)
        response = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut"})
        assert response.status == 201, await response.text()
        reply = await response.json()
        await answer(pc, reply["sdp"])
        await collector.wait_for(15)
        bad = await client.post("/api/v1/sessions", data=b"{not json", headers={"Content-Type": "application/json"})
        assert bad.status == 400

        live = await scrape(client)
        assert value(live, "swapcast_sessions", protocol="webrtc", state="live") == 1
        assert value(live, "swapcast_sessions", protocol="rtmp", state="live") == 0
        for stage in ("track", "prepare", "run", "paste", "total"):
            assert value(live, "swapcast_stage_seconds_count", stage=stage, protocol="webrtc") > 0, stage
        assert value(live, "swapcast_stage_seconds_sum", stage="total", protocol="webrtc") > 0
        assert value(live, "swapcast_frame_latency_seconds_count", protocol="webrtc") > 0
        frames_out = value(live, "swapcast_frames_out_total", protocol="webrtc")
        assert value(live, "swapcast_frames_in_total", protocol="webrtc") >= frames_out >= 15
        assert value(live, "swapcast_fps", protocol="webrtc", direction="out") > 0
        assert value(live, "swapcast_fps", protocol="webrtc", direction="in") > 0
        assert value(live, "swapcast_batch_size_count") > 0 and value(live, "swapcast_batch_size_sum") > 0
        assert value(live, "swapcast_batch_rows_total") > 0
        assert 0 < value(live, "swapcast_device_busy_ratio") <= 1
        assert value(live, "swapcast_batch_queue_delay_seconds", quantile="0.99") >= 0
        # the tracking graphs' batchers, by model, beside the swap's
        assert value(live, "swapcast_tracking_batch_rows_total", model="landmarks") >= frames_out
        assert value(live, "swapcast_tracking_batch_size_count", model="landmarks") > 0
        assert value(live, "swapcast_tracking_batches_total", model="full") > 0
        assert 0 < value(live, "swapcast_tracking_busy_ratio", model="landmarks") <= 1
        assert value(live, "swapcast_errors_total", kind="http_400") == 1
        assert value(live, "swapcast_http_requests_total", method="POST", route="/api/v1/sessions", status="201") == 1
        assert value(live, "swapcast_http_request_seconds_count", method="POST", route="/api/v1/sessions") == 2

        await collector.stop()
        await pc.close()
        assert (await client.delete(f"/api/v1/sessions/{reply['session_id']}")).status == 204

        async def ended() -> dict:
            parsed = await scrape(client)
            return parsed if value(parsed, "swapcast_sessions", protocol="webrtc", state="live") == 0 else {}

        after = await settle_async(ended)
        assert value(after, "swapcast_frames_out_total", protocol="webrtc") >= frames_out  # kept after the end
        assert value(after, "swapcast_fps", protocol="webrtc", direction="out") == 0

    async def rtmp_publish(client) -> None:
        created = await client.post("/api/v1/keys", json={"name": "obs", "face_id": "astronaut"})
        assert created.status == 201, await created.text()
        port = client.app[NODE_KEY].rtmp_server.port
        publisher = RtmpPublishClient(f"rtmp://127.0.0.1:{port}/live/{(await created.json())['key']}", timeout=10)
        await publisher.connect()
        for message in rtmp_camera(grace_image, 30):
            await publisher.send(message)
            await asyncio.sleep(0.04)

        async def all_in() -> dict:  # input counts arrive with the stream's next output frame
            parsed = await scrape(client)
            return parsed if value(parsed, "swapcast_frames_in_total", protocol="rtmp") == 30 else {}

        published = await settle_async(all_in)
        await publisher.close()
        assert value(published, "swapcast_sessions", protocol="rtmp", state="live") == 1
        assert value(published, "swapcast_stage_seconds_count", stage="run", protocol="rtmp") > 0
        assert value(published, "swapcast_frames_out_total", protocol="rtmp") >= 5
        assert value(published, "swapcast_fps", protocol="rtmp", direction="in") > 0

    run(scenario(), timeout=60.0)


def test_gateway_metrics_count_placements_nodes_and_sessions():
    async def scenario():
        registry = MemoryRegistry(ttl_s=30.0)
        # a node that is registered but not listening: placing works, forwarding fails (502)
        await registry.register_node(NodeInfo(id="n1", address="127.0.0.1:9", capacity=4))
        await registry.register_node(NodeInfo(id="n2", address="127.0.0.1:9", capacity=4))
        await registry.set_node_state("n2", "draining")
        await registry.save_session(SessionRecord(id="s1", protocol="rtmp", node_id="n1", state="live"))
        app = build_gateway_app(registry, GatewaySettings(node_retries=0, node_connect_timeout_s=0.5))
        async with TestClient(TestServer(app, host="127.0.0.1")) as client:
            before = await scrape(client)
            response = await client.post("/api/v1/sessions", json={"face_id": "astronaut"})
            assert response.status == 502, await response.text()
            return before, await scrape(client)

    before, after = run(scenario())
    assert value(before, "swapcast_gateway_nodes", state="ready") == 1
    assert value(before, "swapcast_gateway_nodes", state="draining") == 1
    assert value(before, "swapcast_gateway_sessions", protocol="rtmp", state="live") == 1
    assert value(before, "swapcast_gateway_sessions", protocol="webrtc", state="live") == 0
    assert value(before, "swapcast_gateway_registry_up") == 1
    assert value(after, "swapcast_gateway_placement_seconds_count", protocol="webrtc") == 1
    assert value(after, "swapcast_http_requests_total", method="POST", route="/api/v1/sessions", status="502") == 1
    assert value(after, "swapcast_errors_total", kind="http_502") == 1
    assert value(after, "swapcast_gateway_nodes", state="ready") == 0  # the unreachable node was removed
