"""The face store's limit is per owner: a user at their limit gets a 409 saying how to make
room, and nobody else's face (nor a sample) is evicted to fit theirs."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))
from webrtc_harness import bearer, jpeg, node, run  # noqa: E402

from swapcast.app import NODE_KEY  # noqa: E402

ALICE, BOB = bearer("alice"), bearer("bob")


def test_a_user_at_the_face_limit_gets_a_409_and_evicts_no_one(engine, grace_image, tmp_path):
    async def upload(client, headers):
        return await client.post("/api/v1/faces", data=jpeg(grace_image),
                                 headers={**headers, "Content-Type": "image/jpeg"})

    async def scenario():
        async with node(engine, tmp_path) as client:
            client.app[NODE_KEY].faces.max_faces_per_owner = 2
            bobs = await (await upload(client, BOB)).json()
            alices = [await upload(client, ALICE) for _ in range(3)]
            refused = alices[-1]
            refusal = await refused.json()
            bob_list = await (await client.get("/api/v1/faces", headers=BOB)).json()
            alice_list = await (await client.get("/api/v1/faces", headers=ALICE)).json()
            first = (await alices[0].json())["id"]
            deleted = await client.delete(f"/api/v1/faces/{first}", headers=ALICE)
            after_delete = await upload(client, ALICE)
            return bobs, [a.status for a in alices], refusal, bob_list, alice_list, deleted.status, after_delete.status

    bobs, statuses, refusal, bob_list, alice_list, deleted, after_delete = run(scenario())
    assert statuses == [201, 201, 409]
    assert "delete one" in refusal["error"] and "2 faces" in refusal["error"]
    assert bobs["id"] in [f["id"] for f in bob_list]  # bob's face survived alice's uploads
    assert "astronaut" in [f["id"] for f in bob_list]  # samples are never evicted
    assert len([f for f in alice_list if f["id"].startswith("u-")]) == 2
    assert (deleted, after_delete) == (204, 201)  # deleting one makes room
