"""The cluster as operators run it: a real redis-server, a gateway and three node processes
on loopback. Sessions spread evenly; a SIGKILLed node's sessions move and a browser-like
client resumes with the same source face; a Redis restart is survived; a drained node takes
no new sessions while its own go on."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import time

import aiohttp
import numpy as np
import pytest
from media_fixtures import camera_messages, publish
from webrtc_harness import answer, camera_offer, client_peer, collect_video

from swapcast.local_cluster import Cluster, token

pytestmark = pytest.mark.slow

SAMPLE_FACE = "astronaut"
AS_ADMIN = {"Authorization": f"Bearer {token('tester', 'admin')}"}


@pytest.fixture(scope="module")
def cluster():
    cluster = Cluster(nodes_count=3, capacity=20).start()
    yield cluster
    cluster.close()


def place(cluster: Cluster, count: int) -> list[str]:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        # one user per session: a user holds at most auth.max_sessions_per_user; a cold node's
        # first session registers the face (2.2-2.5 s quiet, over 10 s with three at once on a loaded host)
        results = list(pool.map(lambda i: cluster.api("POST", "/api/v1/sessions", {"face_id": SAMPLE_FACE}, timeout=40,
                                                      subject=f"user-{i}", role="user"), range(count)))
    assert all(status == 201 for status, _ in results), results
    return [body["session_id"] for _, body in results]


def end(cluster: Cluster, session_ids: list[str]) -> None:
    for session_id in session_ids:
        status, body = cluster.api("DELETE", f"/api/v1/sessions/{session_id}")
        assert status in (204, 404), body


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class BrowserLikeClient:
    """What the page's LiveSwap does, in aiortc: place a session, offer the camera through
    the gateway, and when swapped frames stop, offer again for the same session id."""

    def __init__(self, gateway_url: str) -> None:
        self.gateway_url = gateway_url
        self.pc = None
        self.collector = None
        self.session_id: str | None = None
        self.deleted_status: int | None = None

    async def start(self, http: aiohttp.ClientSession) -> None:
        async with http.post(f"{self.gateway_url}/api/v1/sessions", json={"face_id": SAMPLE_FACE}) as response:
            assert response.status == 201, await response.text()
            self.session_id = (await response.json())["session_id"]
        await self.connect(http)

    async def connect(self, http: aiohttp.ClientSession) -> None:
        if self.pc is not None:
            await self.collector.stop()
            await self.pc.close()
        self.pc = client_peer()
        self.collector = collect_video(self.pc)
        sdp = await camera_offer(self.pc)
        async with http.post(f"{self.gateway_url}/api/v1/sessions/{self.session_id}/offer",
                             json={"sdp": sdp, "type": "offer"}) as response:
            assert response.status == 201, await response.text()
            await answer(self.pc, (await response.json())["sdp"])

    async def close(self) -> None:
        if self.pc is not None:
            await self.collector.stop()
            await self.pc.close()


@contextlib.asynccontextmanager
async def live_client(cluster: Cluster, frames: int):
    """A browser-like client with swapped frames flowing (``frames`` received), as an admin;
    its session is deleted afterwards (the DELETE's status is kept on it), then its peer closed.
    DELETE comes first: a closed peer ends its session on the node by itself, and a DELETE sent
    after the close races that end (404 instead of 204)."""
    async with aiohttp.ClientSession(headers=AS_ADMIN) as http:
        client = BrowserLikeClient(cluster.gateway.url)
        await client.start(http)
        try:
            await client.collector.wait_for(frames, timeout=30)
            yield http, client
        finally:
            try:
                async with http.delete(f"{cluster.gateway.url}/api/v1/sessions/{client.session_id}") as response:
                    client.deleted_status = response.status
            finally:
                await client.close()


def run_scenario(cluster: Cluster, scenario, timeout: float):
    """Run a scenario coroutine, bounded; on failure the processes' logs are printed."""
    try:
        return asyncio.run(asyncio.wait_for(scenario, timeout))
    except BaseException:
        print(cluster.logs())
        raise


async def owner_of(http: aiohttp.ClientSession, gateway_url: str, session_id: str) -> dict:
    async with http.get(f"{gateway_url}/api/v1/sessions/{session_id}") as response:
        assert response.status == 200, await response.text()
        return await response.json()


def reads_as(identity_of, frame: np.ndarray, source_identity: np.ndarray) -> float:
    return float(np.linalg.norm(identity_of(frame) - source_identity))


def test_thirty_sessions_spread_within_one(cluster):
    sessions = place(cluster, 30)
    try:
        loads = cluster.loads()
        assert sum(loads.values()) == 30
        assert max(loads.values()) - min(loads.values()) <= 1, loads
    finally:
        end(cluster, sessions)
    assert sum(cluster.loads().values()) == 0


def test_the_gateways_event_socket_shows_the_cluster(cluster):
    sessions = place(cluster, 2)

    async def first_snapshot(token_: str) -> dict:
        url = cluster.gateway.url.replace("http", "ws") + f"/api/v1/events?token={token_}"
        async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
            return await ws.receive_json(timeout=10)

    try:
        admin = asyncio.run(first_snapshot(token("ops", "admin")))
        owner = asyncio.run(first_snapshot(token("user-0")))
    finally:
        end(cluster, sessions)
    assert admin["type"] == "snapshot" and {s["id"] for s in admin["sessions"]} >= set(sessions)
    assert len(admin["nodes"]) == 3
    assert [s["id"] for s in owner["sessions"]] == [sessions[0]] and not owner.get("nodes")


def test_sigkilled_node_sessions_resume_elsewhere_with_the_same_face(cluster, identity_of, astronaut_image):
    source = identity_of(astronaut_image)

    async def scenario() -> dict:
        async with live_client(cluster, 10) as (http, client):
            first = (await owner_of(http, cluster.gateway.url, client.session_id))["node_id"]
            before = reads_as(identity_of, client.collector.frames[-1], source)
            # some placed-only sessions ride along on the same node
            others = await asyncio.get_running_loop().run_in_executor(None, place, cluster, 6)
            victims = [s for s in others if (await owner_of(http, cluster.gateway.url, s))["node_id"] == first]
            killed_at = time.monotonic()
            cluster.nodes[first].kill()
            frames_then = client.collector.count
            # the page notices the stall and offers again for the same session
            while client.collector.count == frames_then:
                await asyncio.sleep(0.1)
                if time.monotonic() - killed_at > 1.0:
                    break
            await client.connect(http)
            await client.collector.wait_for(5, timeout=20)
            resumed_after = time.monotonic() - killed_at
            second = (await owner_of(http, cluster.gateway.url, client.session_id))["node_id"]
            after = reads_as(identity_of, client.collector.frames[-1], source)
            moved = [(await owner_of(http, cluster.gateway.url, s))["node_id"] for s in victims]
            await asyncio.get_running_loop().run_in_executor(None, end, cluster, others)
            return {"first": first, "second": second, "before": before, "after": after,
                    "resumed_after": resumed_after, "moved": moved}

    result = run_scenario(cluster, scenario(), 120)
    killed = result["first"]
    assert result["second"] != killed and cluster.nodes[result["second"]].alive()
    assert result["before"] < 0.6 and result["after"] < 0.6, result  # still wearing the astronaut's face
    assert all(node and node != killed for node in result["moved"]), result
    assert result["resumed_after"] < 20
    wait_until(lambda: killed not in cluster.loads(), 5, "the dead node to leave the node list")
    cluster.add_node(killed)  # back to three for the next tests


def test_an_rtmp_publisher_that_reconnects_lands_on_a_live_node(cluster, grace_image):
    """OBS through the gateway with a key made over the API; its node is SIGKILLed; OBS
    reconnects (as it does) and the stream goes on, swapped, on another node."""
    status, made = cluster.api("POST", "/api/v1/keys", {"name": "studio", "face_id": SAMPLE_FACE},
                               subject="streamer", role="user")
    assert status == 201, made
    url = f"rtmp://127.0.0.1:{cluster.gateway_rtmp_port}/live/{made['key']}"

    def stream_state() -> dict:
        status, sessions = cluster.api("GET", "/api/v1/sessions", subject="streamer", role="user")
        assert status == 200, sessions
        return next((s for s in sessions if s["protocol"] == "rtmp"), {})

    def swapped_frames() -> int:
        return int(((stream_state().get("stats") or {}).get("frames_out")) or 0)

    async def scenario() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        first_client = await publish(url, camera_messages(grace_image, 50), close=False)
        await loop.run_in_executor(None, lambda: wait_until(lambda: swapped_frames() > 10, 20, "swapped frames"))
        first = (await loop.run_in_executor(None, stream_state))["node_id"]
        cluster.nodes[first].kill()
        with contextlib.suppress(Exception):  # its connection is cut: the gateway lost the node
            await first_client.close()
        second_client = await publish(url, camera_messages(grace_image, 75, start_ms=2000), close=False)  # OBS again
        await loop.run_in_executor(None, lambda: wait_until(
            lambda: stream_state().get("node_id") not in ("", first) and swapped_frames() > 10, 20,
            "the stream swapped on another node"))
        second = (await loop.run_in_executor(None, stream_state))["node_id"]
        await second_client.close()
        return first, second

    try:
        first, second = run_scenario(cluster, scenario(), 90)
    finally:
        cluster.api("DELETE", f"/api/v1/keys/{made['key_id']}", subject="streamer", role="user")
    assert second != first and cluster.nodes[second].alive()
    cluster.add_node(first)


def test_redis_restart_keeps_sessions_and_nodes_re_register(cluster):
    async def scenario() -> None:
        async with live_client(cluster, 5) as (http, client):
            cluster.redis.stop()
            status, body = await asyncio.get_running_loop().run_in_executor(
                None, lambda: cluster.api("POST", "/api/v1/sessions", {"face_id": SAMPLE_FACE}))
            assert status == 503 and "registry" in body["error"], (status, body)
            count = client.collector.count
            await client.collector.wait_for(count + 15, timeout=10)  # the live session goes on
            cluster.redis.start()
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: wait_until(lambda: len(cluster.loads()) == 3, 10, "nodes to re-register"))
            owner = await owner_of(http, cluster.gateway.url, client.session_id)
            assert owner["node_id"] in cluster.nodes  # the node re-saved its live session
            fresh = await asyncio.get_running_loop().run_in_executor(None, place, cluster, 1)
            await asyncio.get_running_loop().run_in_executor(None, end, cluster, fresh)

    run_scenario(cluster, scenario(), 90)


