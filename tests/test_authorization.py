"""Who may do what on a node's API: users see and touch only their own sessions, faces and
stream keys (another user's look like missing ones: 404), admins all of them; bad tokens are
401, users on admin routes 403, and per-user and per-token limits answer 429."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jwt
import pytest
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import AuthConfigError, mint_token
from swapcast.app import AUTH_KEY, build_app
from swapcast.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parent / "webrtc"))
from webrtc_harness import TEST_SECRET, jpeg, node_config, run  # noqa: E402


def as_user(subject: str, role: str = "user") -> dict[str, str]:
    return {"Authorization": f"Bearer {mint_token(TEST_SECRET, subject, role=role)}"}


ALICE, BOB, OPS = as_user("alice"), as_user("bob"), as_user("ops", "admin")


async def started(app) -> TestClient:
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


def test_users_reach_only_their_own_sessions_faces_and_keys(engine, astronaut_image, tmp_path):
    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        try:
            upload = await client.post("/api/v1/faces", data=jpeg(astronaut_image), headers={**BOB, "Content-Type": "image/jpeg"})
            assert upload.status == 201, await upload.text()
            bob_face = (await upload.json())["id"]
            placed = await client.post("/api/v1/sessions", json={"face_id": bob_face}, headers=BOB)
            assert placed.status == 201, await placed.text()
            bob_session = (await placed.json())["session_id"]
            key = await client.post("/api/v1/keys", json={"name": "bob cam", "face_id": bob_face}, headers=BOB)
            assert key.status == 201, await key.text()
            bob_key = (await key.json())["key_id"]

            alice = {
                "get session": (await client.get(f"/api/v1/sessions/{bob_session}", headers=ALICE)).status,
                "patch session": (await client.patch(f"/api/v1/sessions/{bob_session}", json={"enabled": False},
                                                      headers=ALICE)).status,
                "offer": (await client.post(f"/api/v1/sessions/{bob_session}/offer", json={"sdp": "v=0", "type": "offer"},
                                            headers=ALICE)).status,
                "candidate": (await client.post(f"/api/v1/sessions/{bob_session}/candidates", json={"candidate": ""},
                                                headers=ALICE)).status,
                "whep": (await client.post(f"/whep/{bob_session}", data="v=0",
                                           headers={**ALICE, "Content-Type": "application/sdp"})).status,
                "preview": (await client.get(f"/api/v1/sessions/{bob_session}/preview.jpg", headers=ALICE)).status,
                "delete session": (await client.delete(f"/api/v1/sessions/{bob_session}", headers=ALICE)).status,
                "thumbnail": (await client.get(f"/api/v1/faces/{bob_face}/thumbnail.jpg", headers=ALICE)).status,
                "session with his face": (await client.post("/api/v1/sessions", json={"face_id": bob_face},
                                                            headers=ALICE)).status,
                "revoke key": (await client.delete(f"/api/v1/keys/{bob_key}", headers=ALICE)).status,
                "sessions listed": [s["id"] for s in await (await client.get("/api/v1/sessions", headers=ALICE)).json()],
                "faces listed": [f["id"] for f in await (await client.get("/api/v1/faces", headers=ALICE)).json()],
                "keys listed": await (await client.get("/api/v1/keys", headers=ALICE)).json(),
                "nodes": (await client.get("/api/v1/nodes", headers=ALICE)).status,
                "drain": (await client.post("/api/v1/nodes/self/drain", headers=ALICE)).status,
            }
            bob = {
                "sessions listed": [s["id"] for s in await (await client.get("/api/v1/sessions", headers=BOB)).json()],
                "keys listed": [k["key_id"] for k in await (await client.get("/api/v1/keys", headers=BOB)).json()],
                "thumbnail": (await client.get(f"/api/v1/faces/{bob_face}/thumbnail.jpg", headers=BOB)).status,
            }
            ops = {
                "sessions listed": [s["id"] for s in await (await client.get("/api/v1/sessions", headers=OPS)).json()],
                "nodes": (await client.get("/api/v1/nodes", headers=OPS)).status,
                "kill": (await client.delete(f"/api/v1/sessions/{bob_session}", headers=OPS)).status,
                "revoke": (await client.delete(f"/api/v1/keys/{bob_key}", headers=OPS)).status,
            }
            audit = client.server.app[AUTH_KEY].audit.read()
            return alice, bob, ops, bob_session, bob_face, bob_key, audit
        finally:
            await client.close()

    alice, bob, ops, bob_session, bob_face, bob_key, audit = run(scenario(), timeout=60)
    for action in ("get session", "patch session", "offer", "candidate", "whep", "preview", "delete session", "thumbnail",
                   "session with his face", "revoke key"):
        assert alice[action] == 404, (action, alice[action])
    assert bob_session not in alice["sessions listed"] and bob_face not in alice["faces listed"]
    assert "astronaut" in alice["faces listed"]  # the samples are everyone's
    assert alice["keys listed"] == []
    assert alice["nodes"] == 403 and alice["drain"] == 403
    assert bob == {"sessions listed": [bob_session], "keys listed": [bob_key], "thumbnail": 200}
    assert ops["sessions listed"] == [bob_session] and ops["nodes"] == 200
    assert ops["kill"] == 204 and ops["revoke"] == 204
    actions = [(entry["actor"], entry["action"], entry["target"]) for entry in audit]
    assert actions == [("bob", "face.upload", bob_face), ("bob", "key.create", bob_key),
                       ("ops", "session.kill", bob_session), ("ops", "key.revoke", bob_key)]


def test_bad_tokens_are_401_with_a_reason(engine, tmp_path):
    expired = jwt.encode({"sub": "alice", "role": "user", "exp": int(time.time()) - 60}, TEST_SECRET, algorithm="HS256")
    forged = mint_token("some-other-secret-" + "x" * 32, "alice", role="admin")
    cases = {
        "missing": {},
        "expired": {"Authorization": f"Bearer {expired}"},
        "forged": {"Authorization": f"Bearer {forged}"},
        "garbage": {"Authorization": "Bearer not.a.token"},
        "not bearer": {"Authorization": "Basic YWxpY2U6cHc="},
    }

    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        try:
            answers = {}
            for name, headers in cases.items():
                response = await client.get("/api/v1/sessions", headers=headers)
                answers[name] = response.status, (await response.json())["error"], response.headers.get("WWW-Authenticate")
            public = [(await client.get(path)).status for path in ("/healthz", "/", "/web/app.js")]
            return answers, public
        finally:
            await client.close()

    answers, public = run(scenario())
    for name, (status, reason, challenge) in answers.items():
        assert status == 401 and reason and challenge and challenge.startswith("Bearer"), (name, status, reason)
    assert "expired" in answers["expired"][1] and "signature" in answers["forged"][1]
    assert public == [200, 200, 200]


def test_per_user_sessions_and_per_token_requests_are_limited(engine, tmp_path):
    config = node_config(tmp_path)
    config = config.model_copy(update={"auth": config.auth.model_copy(update={
        "max_sessions_per_user": 2, "requests_per_minute_per_token": 30})})

    async def scenario():
        client = await started(build_app(config, engine=engine))
        try:
            statuses = [(await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=ALICE)).status
                        for _ in range(3)]
            third = await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=ALICE)
            reason = (await third.json())["error"]
            others = (await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=BOB)).status
            flood = [await client.get("/api/v1/faces", headers=BOB) for _ in range(40)]
            limited = [r for r in flood if r.status == 429]
            return statuses, third.status, reason, others, limited[0].headers.get("Retry-After") if limited else None
        finally:
            await client.close()

    statuses, third, reason, others, retry_after = run(scenario(), timeout=60)
    assert statuses == [201, 201, 429] and third == 429 and "alice" in reason
    assert others == 201  # another user is not affected
    assert retry_after is not None and int(retry_after) >= 1


def test_a_placed_session_id_is_taken_only_from_the_gateways_placement(engine, tmp_path):
    """X-Swapcast-Session-Id from a client that reaches the node directly: it cannot take
    over Bob's session, nor skip placement with an id of its own; the gateway's placement
    (a placed record on this node for that caller) is adopted."""
    from signaling.registry import SessionRecord
    from swapcast.app import NODE_KEY

    async def scenario():
        app = build_app(node_config(tmp_path), engine=engine)
        client = await started(app)
        node = app[NODE_KEY]
        try:
            placed = await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=BOB)
            bob_session = (await placed.json())["session_id"]
            takeover = await client.post("/api/v1/sessions", json={"face_id": "grace_hopper"},
                                         headers={**ALICE, "X-Swapcast-Session-Id": bob_session})
            invented = await client.post("/api/v1/sessions", json={"face_id": "astronaut"},
                                         headers={**ALICE, "X-Swapcast-Session-Id": "my-own-id"})
            await node.registry.save_session(SessionRecord(id="gateway-placed", protocol="webrtc", node_id=node.node_id,
                                                           owner="alice", state="placed"))
            by_bob = await client.post("/api/v1/sessions", json={"face_id": "astronaut"},
                                       headers={**BOB, "X-Swapcast-Session-Id": "gateway-placed"})
            by_alice = await client.post("/api/v1/sessions", json={"face_id": "astronaut"},
                                         headers={**ALICE, "X-Swapcast-Session-Id": "gateway-placed"})
            return (takeover.status, (await takeover.json())["error"], invented.status, by_bob.status,
                    by_alice.status, (await by_alice.json()).get("session_id"),
                    await node.registry.get_session(bob_session), await node.registry.get_session("my-own-id"))
        finally:
            await client.close()

    takeover, reason, invented, by_bob, by_alice, adopted, bob_record, invented_record = run(scenario(), timeout=60)
    assert takeover == 409 and "not placed on this node for this caller" in reason
    assert bob_record.owner == "bob" and bob_record.face_id == "astronaut"  # untouched
    assert invented == 409 and invented_record is None
    assert by_bob == 409  # the placement was for alice
    assert by_alice == 201 and adopted == "gateway-placed"


def test_without_auth_only_loopback_starts_and_gets_a_development_token(engine, tmp_path):
    def config(host: str):
        return load_config(environ={}, overrides={"server": {"host": host, "data_dir": str(tmp_path)}, "rtmp": {"port": 0}})

    app = build_app(config("127.0.0.1"), engine=engine)
    token = app[AUTH_KEY].dev_token
    assert token and app[AUTH_KEY].verifier.verify(token).is_admin
    with pytest.raises(AuthConfigError, match="refusing to listen on 0.0.0.0 without authentication"):
        build_app(config("0.0.0.0"), engine=engine)


def test_ids_inside_bodies_resolve_only_to_the_callers_own_resources(engine, astronaut_image, tmp_path):
    """The references matrix beyond the URL: a face id in a JSON body (a stream key, a new
    session, a session's patch) that names another user's face is refused exactly like an
    id that does not exist, and never becomes part of the caller's key or session."""

    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        try:
            upload = await client.post("/api/v1/faces", data=jpeg(astronaut_image), headers={**BOB, "Content-Type": "image/jpeg"})
            bob_face = (await upload.json())["id"]
            mine = await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=ALICE)
            alice_session = (await mine.json())["session_id"]

            async def answer(response) -> tuple[int, str]:
                return response.status, (await response.json()).get("error", "")

            refused = {
                "key wearing his face": await answer(await client.post(
                    "/api/v1/keys", json={"name": "cam", "face_id": bob_face}, headers=ALICE)),
                "session wearing his face": await answer(await client.post(
                    "/api/v1/sessions", json={"face_id": bob_face}, headers=ALICE)),
                "patch to his face": await answer(await client.patch(
                    f"/api/v1/sessions/{alice_session}", json={"face_id": bob_face}, headers=ALICE)),
            }
            missing = await answer(await client.post("/api/v1/keys", json={"name": "cam", "face_id": "u-000000000000"},
                                                     headers=ALICE))
            allowed = {
                "bob's key with his face": (await client.post("/api/v1/keys", json={"name": "cam", "face_id": bob_face},
                                                              headers=BOB)).status,
                "admin's key with it": (await client.post("/api/v1/keys", json={"name": "ops cam", "face_id": bob_face},
                                                          headers=OPS)).status,
                "alice's key with a sample": (await client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"},
                                                                headers=ALICE)).status,
            }
            alice_keys = await (await client.get("/api/v1/keys", headers=ALICE)).json()
            alice_state = await (await client.get(f"/api/v1/sessions/{alice_session}", headers=ALICE)).json()
            return refused, missing, allowed, alice_keys, alice_state, bob_face
        finally:
            await client.close()

    refused, missing, allowed, alice_keys, alice_state, bob_face = run(scenario(), timeout=60)
    for what, (status, reason) in refused.items():
        assert (status, reason) == (404, f"no face with id {bob_face!r}"), what  # word for word a missing face's answer
    assert missing == (404, "no face with id 'u-000000000000'")
    assert allowed == {"bob's key with his face": 201, "admin's key with it": 201, "alice's key with a sample": 201}
    assert [key["face_id"] for key in alice_keys] == ["astronaut"]
    assert alice_state["face_id"] == "astronaut"
