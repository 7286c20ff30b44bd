"""The stream key store shared by several processes (nodes on one volume): concurrent
creates and revokes all land, none overwrites another's."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import threading
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import AuditLog, Principal
from signaling.auth.middleware import PRINCIPAL_KEY
from signaling import stream_keys
from signaling.keys_api import KeyApi, KeyQuotas, add_key_routes
from signaling.stream_keys import StreamKeyLimitError, StreamKeyStore

WRITERS = 4
KEYS_EACH = 15


def _make_keys(data_dir: str, writer: int, start, keys_out) -> None:
    store = StreamKeyStore(data_dir)
    start.wait()
    for number in range(KEYS_EACH):
        key, _record = store.add(f"w{writer}-{number}", face_id=f"face-{writer}")
        keys_out.put(key)


def test_concurrent_writers_keep_every_key(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(WRITERS)
    keys_out = context.Queue()
    workers = [context.Process(target=_make_keys, args=(str(tmp_path), w, start, keys_out)) for w in range(WRITERS)]
    for worker in workers:
        worker.start()
    keys = [keys_out.get(timeout=60) for _ in range(WRITERS * KEYS_EACH)]
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0

    store = StreamKeyStore(tmp_path)
    records = store.list()
    assert len(records) == WRITERS * KEYS_EACH
    assert {r.stream.name for r in records} == {f"w{w}-{n}" for w in range(WRITERS) for n in range(KEYS_EACH)}
    assert all(store.find(key) is not None for key in keys)


def test_revoke_during_creates_is_not_undone(tmp_path: Path) -> None:
    store = StreamKeyStore(tmp_path)
    key, record = store.add("first", face_id="f")
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(2)
    keys_out = context.Queue()
    writer = context.Process(target=_make_keys, args=(str(tmp_path), 9, start, keys_out))
    writer.start()
    start.wait()
    store.revoke(record.key_id)
    created = [keys_out.get(timeout=60) for _ in range(KEYS_EACH)]
    writer.join(30)
    assert writer.exitcode == 0
    assert store.find(key) is None and store.get(record.key_id).revoked is not None
    assert all(store.find(k) is not None for k in created)


def test_one_user_keeps_a_bounded_number_of_keys_and_revoked_ones_make_room(tmp_path: Path) -> None:
    """What one user keeps in the store is bounded: making keys without end (or making and
    revoking them) grows what every node holds for everyone."""
    store = StreamKeyStore(tmp_path)
    made = [store.add(f"k{n}", face_id="f", owner="alice", max_per_owner=3)[1] for n in range(3)]
    store.add("operator", face_id="f")  # command-line keys have no owner and no limit
    store.add("bob's", face_id="f", owner="bob", max_per_owner=3)
    with pytest.raises(StreamKeyLimitError, match="3 stream keys"):
        store.add("one too many", face_id="f", owner="alice", max_per_owner=3)
    store.revoke(made[0].key_id)
    key, fourth = store.add("k3", face_id="f", owner="alice", max_per_owner=3)
    alices = [r for r in store.list() if r.owner == "alice"]
    assert [r.key_id for r in alices] == [made[1].key_id, made[2].key_id, fourth.key_id]
    assert store.find(key) is not None and len(store.list()) == 5


def test_the_keys_api_answers_409_past_the_limit(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        @web.middleware
        async def as_alice(request: web.Request, handler):
            request[PRINCIPAL_KEY] = Principal("alice", "user")
            return await handler(request)

        async def any_face(face_id: str, caller: Principal) -> None: ...

        app = web.Application(middlewares=[as_alice])
        add_key_routes(app, KeyApi(StreamKeyStore(tmp_path), any_face, dict,
                                   AuditLog(tmp_path / "audit.jsonl"), quotas=KeyQuotas(keys_per_user=2)))
        async with TestClient(TestServer(app)) as client:
            statuses = []
            for n in range(3):
                response = await client.post("/api/v1/keys", json={"name": f"k{n}", "face_id": "f"})
                statuses.append(response.status)
            assert "2 stream keys" in (await response.json())["error"]
            return statuses

    assert asyncio.run(scenario()) == [201, 201, 409]


def test_key_ids_never_repeat_even_when_the_random_source_does(tmp_path: Path, monkeypatch) -> None:
    """A node keeps one live stream per key id: Bob's key sharing Alice's id would put his
    publisher into her stream (her viewers, destinations and recording), and his copied
    source photo over hers."""
    draws = iter(["aaaa0000", "aaaa0000", "aaaa0000", "bbbb1111"])
    monkeypatch.setattr(stream_keys.secrets, "token_hex", lambda _: next(draws))
    store = StreamKeyStore(tmp_path)
    alice_photo, bob_photo = tmp_path / "alice.jpg", tmp_path / "bob.jpg"
    alice_photo.write_bytes(b"alice")
    bob_photo.write_bytes(b"bob")
    alice_key, alice = store.add("alice cam", alice_photo, owner="alice")
    bob_key, bob = store.add("bob cam", bob_photo, owner="bob")
    assert (alice.key_id, bob.key_id) == ("aaaa0000", "bbbb1111")
    assert Path(alice.stream.source_face).read_bytes() == b"alice"
    assert Path(bob.stream.source_face).read_bytes() == b"bob"
    assert store.find(bob_key).owner == "bob" and store.get(bob.key_id).owner == "bob"


def _legacy_row(key_id: str, key: str, owner: str, name: str) -> dict:
    return {"key_id": key_id, "key_hash": stream_keys.hash_key(key), "created": 1.0, "revoked": None, "owner": owner,
            "stream": {"name": name, "source_face": "", "swap": {"blend": 0.5}, "push": ["rtmp://cdn.example/app/x"],
                       "record": None, "face_id": "astronaut", "push_unrestricted": False}}


def test_a_json_store_of_earlier_versions_moves_into_the_database_once(tmp_path: Path) -> None:
    """Stores written before the database keep working: every key, revoked state included,
    is there after the first open, and the JSON file is set aside (not read again)."""
    rows = [_legacy_row("aaaa0001", "sk_alice", "alice", "alice cam"), _legacy_row("aaaa0002", "sk_bob", "bob", "bob")]
    rows[1]["revoked"] = 2.0
    (tmp_path / "stream-keys.json").write_text(json.dumps(rows))
    store = StreamKeyStore(tmp_path)
    assert store.find("sk_alice").stream.swap == {"blend": 0.5} and store.find("sk_bob") is None
    assert store.get("aaaa0002").revoked == 2.0
    assert store.pushing_to("rtmp://cdn.example/app/x")[0].key_id == "aaaa0001"
    assert not (tmp_path / "stream-keys.json").exists() and (tmp_path / "stream-keys.json.migrated").exists()
    assert [r.key_id for r in StreamKeyStore(tmp_path).list()] == ["aaaa0001", "aaaa0002"]


def test_a_lookup_reads_one_record_not_the_store(tmp_path: Path, monkeypatch) -> None:
    """Every publish attempt, an anonymous one with a bogus key too, looks its key up: round 3
    measured 57 ms per bogus WHIP on an 11.7 MB store, all of it parsing the store. A lookup
    is an indexed read now; what it parses is at most the record it finds."""
    store = StreamKeyStore(tmp_path)
    made = [store.add(f"k{n}", face_id="f", owner=f"u{n % 7}", push=(f"rtmp://cdn.example/live/{n}",)) for n in range(300)]
    parsed: list[int] = []
    real_loads = stream_keys.json.loads
    monkeypatch.setattr(stream_keys.json, "loads", lambda text, *a, **k: parsed.append(len(text)) or real_loads(text, *a, **k))
    assert store.find("sk_" + "A" * 32) is None
    bogus = sum(parsed)
    assert store.find(made[123][0]).key_id == made[123][1].key_id
    assert bogus == 0 and 0 < sum(parsed) < 2048


def test_store_lookups_from_the_event_loop_run_on_the_stores_threads(tmp_path: Path) -> None:
    store = StreamKeyStore(tmp_path)
    key, record = store.add("cam", face_id="f")

    async def scenario():
        found = await store.lookup(key)
        active = await store.active_among([record.key_hash, "0" * 64])
        return found, active

    loop_thread = threading.get_ident()
    seen: list[int] = []
    real = store.record_of_hash
    store.record_of_hash = lambda key_hash: seen.append(threading.get_ident()) or real(key_hash)
    found, active = asyncio.run(scenario())
    store.close()
    assert found.key_id == record.key_id and active == {record.key_hash}
    assert seen and loop_thread not in seen


def _keys_app(tmp_path: Path, quotas: KeyQuotas) -> web.Application:
    @web.middleware
    async def as_alice(request: web.Request, handler):
        request[PRINCIPAL_KEY] = Principal("alice", "user")
        return await handler(request)

    async def any_face(face_id: str, caller: Principal) -> None: ...

    def schema(options: dict) -> dict:  # what the node's normaliser does with a boolean field
        return {k: v == "on" if isinstance(v, str) else v for k, v in options.items()}

    app = web.Application(middlewares=[as_alice], client_max_size=16 * 1024)
    add_key_routes(app, KeyApi(StreamKeyStore(tmp_path), any_face, schema, AuditLog(tmp_path / "audit.jsonl"),
                               quotas=quotas))
    return app


def test_push_destinations_per_key_are_bounded_and_each_is_kept_once(tmp_path: Path) -> None:
    """28,000 push URLs fit in one body in round 3, and a 1,000-destination key held the
    node at 92-98 % CPU: a key pushes to at most quotas.push_per_key destinations."""
    async def scenario():
        async with TestClient(TestServer(_keys_app(tmp_path, KeyQuotas(push_per_key=3)))) as client:
            urls = [f"rtmp://cdn.example/live/{n}" for n in range(4)]
            over = await client.post("/api/v1/keys", json={"name": "k", "face_id": "f", "push": urls})
            repeated = await client.post("/api/v1/keys", json={"name": " k ", "face_id": "f",
                                                               "push": [urls[0], f" {urls[0]} ", urls[1], urls[2]],
                                                               "options": {"smoothing": "off"}})
            huge = await client.post("/api/v1/keys", json={"name": "k", "face_id": "f", "push": urls * 2000})
            return (over.status, (await over.json())["error"], repeated.status, await repeated.json(), huge.status)

    over, reason, status, made, huge = asyncio.run(scenario())
    assert over == 400 and "at most 3" in reason and "quotas.push_per_key" in reason
    assert status == 201 and made["push"] == [f"rtmp://cdn.example/live/{n}" for n in range(3)]
    assert made["name"] == "k" and made["options"] == {"smoothing": False}  # stored as validated
    assert huge == 413  # the body itself is bounded (quotas.request_body_kb)


def test_key_names_that_would_forge_log_lines_are_refused(tmp_path: Path) -> None:
    async def scenario():
        async with TestClient(TestServer(_keys_app(tmp_path, KeyQuotas()))) as client:
            answers = []
            for name in ("cam\nERROR signaling.auth.middleware: forged", "cam\rERROR x", "cam\u2028x", "\u202eevil", "\x1b[2J"):
                response = await client.post("/api/v1/keys", json={"name": name, "face_id": "f"})
                answers.append((response.status, (await response.json())["error"]))
            return answers

    answers = asyncio.run(scenario())
    assert all(status == 400 and "control characters" in reason for status, reason in answers), answers


def test_a_key_made_over_the_api_stores_a_map_by_reference_face_ids(tmp_path: Path) -> None:
    checked: list[str] = []

    async def scenario() -> list:
        @web.middleware
        async def as_alice(request: web.Request, handler):
            request[PRINCIPAL_KEY] = Principal("alice", "user")
            return await handler(request)

        async def known_faces(face_id: str, caller: Principal) -> None:  # the node's check (404 for another's)
            checked.append(face_id)

        app = web.Application(middlewares=[as_alice])
        add_key_routes(app, KeyApi(StreamKeyStore(tmp_path), known_faces, lambda options: dict(options),
                                   AuditLog(tmp_path / "audit.jsonl")))
        answers = []
        async with TestClient(TestServer(app)) as client:
            for faces_map in ({"u-ref1": "grace_hopper", "u-ref2": "keep"}, {"person-2": "grace_hopper"}):
                response = await client.post("/api/v1/keys", json={"name": "podcast", "face_id": "astronaut",
                                                                   "options": {"faces_map": faces_map}})
                answers.append((response.status, await response.json()))
        return answers

    (made, made_body), (by_id, by_id_body) = asyncio.run(scenario())
    assert made == 201 and made_body["options"]["faces_map"] == {"u-ref1": "grace_hopper", "u-ref2": "keep"}
    assert {"u-ref1", "u-ref2", "grace_hopper"} <= set(checked) and "keep" not in checked
    assert by_id == 400 and "person ids" in by_id_body["error"]
    stored = StreamKeyStore(tmp_path).list()[0].stream
    assert stored.swap["faces_map"] == {"u-ref1": "grace_hopper", "u-ref2": "keep"} and stored.map_photos == {}
