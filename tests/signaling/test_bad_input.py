"""No input reaches a 5xx: every request the probe found answering 500 with a traceback is
answered 4xx with a reason — deeply nested or non-UTF-8 JSON on every JSON route, a bearer
token or stream key with a byte that is not UTF-8 (unauthenticated), a validly signed token
whose ``sub`` is a number, an image whose header declares huge dimensions — and the safety
net under the routes turns an unreadable input a handler missed into 400 without turning
real bugs into 4xx."""

from __future__ import annotations

import asyncio
import struct
import sys
import time
import zlib
from pathlib import Path

import jwt
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from signaling.auth import mint_token
from signaling.http_input import bad_input_middleware, read_json
from signaling.stream_keys import StreamKeyStore, rtmp_session_id
from swapcast.app import build_app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import TEST_SECRET, node_config, run  # noqa: E402

ALICE = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'alice')}"}
DEEP = b"[" * 20_000 + b"]" * 20_000  # past the JSON parser's recursion limit, well under the body limit


def png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width`` x ``height`` (the pixels are never there)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 64)) + chunk(b"IEND", b""))


async def started(app: web.Application) -> TestClient:
    client = TestClient(TestServer(app, host="127.0.0.1"))
    await client.start_server()
    return client


async def raw_status(client: TestClient, head: bytes) -> tuple[int, bytes]:
    """Send a request head byte for byte (aiohttp's client would refuse these headers)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", client.port)
    writer.write(head + b"Host: 127.0.0.1\r\nConnection: close\r\n\r\n")
    answer = await reader.read()
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_json_routes_answer_unreadable_bodies_400_with_a_reason(engine, tmp_path):
    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        try:
            session = (await (await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=ALICE)).json())
            sid = session["session_id"]
            routes = [("POST", "/api/v1/sessions"), ("PATCH", f"/api/v1/sessions/{sid}"),
                      ("POST", f"/api/v1/sessions/{sid}/offer"), ("POST", f"/api/v1/sessions/{sid}/candidates"),
                      ("POST", "/api/v1/keys")]
            answers = {}
            for method, path in routes:
                for kind, body in (("deep", DEEP), ("not utf-8", b'{"face_id": "\xff\xfe"}'), ("not json", b"{not json"),
                                   ("surrogate", b'{"face_id": "u-\\ud800"}')):
                    response = await client.request(method, path, data=body,
                                                    headers={**ALICE, "Content-Type": "application/json"})
                    answers[method, path, kind] = response.status, (await response.json())["error"]
            return answers
        finally:
            await client.close()

    answers = run(scenario(), timeout=60)
    for request, (status, reason) in answers.items():
        assert status == 400 and reason, request
    reasons = {kind: {reason for (_, _, of), (_, reason) in answers.items() if of == kind} for kind in ("deep", "surrogate")}
    assert reasons == {"deep": {"the JSON body is nested too deeply"},
                       "surrogate": {"the JSON body holds a lone surrogate escape (\\ud800-\\udfff), which is not text"}}


def test_unauthenticated_garbage_credentials_are_401_not_500(engine, tmp_path):
    integer_sub = jwt.encode({"sub": 42, "role": "user", "exp": int(time.time()) + 60}, TEST_SECRET, algorithm="HS256")

    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        try:
            answers = {
                "token byte": await raw_status(client, b"GET /api/v1/sessions HTTP/1.1\r\nAuthorization: Bearer ey\xff\xfe.a.b\r\n"),
                "stream key byte": await raw_status(client, b"POST /whip HTTP/1.1\r\nAuthorization: Bearer sk_\xff\xfe\r\n"
                                                            b"Content-Type: application/sdp\r\nContent-Length: 0\r\n"),
            }
            numeric = await client.get("/api/v1/sessions", headers={"Authorization": f"Bearer {integer_sub}"})
            answers["integer sub"] = numeric.status, await numeric.read()
            return answers
        finally:
            await client.close()

    answers = run(scenario(), timeout=60)
    assert answers["token byte"][0] == 401 and b"malformed token" in answers["token byte"][1]
    assert answers["stream key byte"][0] in (401, 403) and b"error" in answers["stream key byte"][1]
    assert answers["integer sub"] == (401, b'{"error": "token has no subject"}')


def test_a_stream_key_that_is_not_utf8_is_simply_unknown(tmp_path):
    store = StreamKeyStore(tmp_path)
    store.add("cam", face_id="astronaut")
    undecodable = b"sk_\xff\xfe".decode("utf-8", "surrogateescape")  # as a header or an RTMP name arrives
    assert store.find(undecodable) is None
    assert rtmp_session_id(undecodable).startswith("rtmp-")


def test_an_image_declaring_huge_dimensions_is_413(engine, tmp_path):
    bomb = png_header(60_000, 60_000)  # 3.6 gigapixels: Pillow refuses to even open it

    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        try:
            raw = await client.post("/api/v1/faces", data=bomb, headers={**ALICE, "Content-Type": "image/png"})
            big = await client.post("/api/v1/faces", data=png_header(5000, 100), headers={**ALICE, "Content-Type": "image/png"})
            return (raw.status, (await raw.json())["error"]), big.status
        finally:
            await client.close()

    (status, reason), big = run(scenario(), timeout=60)
    assert status == 413 and "limit is 4096 px" in reason
    assert big == 413


def test_the_safety_net_answers_unreadable_input_400_and_leaves_bugs_500(caplog):
    async def unreadable(request: web.Request) -> web.Response:
        return web.json_response({"text": (await request.read()).decode("utf-8")})  # a handler that forgot to check

    async def nested(request: web.Request) -> web.Response:
        return web.json_response({"body": await read_json(request)})

    async def bug(_: web.Request) -> web.Response:
        raise KeyError("a real bug")

    async def scenario():
        app = web.Application(middlewares=[bad_input_middleware])
        app.router.add_post("/unreadable", unreadable)
        app.router.add_post("/nested", nested)
        app.router.add_get("/bug", bug)
        client = await started(app)
        try:
            first = await client.post("/unreadable", data=b"\xff")
            second = await client.post("/nested", data=DEEP)
            third = await client.get("/bug")
            return ((first.status, await first.json()), (second.status, await second.json()), third.status)
        finally:
            await client.close()

    first, second, third = run(scenario(), timeout=30)
    assert first == (400, {"error": "the request is not valid UTF-8"})
    assert second == (400, {"error": "the JSON body is nested too deeply"})
    assert third == 500
    assert any("unreadable input reached the handler" in record.getMessage() for record in caplog.records)


def test_an_rtmp_stream_name_that_is_not_utf8_is_a_bad_name(engine, tmp_path):
    """The same bytes as an RTMP stream key (AMF0 strings keep undecodable bytes): the
    publisher and a player are told BadName / StreamNotFound, and the node goes on serving."""
    from streamer.rtmp.client import RtmpClientError, RtmpPlayClient, RtmpPublishClient
    from swapcast.app import NODE_KEY

    async def scenario():
        app = build_app(node_config(tmp_path), engine=engine)
        client = await started(app)
        try:
            base = f"rtmp://127.0.0.1:{app[NODE_KEY].rtmp_server.port}/live/"
            codes = []
            for kind in (RtmpPublishClient, RtmpPlayClient):
                try:
                    await kind(base + "sk_\udcff\udcfe", timeout=5).connect()
                    codes.append("connected")
                except RtmpClientError as exc:
                    codes.append(exc.code)
            healthy = (await client.get("/healthz")).status
            return codes, healthy
        finally:
            await client.close()

    codes, healthy = run(scenario(), timeout=60)
    assert codes[0] == "NetStream.Publish.BadName" and codes[1] and codes[1].startswith("NetStream.Play.")
    assert healthy == 200


FUZZED_VALUES = [None, True, 0, -1, 2**70, 1e308, float("nan"), 0.5, "", "x" * 5000, "\ud800", "u-" + "0" * 12,
                 "astronaut", "../../etc/passwd", "rtmp://127.0.0.1:6379/live/x", [], [1, [2]], {}, {"a": {"b": None}},
                 "\x00", "é" * 100]  # every JSON type, with the values handlers least expect


def test_fuzzed_json_fields_never_reach_a_5xx(engine, tmp_path):
    """Every JSON route, every field given every kind of value (lone surrogates, huge
    numbers, wrong types, paths, internal URLs) by a seeded generator: 4xx or success, never 5xx."""
    import json
    import random

    rng = random.Random(15)
    fields = {"name", "face_id", "options", "push", "record", "sdp", "type", "enabled", "candidate", "sdpMid",
              "sdpMLineIndex", "blend", "mouth_mask"}

    async def scenario():
        client = await started(build_app(node_config(tmp_path), engine=engine))
        admin = {"Authorization": f"Bearer {mint_token(TEST_SECRET, 'ops', role='admin')}"}
        try:
            sid = (await (await client.post("/api/v1/sessions", json={"face_id": "astronaut"}, headers=ALICE)).json())["session_id"]
            routes = [("POST", "/api/v1/sessions"), ("PATCH", f"/api/v1/sessions/{sid}"),
                      ("POST", f"/api/v1/sessions/{sid}/offer"), ("POST", f"/api/v1/sessions/{sid}/candidates"),
                      ("POST", "/api/v1/keys")]
            statuses: dict[int, int] = {}
            worst = []
            for _ in range(120):
                body = {name: rng.choice(FUZZED_VALUES) for name in rng.sample(sorted(fields), rng.randint(0, 5))}
                if rng.random() < 0.3:
                    body["options"] = {"blend": rng.choice(FUZZED_VALUES), "face_selection": rng.choice(FUZZED_VALUES)}
                method, path = rng.choice(routes)
                data = json.dumps(body, allow_nan=True).encode()
                response = await client.request(method, path, data=data, headers={
                    **(admin if rng.random() < 0.2 else ALICE), "Content-Type": "application/json"})
                statuses[response.status] = statuses.get(response.status, 0) + 1
                if response.status >= 500:
                    worst.append((method, path, data[:300], await response.text()))
            return statuses, worst
        finally:
            await client.close()

    statuses, worst = run(scenario(), timeout=120)
    assert worst == [], worst
    assert sum(statuses.values()) == 120 and any(400 <= status < 500 for status in statuses)