def test_a_drained_node_takes_nothing_new_and_its_sessions_go_on(cluster):
    drained = None

    async def scenario() -> BrowserLikeClient:
        nonlocal drained
        async with live_client(cluster, 5) as (http, client):
            drained = (await owner_of(http, cluster.gateway.url, client.session_id))["node_id"]
            async with http.post(f"{cluster.gateway.url}/api/v1/nodes/{drained}/drain") as response:
                assert response.status == 200, await response.text()
                assert (await response.json())["state"] == "draining"
            fresh = await asyncio.get_running_loop().run_in_executor(None, place, cluster, 6)
            owners = [(await owner_of(http, cluster.gateway.url, s))["node_id"] for s in fresh]
            assert drained not in owners, owners
            count = client.collector.count
            await client.collector.wait_for(count + 15, timeout=10)  # its own session goes on
            await asyncio.get_running_loop().run_in_executor(None, end, cluster, fresh)
        return client

    try:
        client = run_scenario(cluster, scenario(), 90)
        assert client.deleted_status == 204
    finally:
        if drained is not None:
            status, body = cluster.api("POST", f"/api/v1/nodes/{drained}/ready")
            assert status == 200, body


PAGE_LIVE_JS = """async () => {
  const live = window.swapcast && window.swapcast.live;
  if (!live || !live.pc || live.pc.connectionState !== 'connected') return -1;
  let frames = 0;
  (await live.pc.getStats()).forEach((s) => { if (s.type === 'inbound-rtp' && s.kind === 'video') frames = s.framesDecoded; });
  return frames;
}"""


