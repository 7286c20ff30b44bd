"""The HTTP API layer: every route of the node's OpenAPI document (so a new route is fuzzed
the day it is documented), with mutated JSON bodies, path parameters, queries, headers,
methods, framing and credentials."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from urllib.parse import quote

from signaling.openapi import openapi_document
from swapcast.benchmarks.fuzz.fixtures import Fixtures
from swapcast.benchmarks.fuzz.mutate import FOREIGN_DIGITS, NON_UTF8, hostile_value, json_body, mutate_bytes
from swapcast.benchmarks.fuzz.node import FuzzNode, build_request, send_raw
from swapcast.benchmarks.fuzz.outcome import Outcome, http_outcome
from swapcast.benchmarks.fuzz.tokens import authorization

CANDIDATE = "candidate:1 1 udp 2130706431 127.0.0.1 50000 typ host"
PARAM_KINDS = {"session_id": "session", "face_id": "face", "key_id": "key", "job_id": "job", "node_id": "node",
               "viewer_id": "viewer"}
HOSTILE_SEGMENTS = (b"%ff", b"%c3%28", b"..%2F..%2Fetc%2Fpasswd", b"%00", b"a" * 5000, b"%F0%9F%99%82", b"\xff\xfe",
                    b"%2e%2e", b"-", b"_", b"%20", b"%0d%0aX:1", b"rtmp-0000000000000000", b"self", b"*")


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    operation: str


def routes() -> list[Route]:
    document = openapi_document(gateway=False)
    return [Route(method.upper(), path, op["operationId"]) for path, ops in document["paths"].items()
            for method, op in ops.items()]


def base_body(operation: str, fixtures: Fixtures, offer: str) -> object | None:
    """A valid JSON body for the operation (what mutation starts from); None: no JSON body."""
    face = fixtures.face_id
    return {
        "createSession": {"face_id": face, "options": {"blend": 0.8, "mouth_mask": True}},
        "offerSession": {"sdp": offer, "type": "offer"},
        "addCandidate": {"candidate": CANDIDATE, "sdpMid": "0", "sdpMLineIndex": 0},
        "updateSession": {"enabled": False, "face_id": face, "options": {"blend": 0.5, "face_selection": "all"}},
        "createKey": {"name": "fuzzed", "face_id": face, "options": {"feather": 0.1, "smoothing": "off"},
                      "push": ["rtmp://cdn.example/live/x"]},
        "submitJob": {"face_id": face, "path": "fuzz/input.mp4", "priority": "normal"},
    }.get(operation)


class ApiLayer:
    name = "http"

    def __init__(self, node: FuzzNode, fixtures: Fixtures, offer: str) -> None:
        self.node, self.fixtures, self.offer = node, fixtures, offer
        self.routes = routes()

    def case(self, rng: random.Random) -> tuple[Route, bytes, bool]:
        """A request for a random route; and whether its framing promises more body than it has."""
        route = rng.choice(self.routes)
        method = route.method.encode()
        if rng.random() < 0.04:
            method = rng.choice((b"OPTIONS", b"HEAD", b"PUT", b"TRACE", b"CONNECT", b"G\xffT", b"get", b"X" * 300))
        target = self._target(rng, route)
        headers = self._headers(rng, route)
        body = b""
        base = base_body(route.operation, self.fixtures, self.offer)
        if route.operation == "createKey" and rng.random() < 0.3:
            base = {**base, "push": self._push_list(rng)}
        if base is not None or rng.random() < 0.1:
            body = json_body(rng, base if base is not None else hostile_value(rng))
            headers.append((b"Content-Type", rng.choice((b"application/json",) * 6 + (
                b"text/plain", b"application/json; charset=latin-1", b"application/json; charset=\xff",
                b"multipart/form-data", b"multipart/form-data; boundary=", b""))))
        content_length = None
        if body and rng.random() < 0.05:
            content_length = rng.choice((b"-1", b"abc", b"99999999999999999999999", str(len(body) // 2).encode(),
                                         b"0", b"1, 2", b" 5"))
        if body and rng.random() < 0.04:  # chunked framing, sometimes broken
            framed = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
            damaged = rng.random() < 0.5
            framed = mutate_bytes(rng, framed) if damaged else framed
            return route, build_request(method, target, headers, framed, chunked=True), damaged
        return route, build_request(method, target, headers, body, content_length=content_length), content_length is not None

    def _target(self, rng: random.Random, route: Route) -> bytes:
        path = route.template
        for name, kind in PARAM_KINDS.items():
            if "{" + name + "}" in path:
                value = (self.fixtures.pick(rng, kind).encode() if rng.random() < 0.6
                         else rng.choice(HOSTILE_SEGMENTS))
                path = path.replace("{" + name + "}", value.decode("latin-1"))
        target = path.encode("latin-1")
        if route.operation == "faceThumbnail" and rng.random() < 0.5:  # a signed link, as an <img> sends it
            expires = rng.choice((b"9999999999", b"1", b"", b"-1", b"9" * 40, b"1_0", b"+1", b"%20123",
                                  quote(rng.choice(FOREIGN_DIGITS)).encode()))
            sig = rng.choice((b"x", b"", b"0" * 64, b"%ff", b"a" * 5000))
            return target + b"?expires=" + expires + b"&sig=" + sig
        if rng.random() < 0.3:
            name = rng.choice((b"limit", b"name", b"token", b"offset", b"a", b"\xff", b"limit[]", b"expires", b"sig"))
            value = rng.choice((b"10", b"-1", b"0", b"99999999999999999999", b"1e3", b"%ff", b"", b"x" * 3000,
                                quote(rng.choice(FOREIGN_DIGITS)).encode(),
                                quote(str(hostile_value(rng)).encode("utf-8", "surrogatepass")).encode(), rng.choice(self.fixtures.bearer_tokens())))
            target += b"?" + name + b"=" + value
            if rng.random() < 0.2:
                target += b"&" + name + b"=" + value
        return target

    def _push_list(self, rng: random.Random) -> list:
        """Push destinations of a new key: past the quota, repeated, or spelled to reach the
        node's own network (every IPv6 form that carries IPv4)."""
        inner = rng.choice(("[::127.0.0.1]", "[::ffff:0:127.0.0.1]", "[64:ff9b:1::7f00:1]", "[::ffff:7f00:1]",
                            "[2002:7f00:1::1]", "[2001:0:4136:e378:8000:63bf:80ff:fffe]", "127.0.0.1:6379",
                            "169.254.169.254", "[fe80::1%25eth0]", "localhost", "0x7f000001", "2130706433"))
        return rng.choice((
            [f"rtmp://cdn.example/live/{n}" for n in range(rng.choice((17, 200, 3000)))],
            ["rtmp://cdn.example/live/x"] * rng.choice((2, 50)),
            [f"rtmp://{inner}/live/x"],
            [f"rtmps://{inner}:443/app/k", "rtmp://cdn.example/live/y"],
        ))

    def _headers(self, rng: random.Random, route: Route) -> list[tuple[bytes, bytes]]:
        good = self.fixtures.bearer_tokens()
        if route.template.startswith("/whip"):
            good = good + [self.fixtures.stream_key.encode(), self.fixtures.spare_key.encode()]
        headers = []
        credential = authorization(rng, good)
        if credential is not None:
            headers.append((b"Authorization", credential))
        for _ in range(rng.choice((0, 0, 0, 1, 2))):
            headers.append(rng.choice((
                (b"X-Swapcast-Session-Id", rng.choice((b"", b"a" * 65, b"..", b"\xff", b"abc-_", b"x y"))),
                (b"Range", rng.choice((b"bytes=-0", b"bytes=0-", b"bytes=5-1", b"bytes=-99999999999999999999",
                                       b"bytes=0-1,2-3", b"items=0-1", b"bytes=\xff", b"bytes=1-1" * 500,
                                       b"bytes=-" + rng.choice(FOREIGN_DIGITS).encode(),
                                       rng.choice(FOREIGN_DIGITS).encode() + b"-"))),
                (b"If-Range", rng.choice((b'"etag"', b"Wed, 21 Oct 2015 07:28:00 GMT", b"\xff"))),
                (b"Idempotency-Key", rng.choice((b"", b"k" * 300, b"\xc3\x28", b"same"))),
                (b"X-Forwarded-For", rng.choice((b"1.2.3.4", b"::1, 127.0.0.1", b"garbage", b"\xff", b",,,"))),
                (b"Upgrade", b"websocket"), (b"Sec-WebSocket-Key", b"dGhlIHNhbXBsZSBub25jZQ=="),
                (b"Sec-WebSocket-Version", b"13"), (b"Expect", b"100-continue"),
                (b"Accept", b"\xff/\xff"), (b"Cookie", b"a=" + rng.choice(NON_UTF8)),
                (b"X-" + rng.randbytes(4).hex().encode(), b"v" * rng.choice((1, 8000))),
            )))
        return headers

    async def once(self, rng: random.Random) -> Outcome:
        route, raw, misframed = self.case(rng)
        answer = await send_raw(self.node.http_port, raw, misframed=misframed)
        if answer.status in (200, 201):
            self._remember(answer.body)
        return http_outcome(self.name, f"{route.method} {route.template}", raw, answer)

    def _remember(self, body: bytes) -> None:
        try:
            value = json.loads(body)
        except ValueError:
            return
        if isinstance(value, dict):
            for field_name, kind in (("session_id", "session"), ("key_id", "key"), ("job_id", "job")):
                self.fixtures.remember(kind, value.get(field_name))
