"""Revoking a stream key ends what it publishes, at once: its RTMP stream (publisher cut,
pushes closed, play token dead) and its WHIP session, whether the key was revoked over this
node's API or anywhere else the store is shared (another node, ``swapcast keys revoke``).
Round 3 found ``DELETE /api/v1/keys/{id}`` answering 204 while the publisher on that key
stayed on air, swapped, pushed and playable until it left by itself."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import aiohttp
import pytest
from media_fixtures import camera_messages

from signaling.stream_keys import StreamKeyStore
from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
from swapcast.app import NODE_KEY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import bearer, camera_offer, client_peer, node, run, settle  # noqa: E402

pytestmark = pytest.mark.slow
# a revoked key's stream ends within one poll of the watch (signaling.key_revocation.POLL_S,
# 0.5 s) plus its teardown; this bound only keeps a broken run from hanging (before: never)
ENDS_WITHIN_S = 5.0


async def make_key(client, user: str, **extra) -> dict:
    response = await client.post("/api/v1/keys", json={"name": f"{user} cam", "face_id": "astronaut", **extra},
                                 headers=bearer(user))
    assert response.status == 201, await response.text()
    return await response.json()


async def keep_publishing(url: str, messages: list) -> str:
    """Publish like OBS until the server cuts the connection; returns why it ended."""
    client = RtmpPublishClient(url, timeout=10)
    await client.connect()
    try:
        for round_number in range(1000):
            for message in messages:
                stamped = type(message)(message.kind, message.timestamp + 4000 * round_number, message.payload)
                await client.send(stamped)
                await asyncio.sleep(0.04)
    except (RtmpClientError, ConnectionError, OSError) as exc:
        return str(exc) or type(exc).__name__
    finally:
        with contextlib.suppress(Exception):
            await client.close()
    return "never cut"


async def plays(url: str) -> str:
    player = RtmpPlayClient(url, timeout=5)
    try:
        await player.connect()
    except RtmpClientError as exc:
        return exc.code or str(exc)
    await player.close()
    return "played"


async def whip_session(client, key: str) -> str:
    pc = client_peer()
    offer = await camera_offer(pc, direction="sendonly")
    async with aiohttp.ClientSession() as http:
        async with http.post(client.make_url("/whip"), data=offer,
                             headers={"Content-Type": "application/sdp", "Authorization": f"Bearer {key}"}) as reply:
            assert reply.status == 201, await reply.text()
            return reply.headers["Location"].rsplit("/", 1)[1]


def test_revoking_a_key_ends_its_rtmp_stream_play_token_and_whip_session(engine, grace_image, tmp_path):
    messages = camera_messages(grace_image, 50)

    async def scenario():
        async with node(engine, tmp_path / "data", subject="alice") as client:
            ingest = client.server.app[NODE_KEY].rtmp_ingest
            port = client.server.app[NODE_KEY].rtmp_server.port
            rtmp_key, whip_key = await make_key(client, "alice"), await make_key(client, "alice")
            publishing = asyncio.ensure_future(keep_publishing(f"rtmp://127.0.0.1:{port}/live/{rtmp_key['key']}",
                                                               messages))
            assert await settle(lambda: rtmp_key["key_id"] in ingest.streams, 15)
            play_url = f"rtmp://127.0.0.1:{port}/live/{rtmp_key['play_token']}"
            before = await plays(play_url)
            session_id = await whip_session(client, whip_key["key"])
            listed = await client.get(f"/api/v1/sessions/{session_id}", headers=bearer("alice"))
            assert listed.status == 200

            for made in (rtmp_key, whip_key):
                revoked = await client.delete(f"/api/v1/keys/{made['key_id']}", headers=bearer("alice"))
                assert revoked.status == 204
            cut = await asyncio.wait_for(publishing, ENDS_WITHIN_S)
            stream_gone = await settle(lambda: rtmp_key["key_id"] not in ingest.streams, ENDS_WITHIN_S)
            after = await plays(play_url)
            whip = await client.get(f"/api/v1/sessions/{session_id}", headers=bearer("alice"))
            again = await plays(f"rtmp://127.0.0.1:{port}/live/{rtmp_key['key']}")  # publishing as a player: refused
            republish = RtmpPublishClient(f"rtmp://127.0.0.1:{port}/live/{rtmp_key['key']}", timeout=5)
            with pytest.raises(RtmpClientError) as refused:
                await republish.connect()
            return before, cut, stream_gone, after, whip.status, again, refused.value

    before, cut, stream_gone, after, whip_status, _, refused = run(scenario(), timeout=90)
    assert before == "played"
    assert cut != "never cut" and stream_gone
    assert after == "NetStream.Play.StreamNotFound"  # the play token died with the stream
    assert whip_status == 404
    assert refused.code == "NetStream.Publish.BadName" and "revoked" in str(refused)


def test_a_key_revoked_elsewhere_ends_its_stream_here(engine, grace_image, tmp_path):
    """Another node (or ``swapcast keys revoke``) revoking in the shared store: this node's
    watch sees it on its next poll."""
    messages = camera_messages(grace_image, 50)

    async def scenario():
        async with node(engine, tmp_path / "data", subject="bob") as client:
            ingest = client.server.app[NODE_KEY].rtmp_ingest
            port = client.server.app[NODE_KEY].rtmp_server.port
            made = await make_key(client, "bob")
            publishing = asyncio.ensure_future(keep_publishing(f"rtmp://127.0.0.1:{port}/live/{made['key']}", messages))
            assert await settle(lambda: made["key_id"] in ingest.streams, 15)
            elsewhere = StreamKeyStore(tmp_path / "data")  # a second process's view of the same folder
            await asyncio.to_thread(elsewhere.revoke, made["key_id"])
            elsewhere.close()
            cut = await asyncio.wait_for(publishing, ENDS_WITHIN_S)
            return cut, await settle(lambda: made["key_id"] not in ingest.streams, ENDS_WITHIN_S)

    cut, gone = run(scenario(), timeout=60)
    assert cut != "never cut" and gone
