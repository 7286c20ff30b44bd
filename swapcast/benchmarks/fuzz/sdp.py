"""The SDP layer: offers made by a real aiortc peer (a browser-like sendrecv one, a WHIP
publisher's sendonly one, a WHEP viewer's recvonly one), mutated line by line and byte by byte,
sent to ``POST /api/v1/sessions``, ``/api/v1/sessions/{id}/offer``, ``/whip`` and ``/whep``.
An offer the node accepts makes a real session, which is ended at once (its DELETE is
fuzz input too: the stream key for WHIP, the owner's token otherwise)."""

from __future__ import annotations

import json
import random

from aiortc import RTCPeerConnection

from swapcast.benchmarks.fuzz.fixtures import Fixtures
from swapcast.benchmarks.fuzz.mutate import NON_UTF8, mutate_bytes
from swapcast.benchmarks.fuzz.node import FuzzNode, build_request, send_raw
from swapcast.benchmarks.fuzz.outcome import Outcome, http_outcome

HOSTILE_VALUES = ("", "0", "-1", "4294967296", "99999999999999999999", "x" * 2000, "\u00e9", "a b c", "::", "%",
                  "999.999.999.999", "255.255.255.255 70000", "sha-256 ZZ", "actpass actpass", "0 0 0 0 0 0")


async def make_offers() -> dict[str, str]:
    """One offer of each kind, with every candidate in it (as browsers and OBS send them)."""
    offers = {}
    for kind, direction in (("browser", "sendrecv"), ("publisher", "sendonly"), ("viewer", "recvonly")):
        pc = RTCPeerConnection()
        try:
            pc.addTransceiver("video", direction=direction)
            pc.addTransceiver("audio", direction=direction)
            await pc.setLocalDescription(await pc.createOffer())
            offers[kind] = pc.localDescription.sdp
        finally:
            await pc.close()
    return offers


def mutate_sdp(rng: random.Random, sdp: str) -> bytes:
    lines = sdp.splitlines()
    for _ in range(rng.randint(1, 4)):
        if not lines:
            break
        i = rng.randrange(len(lines))
        op = rng.choice(("drop", "dup", "swap", "value", "value", "media-flood", "attr", "bytes"))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "value":
            head, sep, _ = lines[i].partition(":" if lines[i].startswith("a=") else "=")
            words = lines[i][len(head) + len(sep):].split(" ")
            words[rng.randrange(len(words))] = rng.choice(HOSTILE_VALUES)
            lines[i] = head + sep + " ".join(words)
        elif op == "media-flood":  # many copies of a media section
            start = next((k for k, line in enumerate(lines) if line.startswith("m=")), 0)
            lines += lines[start:] * rng.choice((2, 10, 100))
        elif op == "attr":
            lines.insert(i, rng.choice((
                "a=candidate:1 1 udp 1 " + rng.choice(("::1", "1.1.1.1", "999.1.1.1", "fe80::1%eth0", "x")) + " "
                + rng.choice(("0", "70000", "9")) + " typ " + rng.choice(("host", "relay", "srflx", "zzz")),
                "a=fingerprint:sha-256 " + rng.choice(("00", "ZZ:ZZ", "", "AB" * 40)),
                "a=setup:" + rng.choice(("passive", "holdconn", "")), "a=ice-ufrag:", "a=ice-pwd:" + "p" * 300,
                "a=rtpmap:96 " + rng.choice(("H264/90000", "VP8/0", "opus/48000/999", "X/-1")),
                "a=fmtp:96 profile-level-id=" + rng.choice(("zz", "64001f", "")),
                "a=ssrc:" + rng.choice(("4294967296", "-1", "0")) + " cname:x", "a=mid:" + "m" * 500,
                "a=extmap:" + rng.choice(("0", "300", "15/sendonly")) + " urn:x", "a=group:BUNDLE 7 8 9",
                "m=video 9 UDP/TLS/RTP/SAVPF " + " ".join(str(n) for n in range(rng.choice((1, 200))))),
            ))
        else:
            lines[i] = mutate_bytes(rng, lines[i].encode(), 2).decode("latin-1")
    text = rng.choice(("\r\n", "\r\n", "\n", "\r")).join(lines) + "\r\n"
    raw = text.encode("latin-1", "replace")
    return raw + rng.choice(NON_UTF8) if rng.random() < 0.05 else raw


