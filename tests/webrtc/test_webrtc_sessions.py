"""Browser sessions end to end: an aiortc peer on 127.0.0.1 sends a moving real face
(Grace Hopper) and gets the swapped video back (wearing the astronaut sample face)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from webrtc_harness import (
    answer,
    camera_offer,
    client_peer,
    collect_video,
    node,
    other_tasks,
    own_threads,
    run,
    settle,
    swap_threads,
)

from gpu.analysis.identity import identity_distance


def identities(identity_of, frames: list[np.ndarray]) -> list[np.ndarray]:
    return [identity_of(frame) for frame in frames]


def closer_to(identity_of, frames, wanted: np.ndarray, other: np.ndarray) -> list[tuple[float, float]]:
    pairs = []
    for ident in identities(identity_of, frames):
        pairs.append((identity_distance(ident, wanted), identity_distance(ident, other)))
    return pairs


async def start_session(client, face_id: str = "astronaut", options: dict | None = None, audio: bool = False):
    pc = client_peer()
    collector = collect_video(pc)
    offer = await camera_offer(pc, audio=audio)
    body = {"sdp": offer, "type": "offer", "face_id": face_id}
    if options is not None:
        body["options"] = options
    response = await client.post("/api/v1/sessions", json=body)
    assert response.status == 201, await response.text()
    reply = await response.json()
    assert reply["type"] == "answer" and reply["session_id"]
    await answer(pc, reply["sdp"])
    return pc, collector, reply["session_id"]


def test_live_swap_patch_and_teardown(engine, identity_of, astronaut_image, grace_image, tmp_path):
    source, camera = identity_of(astronaut_image), identity_of(grace_image)

    async def scenario():
        async with node(engine, tmp_path) as client:
            assert (await client.get("/api/v1/faces")).status == 200  # warm: keep-alive task, library thread
            assert not engine.batcher.closed  # the node's batcher thread outlives sessions
            baseline_tasks = len(other_tasks())
            baseline_threads = own_threads()

            pc, collector, session_id = await start_session(client, audio=True)
            await collector.wait_for(20)
            started, first = time.monotonic(), collector.count
            await collector.wait_for(first + 15)
            fps_out = (collector.count - first) / (time.monotonic() - started)
            swapped = [f for f in collector.frames[-3:]]
            audio_back = collector.audio_frames

            # a malformed request meanwhile disturbs nothing
            bad = await client.post("/api/v1/sessions", data=b"{not json", headers={"Content-Type": "application/json"})
            bad_patch = await client.patch(f"/api/v1/sessions/{session_id}", json={"enabled": "yes", "colour": 1})
            bad_statuses = bad.status, bad_patch.status, (await bad_patch.json())["error"]
            mark = collector.count
            await collector.wait_for(mark + 5)
            pts_ok = all(b > a for a, b in zip(collector.pts, collector.pts[1:], strict=False))

            state = await (await client.get(f"/api/v1/sessions/{session_id}")).json()
            listing = await (await client.get("/api/v1/sessions")).json()

            # swap off, live: the camera's own face comes back
            response = await client.patch(f"/api/v1/sessions/{session_id}", json={"enabled": False})
            assert response.status == 200, await response.text()
            patched = await response.json()
            mark = collector.count
            await collector.wait_for(mark + 12)
            unswapped = [f for f in collector.frames[-3:]]

            # options and face change live too
            response = await client.patch(f"/api/v1/sessions/{session_id}",
                                          json={"enabled": True, "options": {"blend": 0.8}, "face_id": "astronaut"})
            assert response.status == 200, await response.text()
            repatched = await response.json()

            response = await client.delete(f"/api/v1/sessions/{session_id}")
            assert response.status == 204
            assert (await client.get(f"/api/v1/sessions/{session_id}")).status == 404
            assert await (await client.get("/api/v1/sessions")).json() == []
            await collector.stop()
            await pc.close()

            tasks_left = await settle(lambda: len(other_tasks()) <= baseline_tasks)
            threads_left = await settle(lambda: own_threads() <= baseline_threads)
            leftovers = [repr(t) for t in other_tasks()], sorted(own_threads() - baseline_threads)
            return locals()

    r = run(scenario(), timeout=60)
    print(f"fps out (client side) {r['fps_out']:.1f}; server stats {r['state']['stats']}")

    assert r["state"]["protocol"] == "webrtc" and r["state"]["face_id"] == "astronaut"
    assert r["state"]["options"]["blend"] == 1.0
    stats = r["state"]["stats"]
    assert stats["frames_in"] > 0 and stats["frames_out"] > 0 and stats["latency_p50_ms"] is not None
    assert set(stats["stages_ms"]) == {"track", "identity", "prepare", "run", "paste"}
    assert [s["id"] for s in r["listing"]] == [r["session_id"]]
    assert r["pts_ok"], "received frames keep increasing timestamps"
    assert r["audio_back"] > 0, "the peer's audio comes back"
    assert r["bad_statuses"][:2] == (400, 400) and "colour" in r["bad_statuses"][2]
    assert r["fps_out"] > 5

    for d_source, d_camera in closer_to(identity_of, r["swapped"], source, camera):
        assert d_source < d_camera, (d_source, d_camera)
    assert r["patched"]["enabled"] is False
    for d_source, d_camera in closer_to(identity_of, r["unswapped"], source, camera):
        assert d_camera < 0.6 and d_camera < d_source, (d_source, d_camera)
    assert r["repatched"]["enabled"] is True and r["repatched"]["options"]["blend"] == 0.8

    assert r["tasks_left"], f"asyncio tasks left behind after the session ended: {r['leftovers']}"
    assert r["threads_left"], f"threads left behind after the session ended: {r['leftovers']}"
    assert swap_threads() == []


def test_session_limit_and_shutdown_closes_sessions(engine, tmp_path):
    from swapcast.app import NODE_KEY

    async def scenario():
        async with node(engine, tmp_path, max_sessions=1) as client:
            assert (await client.get("/api/v1/faces")).status == 200
            baseline = len(other_tasks())
            manager = client.server.app[NODE_KEY].sessions
            pc, collector, session_id = await start_session(client)
            await collector.wait_for(3)
            second = client_peer()
            offer = await camera_offer(second)
            response = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut"})
            full = response.status, await response.json()
            await second.close()
            session = manager.get(session_id)
            # the server shuts down (leaving the block) with the session still live
        closed_on_shutdown = session.closed and manager.list() == []
        peer_told = await settle(lambda: pc.connectionState in ("closed", "failed"), timeout=10)
        await collector.stop()
        await pc.close()
        left = await settle(lambda: len(other_tasks()) <= baseline - 1, timeout=10)  # - the HTTP keep-alive
        return full, closed_on_shutdown, peer_told, left, [repr(t) for t in other_tasks()]

    full, closed_on_shutdown, peer_told, left, tasks = run(scenario(), timeout=60)
    assert full[0] == 503 and "full" in full[1]["error"]
    assert closed_on_shutdown
    assert peer_told, "the peer learns that the server hung up (DTLS close)"
    assert left, tasks
    assert swap_threads() == []


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"sdp": "hello", "type": "offer", "face_id": "astronaut"}, 400, "malformed"),
        ({"sdp": "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\nm=video", "type": "offer", "face_id": "astronaut"}, 400, "sdp"),
        ({"type": "offer", "face_id": "astronaut"}, 400, "sdp"),
        ({"sdp": "x", "type": "answer", "face_id": "astronaut"}, 400, "offer"),
        ([1, 2], 400, "json object"),
    ],
)
def test_malformed_requests_get_400_with_a_reason(engine, tmp_path, body, status, words):
    async def scenario():
        async with node(engine, tmp_path) as client:
            response = await client.post("/api/v1/sessions", json=body)
            return response.status, await response.json()

    got, reply = run(scenario())
    assert got == status, reply
    assert words in reply["error"].lower()


def test_offers_that_cannot_be_swapped(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            replies = {}
            # audio only: nothing to swap
            pc = client_peer()
            from aiortc.mediastreams import AudioStreamTrack

            pc.addTrack(AudioStreamTrack())
            await pc.setLocalDescription(await pc.createOffer())
            r = await client.post("/api/v1/sessions", json={"sdp": pc.localDescription.sdp, "type": "offer", "face_id": "astronaut"})
            replies["no video"] = r.status, await r.json()
            await pc.close()

            pc = client_peer()
            offer = await camera_offer(pc)
            r = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "nobody"})
            replies["unknown face"] = r.status, await r.json()
            r = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut",
                                                            "options": {"blend": 7}})
            replies["bad option"] = r.status, await r.json()
            r = await client.post("/api/v1/sessions", json={"sdp": offer, "type": "offer", "face_id": "astronaut",
                                                            "options": {"colour": True}})
            replies["unknown option"] = r.status, await r.json()
            # an offer whose ICE credentials were stripped: aiortc refuses it
            broken = "\r\n".join(line for line in offer.split("\r\n") if not line.startswith("a=ice-"))
            r = await client.post("/api/v1/sessions", json={"sdp": broken, "type": "offer", "face_id": "astronaut"})
            replies["no ice"] = r.status, await r.json()
            await pc.close()

            for method in ("get", "patch", "delete"):
                r = await getattr(client, method)("/api/v1/sessions/nope", **({"json": {"enabled": False}} if method == "patch" else {}))
                replies[f"{method} unknown"] = r.status, await r.json()
            r = await client.get("/api/v1/nothing-here/x")
            replies["unknown path"] = r.status, await r.text()
            listing = await (await client.get("/api/v1/sessions")).json()
            return replies, listing

    replies, listing = run(scenario())
    assert replies["no video"][0] == 400 and "no video" in replies["no video"][1]["error"]
    assert replies["unknown face"][0] == 404 and "nobody" in replies["unknown face"][1]["error"]
    assert replies["bad option"][0] == 400 and "blend" in replies["bad option"][1]["error"]
    assert replies["unknown option"][0] == 400 and "colour" in replies["unknown option"][1]["error"]
    assert replies["no ice"][0] == 400, replies["no ice"]
    for method in ("get", "patch", "delete"):
        status, reply = replies[f"{method} unknown"]
        assert status == 404 and "nope" in reply["error"]
    assert listing == []  # refused offers leave nothing behind
    assert swap_threads() == []


def test_hang_up_without_delete_ends_the_session(engine, tmp_path):
    """A closed tab: the peer goes away without DELETE; the server notices and cleans up."""

    async def scenario():
        async with node(engine, tmp_path) as client:
            assert (await client.get("/api/v1/faces")).status == 200
            baseline = len(other_tasks())
            pc, collector, session_id = await start_session(client)
            await collector.wait_for(3)
            await collector.stop()
            await pc.close()  # DTLS close_notify, then silence
            gone = await settle(lambda: client.server.app[NODE_KEY].sessions.list() == [], timeout=10)
            status = (await client.get(f"/api/v1/sessions/{session_id}")).status
            left = await settle(lambda: len(other_tasks()) <= baseline, timeout=10)
            return gone, status, left, [repr(t) for t in other_tasks()]

    from swapcast.app import NODE_KEY

    gone, status, left, tasks = run(scenario())
    assert gone and status == 404
    assert left, tasks
    assert swap_threads() == []
