"""The HTTP hold layer: one connection that tries to keep a node's socket (slowloris),
sending its request headers a byte at a time, or nothing at all, for longer than the
node's ``server.request_header_timeout_s`` (10 s). The node must cut it; a connection still
open at the end is a problem, since enough of them from one address exhaust its file
descriptors."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

from swapcast.benchmarks.fuzz.node import FuzzNode
from swapcast.benchmarks.fuzz.outcome import Outcome, hold_outcome

HOLD_WAYS = ("trickle", "silent")
TRICKLED_HEADERS = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Slow: " + b"a" * 4000


class HttpHoldLayer:
    HOLD_S = 16.0  # the node's request_header_timeout_s (10 s) with room to spare
    BYTE_INTERVAL_S = 0.5

    def __init__(self, node: FuzzNode) -> None:
        self.node = node

    async def once(self, rng: random.Random) -> Outcome:
        how = rng.choice(HOLD_WAYS)
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.node.http_port)
        except OSError as exc:
            return Outcome("http-hold", how, "refused", f"HTTP port refused a connection: {exc}")
        try:
            held = await self._hold(how, reader, writer)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return hold_outcome("http-hold", how, held)

    async def _hold(self, how: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> str | None:
        """None once the node closes the connection; else what was held, and how long."""
        started = time.monotonic()
        closed = asyncio.create_task(_closed(reader))
        try:
            for byte in TRICKLED_HEADERS:
                if time.monotonic() - started >= self.HOLD_S:
                    break
                if how == "trickle":
                    writer.write(bytes([byte]))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(asyncio.shield(closed), self.BYTE_INTERVAL_S)
                if closed.done():
                    return None
        except OSError:
            return None  # cut while writing
        finally:
            closed.cancel()
        what = "headers sent a byte at a time" if how == "trickle" else "a connection that sent nothing"
        return f"{what} held for {self.HOLD_S:g} s without the node closing it"


async def _closed(reader: asyncio.StreamReader) -> None:
    """Returns once the node has closed its side (a 408 before the close is read past)."""
    with contextlib.suppress(OSError):
        while await reader.read(4096):
            pass
