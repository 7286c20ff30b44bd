"""The revocation watch ends exactly the live publishes whose key is no longer active, and
none while the store cannot be read (a store outage is no revocation)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from signaling.key_revocation import REVOKED, RevocationWatch
from signaling.stream_keys import StreamKeyError, StreamKeyStore


class Holder:
    def __init__(self, hashes: set[str]) -> None:
        self.hashes = set(hashes)
        self.ended: list[tuple[str, str]] = []

    def live_key_hashes(self) -> set[str]:
        return set(self.hashes)

    async def end_key(self, key_hash: str, reason: str) -> None:
        self.ended.append((key_hash, reason))
        self.hashes.discard(key_hash)


def test_only_revoked_keys_end_and_a_store_outage_ends_nothing(tmp_path: Path, monkeypatch) -> None:
    store = StreamKeyStore(tmp_path)
    (_, kept), (_, gone) = store.add("kept", face_id="f"), store.add("gone", face_id="f")
    rtmp, whip = Holder({kept.key_hash, gone.key_hash}), Holder({gone.key_hash})

    async def scenario():
        watch = RevocationWatch(store, (rtmp, whip), poll_s=0.05)
        watch.start()
        await asyncio.sleep(0.2)
        nothing_yet = (list(rtmp.ended), list(whip.ended))
        store.revoke(gone.key_id)
        for _ in range(100):
            if rtmp.ended and whip.ended:
                break
            await asyncio.sleep(0.02)
        await watch.close()
        return nothing_yet

    assert asyncio.run(scenario()) == ([], [])
    assert rtmp.ended == [(gone.key_hash, REVOKED)] and whip.ended == [(gone.key_hash, REVOKED)]

    def unreadable(*_args):
        raise StreamKeyError("the volume is gone")

    monkeypatch.setattr(store, "_active_among", unreadable)
    outage = Holder({kept.key_hash})
    asyncio.run(RevocationWatch(store, (outage,)).check_now())
    store.close()
    assert outage.ended == []
