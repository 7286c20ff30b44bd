"""An anonymous WHIP publish is checked by its stream key before its body is read: round 3
had the node read a slowly sent body in full (the SDP of anyone, with any key) and only
then refuse the key. A bogus key now gets its 403 while the body has not even been sent,
and an offer over the SDP limit is a 413 from its Content-Length alone."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "webrtc"))
from webrtc_harness import node, run  # noqa: E402


async def raw_whip(port: int, key: str, length: int) -> bytes:
    """Headers of a WHIP POST promising ``length`` bytes of body, and none of the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"POST /whip HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/sdp\r\n"
                  f"Authorization: Bearer {key}\r\nContent-Length: {length}\r\n\r\n").encode())
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)  # the old node waited for the body
    finally:
        writer.close()


def test_a_bogus_key_is_refused_before_the_body_arrives(engine, tmp_path):
    async def scenario():
        async with node(engine, tmp_path / "data") as client:
            port = client.server.port
            bogus = await raw_whip(port, "sk_" + "x" * 32, 60_000)
            created = await client.post("/api/v1/keys", json={"name": "cam", "face_id": "astronaut"})
            key = (await created.json())["key"]
            oversized = await raw_whip(port, key, 10_000_000)
            return bogus, oversized

    bogus, oversized = run(scenario())
    assert bogus.startswith(b"HTTP/1.1 403"), bogus
    assert oversized.startswith(b"HTTP/1.1 413"), oversized
