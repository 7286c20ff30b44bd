"""Revocation that bites: a live publish whose stream key was revoked ends within a second,
with its pushes, players and play token, whichever node or command revoked it.

A key is revoked when it leaked, so refusing its next publish is not enough: the publisher
on air would stay there (swapped, pushed, played) until it left by itself. Each node runs a
``RevocationWatch`` over what publishes on it (``KeyHolder``: the RTMP ingest, the WHIP
sessions): every ``POLL_S`` it asks the key store which of the live keys are still active,
an indexed read of those few keys only, and ends the rest. The revoking node also checks at
once (``check_now``). The store is shared by the nodes of a cluster, so a revocation made
anywhere (the API on another node, ``swapcast keys revoke``) is seen by all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from typing import Protocol

from signaling.stream_keys import StreamKeyError, StreamKeyStore

log = logging.getLogger(__name__)

POLL_S = 0.5
REVOKED = "stream key revoked"


class KeyHolder(Protocol):
    """Something that keeps publishes alive by stream key."""

    def live_key_hashes(self) -> set[str]:
        """The hashes of the keys publishing here now."""

    async def end_key(self, key_hash: str, reason: str) -> None:
        """End every publish (and what hangs on it) of the key with this hash."""


class RevocationWatch:
    def __init__(self, store: StreamKeyStore, holders: Iterable[KeyHolder], poll_s: float = POLL_S) -> None:
        self._store = store
        self._holders = tuple(holders)
        self._poll_s = poll_s
        self._task: asyncio.Task[None] | None = None
        self._checking = asyncio.Lock()
        self._store_down = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def check_now(self) -> None:
        """End the live publishes of keys revoked since the last check."""
        async with self._checking:
            live = set().union(*(holder.live_key_hashes() for holder in self._holders))
            if not live:
                return
            try:
                active = await self._store.active_among(live)
            except StreamKeyError as exc:  # an unreadable store revokes nothing: streams go on
                if not self._store_down:
                    log.warning("revocation check: %s; live streams go on until it answers", exc)
                self._store_down = True
                return
            self._store_down = False
            for key_hash in live - active:
                for holder in self._holders:
                    try:
                        await holder.end_key(key_hash, REVOKED)
                    except Exception:  # one stream failing to end must not keep the others on air
                        log.exception("ending a revoked key's publish failed")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._poll_s)
            await self.check_now()
