"""The events WebSocket and the tokens it is opened with: already expired, expiring within a
second or two, forged or malformed, or good for an hour. A socket must not outlive its
token (round 3: it went on streaming sessions after its token expired, while a REST call
with that token answered 401); one whose token expires is closed with 1008 within a second
of the expiry, one with a bad token is never opened."""

from __future__ import annotations

import asyncio
import random
import time

import aiohttp
from aiohttp import WSCloseCode, WSMsgType

from signaling.auth import mint_token
from swapcast.benchmarks.fuzz.node import SECRET, FuzzNode
from swapcast.benchmarks.fuzz.outcome import Outcome
from swapcast.benchmarks.fuzz.tokens import hostile_token

EVENTS = "/api/v1/events"
EXPIRY_GRACE_S = 2.0  # the socket's next check is within its interval (1 s); the rest is the machine's load


class EventsLayer:
    name = "events"

    def __init__(self, node: FuzzNode) -> None:
        self.node = node

    async def once(self, rng: random.Random) -> Outcome:
        kind = rng.choice(("expiring", "expiring", "expired", "hostile", "hour"))
        now = time.time()
        if kind == "expiring":
            ttl = rng.uniform(1.0, 2.5)
            token = mint_token(SECRET, "alice", ttl_s=ttl)
            expires = int(now) + int(ttl)  # mint_token truncates the issue time
        elif kind == "expired":
            token, expires = mint_token(SECRET, "alice", ttl_s=-30), 0
        elif kind == "hostile":
            token, expires = hostile_token(rng).decode("latin-1"), 0
        else:
            token, expires = mint_token(SECRET, "alice"), 0
        url = f"http://127.0.0.1:{self.node.http_port}{EVENTS}"
        try:
            async with aiohttp.ClientSession() as http:
                return await self._watch(http, url, token, kind, expires)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            return Outcome(self.name, kind, "closed", None if kind != "hour" else f"could not connect: {exc!r}")

    async def _watch(self, http: aiohttp.ClientSession, url: str, token: str, kind: str, expires: int) -> Outcome:
        try:
            ws = await http.ws_connect(url, params={"token": token}, timeout=aiohttp.ClientWSTimeout(ws_close=5))
        except aiohttp.WSServerHandshakeError as exc:
            if kind in ("expired", "hostile") and exc.status == 401:
                return Outcome(self.name, kind, exc.status)
            return Outcome(self.name, kind, exc.status, f"the events upgrade got {exc.status} for a {kind} token")
        if kind in ("expired", "hostile"):
            await ws.close()
            return Outcome(self.name, kind, 101, f"an events socket opened with a {kind} token")
        watch_s = 1.5 if kind == "hour" else expires - time.time() + EXPIRY_GRACE_S
        try:
            async with asyncio.timeout(max(watch_s, 0.1)):
                async for message in ws:
                    if message.type == WSMsgType.ERROR:
                        break
        except TimeoutError:
            await ws.close()
            if kind == "expiring":
                return Outcome(self.name, kind, "open", "the events socket outlived its token by more than "
                                                        f"{EXPIRY_GRACE_S:g} s")
            return Outcome(self.name, kind, "open")
        if kind == "expiring" and ws.close_code != WSCloseCode.POLICY_VIOLATION:
            return Outcome(self.name, kind, ws.close_code or "closed",
                           f"an expiring token's socket closed with {ws.close_code}, not 1008")
        return Outcome(self.name, kind, ws.close_code or "closed")