class SdpLayer:
    name = "sdp"

    def __init__(self, node: FuzzNode, fixtures: Fixtures, offers: dict[str, str]) -> None:
        self.node, self.fixtures, self.offers = node, fixtures, offers

    async def once(self, rng: random.Random) -> Outcome:
        target = rng.choice(("session", "session", "offer", "whip", "whip", "whep"))
        alice = [(b"Authorization", b"Bearer " + self.fixtures.alice.encode())]
        sdp_type = [(b"Content-Type", b"application/sdp")]
        if target == "session":
            sdp = mutate_sdp(rng, self.offers["browser"])
            body = _json_with_sdp(rng, {"face_id": self.fixtures.face_id, "type": "offer"}, sdp)
            raw = build_request(b"POST", b"/api/v1/sessions", alice + [(b"Content-Type", b"application/json")], body)
        elif target == "offer":
            placed = await send_raw(self.node.http_port, build_request(
                b"POST", b"/api/v1/sessions", alice + [(b"Content-Type", b"application/json")],
                json.dumps({"face_id": self.fixtures.face_id}).encode()))
            session_id = _field(placed.body, "session_id") or "none"
            body = _json_with_sdp(rng, {"type": "offer"}, mutate_sdp(rng, self.offers["browser"]))
            raw = build_request(b"POST", f"/api/v1/sessions/{session_id}/offer".encode(),
                                alice + [(b"Content-Type", b"application/json")], body)
        elif target == "whip":
            raw = build_request(b"POST", b"/whip", sdp_type + [
                (b"Authorization", b"Bearer " + self.fixtures.stream_key.encode())], mutate_sdp(rng, self.offers["publisher"]))
        else:  # a viewer of a live WHIP session (published unmutated first), or of any known id
            publish = None
            if rng.random() < 0.7:
                publish = await send_raw(self.node.http_port, build_request(b"POST", b"/whip", sdp_type + [
                    (b"Authorization", b"Bearer " + self.fixtures.stream_key.encode())], self.offers["publisher"].encode()))
            location = _location(publish.head) if publish is not None and publish.status == 201 else None
            session_id = location.rsplit(b"/", 1)[1] if location else self.fixtures.pick(rng, "session").encode()
            raw = build_request(b"POST", b"/whep/" + session_id, alice + sdp_type, mutate_sdp(rng, self.offers["viewer"]))
        answer = await send_raw(self.node.http_port, raw)
        outcome = http_outcome(self.name, target, raw, answer)
        if answer.status == 201:
            await self._end(answer.head, answer.body)
        elif target == "offer":  # the placed session the refused offer was for
            await self._end(b"", json.dumps({"session_id": session_id}).encode())
        if target == "whep" and location:
            await self._end(b"Location: " + location, b"")
        return outcome

    async def _end(self, head: bytes, body: bytes) -> None:
        """End what the offer made: a WHIP session with its stream key, a viewer or a
        session with alice's token."""
        location = _location(head)
        session_id = _field(body, "session_id")
        if location and location.startswith(b"/whip/"):
            credential = self.fixtures.stream_key
        else:
            credential = self.fixtures.alice
            location = location if location and location.startswith(b"/whep/") else (
                f"/api/v1/sessions/{session_id}".encode() if session_id else None)
        if location:
            await send_raw(self.node.http_port, build_request(
                b"DELETE", location, [(b"Authorization", b"Bearer " + credential.encode())], b""))


def _location(head: bytes) -> bytes | None:
    return next((line.split(b":", 1)[1].strip() for line in head.split(b"\r\n")
                 if line.lower().startswith(b"location:")), None)


def _json_with_sdp(rng: random.Random, fields: dict, sdp: bytes) -> bytes:
    """The JSON body carrying ``sdp`` (as text; its odd bytes kept as \\u escapes or raw)."""
    body = json.dumps({**fields, "sdp": sdp.decode("latin-1")}).encode()
    return mutate_bytes(rng, body, 1) if rng.random() < 0.1 else body


def _field(body: bytes, name: str) -> str | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    return value.get(name) if isinstance(value, dict) and isinstance(value.get(name), str) else None
