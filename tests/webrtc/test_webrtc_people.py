"""Map faces in a live WebRTC session: the session lists the people it sees (with
thumbnails the owner, or a signed link, can load), a PATCH maps them between two frames
(checked by the schema, stored as checked), the events socket says who appeared."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import av
from aiortc import VideoStreamTrack
from webrtc_harness import answer, bearer, client_peer, collect_video, node, run

from swapcast.benchmarks.people_clips import clip_by_name

FRAMES = 40


class TwoPeopleCamera(VideoStreamTrack):
    """A camera showing two people (the people set's crossing, its first frames, looped back and forth)."""

    def __init__(self, frames) -> None:
        super().__init__()
        self._frames = [*frames, *frames[::-1]]
        self._index = 0

    async def recv(self) -> av.VideoFrame:
        pts, time_base = await self.next_timestamp()
        frame = av.VideoFrame.from_ndarray(self._frames[self._index % len(self._frames)], format="rgb24")
        self._index += 1
        frame.pts, frame.time_base = pts, time_base
        return frame


async def wait_json(client, path: str, check, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        body = await (await client.get(path)).json()
        if check(body) or time.monotonic() > deadline:
            return body
        await asyncio.sleep(0.2)


def test_a_live_session_lists_people_and_takes_a_map_between_frames(engine, tmp_path):
    frames = clip_by_name("cross", quick=True).frames[:FRAMES]

    async def scenario():
        async with node(engine, tmp_path) as client:
            pc = client_peer()
            collector = collect_video(pc)
            pc.addTransceiver(TwoPeopleCamera(frames), direction="sendrecv")
            await pc.setLocalDescription(await pc.createOffer())
            created = await client.post("/api/v1/sessions", json={"sdp": pc.localDescription.sdp, "type": "offer",
                                                                   "face_id": "astronaut"})
            assert created.status == 201, await created.text()
            reply = await created.json()
            await answer(pc, reply["sdp"])
            path = f"/api/v1/sessions/{reply['session_id']}"
            seen = await wait_json(client, path, lambda s: len([p for p in s.get("people", []) if p["on_screen"]]) == 2)
            people = seen["people"]

            thumbnail = people[0]["thumbnail_url"]
            with_token = await client.get(thumbnail.split("?")[0])
            async with aiohttp.ClientSession() as anonymous:  # an <img>: the signed link alone
                signed = await anonymous.get(client.make_url(thumbnail))
                signed_status, signed_type = signed.status, signed.headers.get("Content-Type")
                unsigned = (await anonymous.get(client.make_url(thumbnail.split("?")[0]))).status
            stranger = (await client.get(thumbnail.split("?")[0], headers=bearer("mallory"))).status
            nobody = (await client.get(f"{path}/people/person-99/thumbnail.jpg")).status

            first, second = (p["id"] for p in people)
            bad = await client.patch(path, json={"options": {"faces_map": {"../x": "grace_hopper"}}})
            bad_body = await bad.json()
            unknown = await client.patch(path, json={"options": {"faces_map": {first: "u-000000000000"}}})
            mapped = await client.patch(path, json={"options": {"faces_map": {first: "grace_hopper", second: "keep"}}})
            mapped_body = await mapped.json()
            one = await wait_json(client, path, lambda s: (s["stats"] or {}).get("faces_swapped") == 1
                                  and (s["stats"] or {}).get("faces_seen") == 2)
            kept = await client.patch(path, json={"options": {"faces_map": {first: "keep", second: "keep"}}})
            none = await wait_json(client, path, lambda s: (s["stats"] or {}).get("faces_swapped") == 0
                                   and (s["stats"] or {}).get("faces_seen") == 2)
            await collector.wait_for(5)
            await client.delete(path)
            await collector.stop()
            await pc.close()
            return locals()

    r = run(scenario(), timeout=120)
    people = r["people"]
    assert [p["id"] for p in people] == sorted(p["id"] for p in people) and len(people) == 2
    assert all(p["wears"] == "source" and p["since"].endswith("Z") and p["frames"] > 0 for p in people)
    assert r["with_token"].status == 200 and r["signed_status"] == 200 and r["signed_type"] == "image/jpeg"
    assert r["unsigned"] == 401 and r["stranger"] == 404 and r["nobody"] == 404
    assert r["bad"].status == 400 and "not a person" in r["bad_body"]["error"]
    assert r["unknown"].status == 404 and r["mapped"].status == 200, r["mapped_body"]
    assert r["mapped_body"]["options"]["faces_map"] == {r["first"]: "grace_hopper", r["second"]: "keep"}
    wears = {p["id"]: p["wears"] for p in r["one"]["people"]}
    assert wears == {r["first"]: "grace_hopper", r["second"]: "keep"}
    assert r["one"]["stats"]["faces_swapped"] == 1, r["one"]["stats"]
    assert r["kept"].status == 200 and r["none"]["stats"]["faces_swapped"] == 0, r["none"]["stats"]


def test_a_placed_session_checks_its_map(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path) as client:
            placed = await (await client.post("/api/v1/sessions", json={
                "face_id": "astronaut", "options": {"faces_map": {"person-1": "grace_hopper"}, "unmapped": "keep"}})).json()
            path = f"/api/v1/sessions/{placed['session_id']}"
            refused = await client.post("/api/v1/sessions", json={"face_id": "astronaut",
                                                                   "options": {"faces_map": {"person-1": 7}}})
            patched = await (await client.patch(path, json={"options": {"faces_map": {"grace_hopper": "keep"}}})).json()
            missing = await client.patch(path, json={"options": {"faces_map": {"u-123456abcdef": "keep"}}})
            listing = await (await client.get(path)).json()
            return placed, refused.status, await refused.json(), patched, missing.status, listing

    placed, refused, refused_body, patched, missing, listing = run(scenario())
    assert placed["state"] == "placed"
    assert refused == 400 and "faces_map" in refused_body["error"]
    assert patched["options"]["faces_map"] == {"grace_hopper": "keep"} and patched["options"]["unmapped"] == "keep"
    assert missing == 404
    assert listing["options"]["faces_map"] == {"grace_hopper": "keep"}


def test_a_whip_publisher_wears_its_stream_keys_map(engine, tmp_path):
    """A key made over the API names Grace Hopper by a reference face (the sample's photo) to
    wear the astronaut's face, and keeps everyone else: the WHIP session follows it."""
    frames = clip_by_name("cross", quick=True).frames[:FRAMES]

    async def scenario():
        async with node(engine, tmp_path) as client:
            created = await client.post("/api/v1/keys", json={
                "name": "podcast", "face_id": "astronaut",
                "options": {"faces_map": {"grace_hopper": "astronaut"}, "unmapped": "keep"}})
            assert created.status == 201, await created.text()
            key = (await created.json())["key"]
            pc = client_peer()
            pc.addTransceiver(TwoPeopleCamera(frames), direction="sendonly")
            await pc.setLocalDescription(await pc.createOffer())
            async with aiohttp.ClientSession() as http:
                reply = await http.post(client.make_url("/whip"), data=pc.localDescription.sdp,
                                        headers={"Content-Type": "application/sdp", "Authorization": f"Bearer {key}"})
                assert reply.status == 201, await reply.text()
                location, sdp = reply.headers["Location"], await reply.text()
            await answer(pc, sdp)
            path = f"/api/v1/sessions/{location.rsplit('/', 1)[1]}"
            seen = await wait_json(client, path, lambda s: sorted(p["wears"] for p in s.get("people", [])) == ["astronaut", "keep"]
                                   and (s["stats"] or {}).get("faces_swapped") == 1)
            await client.delete(path)
            await pc.close()
            return seen

    seen = run(scenario(), timeout=90)
    assert sorted(p["wears"] for p in seen["people"]) == ["astronaut", "keep"], seen["people"]
    assert seen["protocol"] == "whip" and seen["stats"]["faces_swapped"] == 1 and seen["stats"]["faces_seen"] == 2
