"""Two users on one node over RTMP (127.0.0.1): Bob knows everything about Alice's live
stream that lists and logs show (key id, session id, name) and has a stream key and play
token of his own; none of it plays her swapped video. Only her play token does, and her
play token cannot publish over her stream."""

from __future__ import annotations

import asyncio

import pytest

from signaling.stream_keys import StreamKeyStore, rtmp_session_id
from streamer.faces import FaceLibrary
from streamer.live.rtmp_ingest import IngestSettings, RtmpIngest
from streamer.live.swap_worker import EncoderSettings
from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
from streamer.rtmp.server import RtmpServer
from swapcast.config import SwapConfig

pytestmark = pytest.mark.slow


def test_another_users_identifiers_never_play_or_take_over_a_live_stream(engine, tmp_path):
    async def scenario():
        keys, faces = StreamKeyStore(tmp_path / "data"), FaceLibrary(engine)
        ingest = RtmpIngest(keys, engine, lambda swap: SwapConfig(**swap).options(),
                            IngestSettings(EncoderSettings()), RtmpPublishClient, faces)
        server = RtmpServer(ingest, port=0, setup_timeout=5.0)
        await server.start()
        url = f"rtmp://127.0.0.1:{server.port}/live"
        try:
            alice_key, alice = keys.add("alice cam", face_id="astronaut", owner="alice")
            bob_key, bob = keys.add("bob cam", face_id="astronaut", owner="bob")
            publisher = RtmpPublishClient(f"{url}/{alice_key}", timeout=10)
            await publisher.connect()
            for _ in range(200):
                if alice.key_id in ingest.streams:
                    break
                await asyncio.sleep(0.05)

            async def play(name: str) -> str:
                client = RtmpPlayClient(f"{url}/{name}", timeout=5)
                try:
                    await client.connect()
                except RtmpClientError as exc:
                    return exc.code or str(exc)
                await client.close()
                return "played"

            bob_tries = {
                "alice's key id": await play(alice.key_id),
                "alice's session id": await play(rtmp_session_id(alice_key)),
                "alice's stream name": await play("alice cam"),
                "alice's stream key": await play(alice_key),
                "bob's stream key": await play(bob_key),
                "bob's play token": await play(bob.play_token),
                "a prefix of alice's play token": await play(alice.play_token[:-1]),
            }
            alice_plays = await play(alice.play_token)
            try:  # a play token is no stream key: it cannot publish over her stream
                await RtmpPublishClient(f"{url}/{alice.play_token}", timeout=5).connect()
                hijack = "published"
            except RtmpClientError as exc:
                hijack = exc.code or str(exc)
            still_hers = ingest.streams[alice.key_id].publisher is not None
            await publisher.close()
            return bob_tries, alice_plays, hijack, still_hers
        finally:
            await ingest.close()
            await server.close()
            faces.close()

    bob_tries, alice_plays, hijack, still_hers = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert bob_tries == dict.fromkeys(bob_tries, "NetStream.Play.StreamNotFound")
    assert alice_plays == "played"
    assert hijack == "NetStream.Publish.BadName" and still_hers
