"""What is validated is what is stored and answered: round 3 PATCHed a session's options
with ``"smoothing": "off"``, which the schema accepted as false, and read back the string
``"off"`` from the record (the next node to resume it would read it again, its own way)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import node, run  # noqa: E402


def test_session_and_key_options_are_stored_as_the_schema_reads_them(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path / "data") as client:
            placed = await client.post("/api/v1/sessions", json={"face_id": "astronaut",
                                                                  "options": {"blend": "0.5", "mouth_mask": "yes"}})
            assert placed.status == 201, await placed.text()
            session_id = (await placed.json())["session_id"]
            patched = await client.patch(f"/api/v1/sessions/{session_id}", json={"options": {"smoothing": "off"}})
            assert patched.status == 200, await patched.text()
            read_back = await (await client.get(f"/api/v1/sessions/{session_id}")).json()
            key = await client.post("/api/v1/keys", json={"name": "  cam  ", "face_id": "astronaut",
                                                          "options": {"colour_match": "false", "feather": 0}})
            assert key.status == 201, await key.text()
            listed = await (await client.get("/api/v1/keys")).json()
            return (await patched.json())["options"], read_back["options"], listed[0]

    patched, read_back, key = run(scenario())
    assert patched == read_back == {"blend": 0.5, "mouth_mask": True, "smoothing": False}
    assert key["name"] == "cam" and key["options"] == {"colour_match": False, "feather": 0.0}