def test_the_page_resumes_by_itself_on_another_node(cluster, tmp_path, identity_of, astronaut_image, grace_image):
    """The page's own JS client, through the gateway: its node is SIGKILLed, it offers again
    without being told, lands on a live node and still wears the astronaut's face."""
    from browser_harness import (
        REMOTE_PLAYING_JS,
        grab_frames,
        identity_votes,
        write_y4m,
    )
    from playwright.sync_api import sync_playwright

    from streamer.samples import grace_hopper, moving_face_frames
    from swapcast.benchmarks.chromium import HEADLESS_FLAGS, chromium_path

    camera = tmp_path / "grace.y4m"
    write_y4m(camera, moving_face_frames(grace_hopper(), 90, size=(640, 480)))
    astronaut_id, grace_id = identity_of(astronaut_image), identity_of(grace_image)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=chromium_path(), timeout=30_000,
            args=[*HEADLESS_FLAGS, "--use-fake-device-for-media-stream", f"--use-file-for-fake-video-capture={camera}"],
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(20_000)
            page.goto(f"{cluster.gateway.url}/#token={token('tester')}")
            page.click(f'.face[data-face-id="{SAMPLE_FACE}"]', timeout=30_000)
            page.click("#start")
            page.wait_for_function(REMOTE_PLAYING_JS, timeout=30_000)
            status, sessions = cluster.api("GET", "/api/v1/sessions")
            (session,) = [s for s in sessions if s["protocol"] == "webrtc"]
            first = session["node_id"]

            killed_at = time.monotonic()
            cluster.nodes[first].kill()
            page.wait_for_function("() => window.swapcast.live.reconnects >= 1", timeout=10_000)
            frames_then = page.evaluate(PAGE_LIVE_JS)
            page.wait_for_function(f"async () => (await ({PAGE_LIVE_JS})()) > {max(frames_then, 0) + 10}",
                                   timeout=20_000)
            resumed_after = time.monotonic() - killed_at
            status, moved = cluster.api("GET", f"/api/v1/sessions/{session['id']}")
            time.sleep(1.0)  # past the new connection's first keyframes and the tracker's warm-up
            to_astronaut, to_grace, distances = identity_votes(grab_frames(page, 5), identity_of, astronaut_id, grace_id)
            page.click("#stop")
        finally:
            browser.close()
    cluster.add_node(first)
    assert status == 200 and moved["node_id"] not in (first, ""), moved
    assert resumed_after < 20, resumed_after
    assert to_astronaut >= 4 and to_grace == 0, distances
