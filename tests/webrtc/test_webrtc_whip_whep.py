"""WHIP ingest with a stream key, WHEP playback of the swapped output, and their refusals."""

from __future__ import annotations

import aiohttp

import cv2
from webrtc_harness import (
    answer,
    camera_offer,
    client_peer,
    collect_video,
    node,
    other_tasks,
    run,
    settle,
    swap_threads,
    viewer_offer,
)

from gpu.analysis.identity import identity_distance
from signaling.stream_keys import StreamKeyStore

SDP = {"Content-Type": "application/sdp"}


def make_key(tmp_path, astronaut_image, swap=None) -> tuple[str, StreamKeyStore]:
    photo = tmp_path / "astronaut.png"
    cv2.imwrite(str(photo), cv2.cvtColor(astronaut_image, cv2.COLOR_RGB2BGR))
    store = StreamKeyStore(tmp_path / "data")
    key, _ = store.add("studio", photo, swap=swap or {"blend": 1.0})
    return key, store


def test_whip_publish_whep_view_and_delete(engine, identity_of, astronaut_image, grace_image, tmp_path):
    key, _ = make_key(tmp_path, astronaut_image)
    source, camera = identity_of(astronaut_image), identity_of(grace_image)

    async def scenario():
        async with node(engine, tmp_path / "data", role="admin") as client:  # WHEP on an operator's key
            assert (await client.get("/api/v1/faces")).status == 200
            baseline = len(other_tasks())

            publisher = client_peer()
            offer = await camera_offer(publisher, audio=True, direction="sendonly")
            response = await client.post("/whip", data=offer, headers={**SDP, "Authorization": f"Bearer {key}"})
            assert response.status == 201, await response.text()
            assert response.content_type == "application/sdp"
            location = response.headers["Location"]
            await answer(publisher, await response.text())
            session_id = location.rsplit("/", 1)[1]

            viewer = client_peer()
            collector = collect_video(viewer)
            response = await client.post(f"/whep/{session_id}", data=await viewer_offer(viewer, audio=True), headers=SDP)
            assert response.status == 201, await response.text()
            viewer_location = response.headers["Location"]
            await answer(viewer, await response.text())
            await collector.wait_for(15)
            frames = list(collector.frames[-3:])
            audio_frames = collector.audio_frames

            sessions = await (await client.get("/api/v1/sessions")).json()
            response = await client.delete(viewer_location)
            viewer_deleted = response.status
            viewer_gone = await settle(lambda: viewer.connectionState in ("closed", "failed"), timeout=10)
            again = (await client.delete(viewer_location)).status

            response = await client.delete(location)
            whip_deleted = response.status
            after = await (await client.get("/api/v1/sessions")).json()
            whep_after = (await client.post(f"/whep/{session_id}", data=await viewer_offer(client_peer()), headers=SDP)).status
            publisher_told = await settle(lambda: publisher.connectionState in ("closed", "failed"), timeout=10)
            await collector.stop()
            await viewer.close()
            await publisher.close()
            left = await settle(lambda: len(other_tasks()) <= baseline, timeout=10)
            return locals()

    r = run(scenario(), timeout=60)
    assert r["location"].startswith("/whip/")
    assert r["viewer_location"].startswith(f"/whep/{r['session_id']}/")
    (listed,) = r["sessions"]
    assert listed["protocol"] == "whip" and listed["viewers"] == 1 and listed["stats"]["frames_out"] > 0
    for ident in map(identity_of, r["frames"]):
        assert identity_distance(ident, source) < identity_distance(ident, camera)
    assert r["audio_frames"] > 0, "the publisher's audio reaches WHEP viewers"
    assert r["viewer_deleted"] == 204 and r["viewer_gone"] and r["again"] == 404
    assert r["whip_deleted"] == 204 and r["after"] == [] and r["whep_after"] == 404
    assert r["publisher_told"]
    assert r["left"], [repr(t) for t in other_tasks()]
    assert swap_threads() == []


def test_whip_refusals(engine, astronaut_image, tmp_path):
    key, store = make_key(tmp_path, astronaut_image)
    revoked_key, record = store.add("old", tmp_path / "astronaut.png")
    store.revoke(record.key_id)
    bad_options_key, _ = store.add("bad", tmp_path / "astronaut.png", swap={"blend": 9})

    async def scenario():
        async with node(engine, tmp_path / "data", role="admin") as client:  # WHEP on an operator's key
            pc = client_peer()
            offer = await camera_offer(pc, direction="sendonly")
            got = {}
            for name, headers in {
                "missing": SDP,
                "not bearer": {**SDP, "Authorization": f"Basic {key}"},
                "unknown": {**SDP, "Authorization": "Bearer sk_nope"},
                "revoked": {**SDP, "Authorization": f"Bearer {revoked_key}"},
                "bad options": {**SDP, "Authorization": f"Bearer {bad_options_key}"},
                "not sdp": {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
            }.items():
                # a WHIP publisher sends only its stream key, not the test client's API token
                async with aiohttp.ClientSession() as publisher_http:
                    async with publisher_http.post(client.make_url("/whip"), data=offer, headers=headers) as response:
                        got[name] = response.status, (await response.json())["error"]
            response = await client.post("/whip", data="garbage", headers={**SDP, "Authorization": f"Bearer {key}"})
            got["garbage"] = response.status, (await response.json())["error"]
            got["delete unknown"] = (await client.delete("/whip/nope")).status, None
            got["whep unknown"] = (await client.post("/whep/nope", data=offer, headers=SDP)).status, None
            got["whep viewer unknown"] = (await client.delete("/whep/nope/nobody")).status, None
            got["trickle"] = (await client.patch("/whip/nope", data="a=candidate", headers={"Content-Type": "application/trickle-ice-sdpfrag"})).status, None
            await pc.close()
            listing = await (await client.get("/api/v1/sessions")).json()
            return got, listing

    got, listing = run(scenario())
    assert got["missing"][0] == 401 and "bearer" in got["missing"][1].lower()
    assert got["not bearer"][0] == 401
    assert got["unknown"] == (403, "stream key not recognised")
    assert got["revoked"] == (403, "stream key revoked")
    assert got["bad options"][0] == 422 and "blend" in got["bad options"][1]
    assert got["not sdp"][0] == 415
    assert got["garbage"][0] == 400 and "malformed" in got["garbage"][1]
    assert got["delete unknown"][0] == 404
    assert got["whep unknown"][0] == 404
    assert got["whep viewer unknown"][0] == 404
    assert got["trickle"][0] == 405
    assert listing == []
    assert swap_threads() == []
