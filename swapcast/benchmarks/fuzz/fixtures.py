"""What a fuzz run sets up on the node first, through the API like a user: tokens of two
users and an admin, a face and stream keys of alice's, carol's keys for the oversize layer, a
placed session; and the pools of ids the node hands out during the run (path parameters
worth aiming at)."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import cv2

from streamer.samples import grace_hopper
from swapcast.benchmarks.fuzz.node import FuzzNode, token


@dataclass
class Fixtures:
    alice: str
    bob: str
    admin: str
    face_id: str
    stream_key: str  # alice's: the RTMP and WHIP layers publish with it
    spare_key: str  # bob's: the HTTP layer may revoke this one (never alice's)
    spare_key_id: str
    face_jpeg: bytes
    play_token: str  # plays alice's live stream over RTMP ("" where keys have none)
    attacker_key: str  # carol's two keys, for the oversize layer's attacker and the publisher beside it:
    well_behaved_key: str  # no other layer has her token or their ids, so none revokes or takes them over
    pools: dict[str, list[str]] = field(default_factory=dict)  # ids by kind: session, face, key, job, viewer

    def bearer_tokens(self) -> list[bytes]:
        return [self.alice.encode(), self.bob.encode(), self.admin.encode()]

    def pick(self, rng: random.Random, kind: str) -> str:
        pool = self.pools.get(kind) or ["none"]
        return rng.choice(pool)

    def remember(self, kind: str, value: object) -> None:
        if isinstance(value, str) and value and value not in self.pools.setdefault(kind, []):
            self.pools[kind].append(value)
            del self.pools[kind][:-64]  # the newest few: old ones are mostly gone


async def _api(node: FuzzNode, method: str, path: str, bearer: str, body: object | None = None,
               raw: bytes | None = None, content_type: bytes = b"application/json") -> dict:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
    headers = [(b"Authorization", b"Bearer " + bearer.encode())]
    if data:
        headers.append((b"Content-Type", content_type))
    answer = await node.request(method.encode(), path.encode(), headers, data)
    if answer.status not in (200, 201):
        raise RuntimeError(f"fuzz set-up: {method} {path} answered {answer.status}: {answer.body[:300]!r}")
    return json.loads(answer.body)


async def _alices_face_and_key(node: FuzzNode, alice: str, jpeg: bytes) -> tuple[dict, dict]:
    face = await _api(node, "POST", "/api/v1/faces?name=fuzz", alice, raw=jpeg, content_type=b"image/jpeg")
    key = await _api(node, "POST", "/api/v1/keys", alice, {"name": "fuzz", "face_id": face["id"]})
    return face, key


async def refresh(node: FuzzNode, fixtures: Fixtures) -> bool:
    """Make alice's face and key again when her face is gone (the HTTP layer may delete it);
    whether it had to. Her uploads are cleared first: the upload layer fills her quota."""
    bearer = [(b"Authorization", b"Bearer " + fixtures.alice.encode())]
    answer = await node.request(b"GET", f"/api/v1/faces/{fixtures.face_id}/thumbnail.jpg".encode(), bearer)
    if answer.status != 404:
        return False
    listing = await node.request(b"GET", b"/api/v1/faces", bearer)
    for face in json.loads(listing.body) if listing.status == 200 else []:
        if face.get("owner"):  # hers (samples have none)
            await node.request(b"DELETE", f"/api/v1/faces/{face['id']}".encode(), bearer)
    keys = await node.request(b"GET", b"/api/v1/keys", bearer)  # hers too: a user holds at most 64
    for key in json.loads(keys.body) if keys.status == 200 else []:
        if key.get("active") and key.get("owner") == "alice":
            await node.request(b"DELETE", f"/api/v1/keys/{key['key_id']}".encode(), bearer)
    face, key = await _alices_face_and_key(node, fixtures.alice, fixtures.face_jpeg)
    fixtures.face_id, fixtures.stream_key, fixtures.play_token = face["id"], key["key"], str(key.get("play_token") or "")
    fixtures.remember("face", face["id"])
    return True


async def set_up(node: FuzzNode) -> Fixtures:
    alice, bob, admin = token("alice"), token("bob"), token("ops", role="admin")
    ok, jpeg = cv2.imencode(".jpg", cv2.cvtColor(grace_hopper(), cv2.COLOR_RGB2BGR))
    face, key = await _alices_face_and_key(node, alice, jpeg.tobytes())
    spare = await _api(node, "POST", "/api/v1/keys", bob, {"name": "spare", "face_id": "astronaut"})
    carol = token("carol")
    attacker, well_behaved = [await _api(node, "POST", "/api/v1/keys", carol, {"name": name, "face_id": "astronaut"})
                              for name in ("oversize", "beside-oversize")]
    placed = await _api(node, "POST", "/api/v1/sessions", alice, {"face_id": face["id"]})
    fixtures = Fixtures(alice, bob, admin, face["id"], key["key"], spare["key"], spare["key_id"], jpeg.tobytes(),
                        str(key.get("play_token") or ""), attacker["key"], well_behaved["key"])
    for kind, value in (("face", face["id"]), ("face", "astronaut"), ("key", spare["key_id"]),
                        ("session", placed["session_id"]), ("node", "self"), ("node", "fuzz-node")):
        fixtures.remember(kind, value)
    return fixtures
