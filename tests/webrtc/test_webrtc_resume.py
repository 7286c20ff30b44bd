"""Sessions in two steps (place, then offer) and their resumption on another node: two
in-process nodes share one registry, as cluster nodes share Redis. A face uploaded through
one node is worn on the other without a new upload."""

from __future__ import annotations

import asyncio
import contextlib

from aiohttp.test_utils import TestClient, TestServer

from signaling.registry import MemoryRegistry
from swapcast.app import build_app
from webrtc_harness import answer, bearer, camera_offer, client_peer, collect_video, jpeg, node_config, run


@contextlib.asynccontextmanager
async def two_nodes(engine, data_dir, registry):
    clients = []
    try:
        for name in ("node-a", "node-b"):
            config = node_config(data_dir).model_copy(update={"cluster": node_config(data_dir).cluster.model_copy(
                update={"node_id": name})})
            client = TestClient(TestServer(build_app(config, engine=engine, registry=registry), host="127.0.0.1"),
                                headers=bearer())
            await client.start_server()
            clients.append(client)
        yield clients
    finally:
        for client in clients:
            await client.close()


async def offer_to(client, session_id):
    pc = client_peer()
    collector = collect_video(pc)
    response = await client.post(f"/api/v1/sessions/{session_id}/offer",
                                 json={"sdp": await camera_offer(pc), "type": "offer"})
    assert response.status == 201, await response.text()
    await answer(pc, (await response.json())["sdp"])
    return pc, collector


def test_placed_session_resumes_on_another_node_with_an_uploaded_face(
        engine, identity_of, astronaut_image, tmp_path):
    source = identity_of(astronaut_image)

    async def scenario():
        registry = MemoryRegistry(ttl_s=5.0)
        async with two_nodes(engine, tmp_path, registry) as (a, b):
            upload = await a.post("/api/v1/faces?name=astro", data=jpeg(astronaut_image),
                                  headers={"Content-Type": "image/jpeg"})
            assert upload.status == 201, await upload.text()
            face_id = (await upload.json())["id"]

            placed = await a.post("/api/v1/sessions", json={"face_id": face_id, "options": {"blend": 0.9}})
            assert placed.status == 201, await placed.text()
            body = await placed.json()
            session_id = body["session_id"]
            assert body["state"] == "placed" and body["node_id"] == "node-a"
            waiting = await (await a.get(f"/api/v1/sessions/{session_id}")).json()

            pc, collector = await offer_to(a, session_id)
            await collector.wait_for(8)
            on_a = collector.frames[-1]
            live = await (await a.get(f"/api/v1/sessions/{session_id}")).json()
            # node A "dies" for this session: the browser offers again, this time to node B
            pc_b, collector_b = await offer_to(b, session_id)
            await collector_b.wait_for(8)
            on_b = collector_b.frames[-1]
            resumed = await (await b.get(f"/api/v1/sessions/{session_id}")).json()
            preview = await b.get(f"/api/v1/sessions/{session_id}/preview.jpg")
            preview = preview.status, preview.content_type, await preview.read()
            # node A notices (its reconcile beat) that the session lives elsewhere and lets go
            for _ in range(60):
                a_view = (await a.get(f"/api/v1/sessions/{session_id}")).status
                if a_view == 404:
                    break
                await asyncio.sleep(0.1)
            await collector.stop()
            await pc.close()
            deleted = await b.delete(f"/api/v1/sessions/{session_id}")
            await collector_b.stop()
            await pc_b.close()
            remaining = await registry.sessions()
            unknown_offer = await b.post("/api/v1/sessions/nope/offer", json={"sdp": "v=0", "type": "offer"})
            return locals()

    r = run(scenario(), timeout=90)
    assert r["waiting"]["state"] == "placed" and r["waiting"]["options"] == {"blend": 0.9}
    assert r["live"]["state"] == "live" and r["live"]["connection"] in ("new", "connecting", "connected") and r["live"]["node_id"] == "node-a"
    assert r["resumed"]["node_id"] == "node-b" and r["resumed"]["face_id"] == r["face_id"]
    assert r["resumed"]["options"]["blend"] == 0.9
    for frame in (r["on_a"], r["on_b"]):
        assert float(((identity_of(frame) - source) ** 2).sum() ** 0.5) < 0.6
    assert r["preview"][:2] == (200, "image/jpeg") and r["preview"][2].startswith(b"\xff\xd8")
    assert r["a_view"] == 404
    assert r["deleted"].status == 204 and r["remaining"] == []
    assert r["unknown_offer"].status in (400, 404)


def test_trickled_candidates_connect_a_session(engine, tmp_path):
    """An offer without candidates, then each candidate on its own (as browsers trickle)."""

    async def scenario():
        async with two_nodes(engine, tmp_path, MemoryRegistry(ttl_s=5.0)) as (a, _):
            placed = await (await a.post("/api/v1/sessions", json={"face_id": "astronaut"})).json()
            session_id = placed["session_id"]
            pc = client_peer()
            collector = collect_video(pc)
            full = await camera_offer(pc)
            lines = full.splitlines()
            bare = "\r\n".join(line for line in lines if not line.startswith(("a=candidate:", "a=end-of-candidates"))) + "\r\n"
            response = await a.post(f"/api/v1/sessions/{session_id}/offer", json={"sdp": bare, "type": "offer"})
            assert response.status == 201, await response.text()
            await answer(pc, (await response.json())["sdp"])
            statuses = []
            for line in lines:
                if line.startswith("a=candidate:"):
                    reply = await a.post(f"/api/v1/sessions/{session_id}/candidates",
                                         json={"candidate": line[2:], "sdpMid": "0", "sdpMLineIndex": 0})
                    statuses.append(reply.status)
            statuses.append((await a.post(f"/api/v1/sessions/{session_id}/candidates", json={"candidate": ""})).status)
            await collector.wait_for(5)
            bad = await a.post(f"/api/v1/sessions/{session_id}/candidates", json={"candidate": "candidate:nonsense"})
            await collector.stop()
            await pc.close()
            return statuses, bad.status, (await bad.json())["error"]

    statuses, bad, reason = run(scenario(), timeout=60)
    assert statuses and set(statuses) == {204}
    assert bad == 400 and "candidate" in reason
