"""Face uploads are analysed one at a time on the node's face-library thread, which also
loads the faces sessions start with. One user sending uploads without waiting queued them
there without bound, and every user's uploads and session starts waited behind (a refresh
upload of the fuzzer's took over 30 s). A user has one upload in analysis at a time (429
saying so for the next), and the node a bounded number (503 saying so)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from signaling.registry import MemoryRegistry
from streamer.faces import MAX_UPLOADS_IN_ANALYSIS, FaceLibrary, UploadsBusyError


def test_a_user_has_one_upload_in_analysis_and_the_node_a_bounded_number():
    release = threading.Event()
    library = FaceLibrary(engine=None, store=MemoryRegistry())
    analysed: list[str] = []

    def slow_register(photos, name: str | None, owner: str, labels):
        release.wait(10)
        analysed.append(owner)
        raise RuntimeError("stop here: the test is about admission")

    library._register_upload = slow_register

    async def scenario() -> tuple[int, str, list[int]]:
        first = asyncio.ensure_future(library.add(b"jpeg", owner="alice"))
        await asyncio.sleep(0.05)
        with pytest.raises(UploadsBusyError) as alice_again:
            await library.add(b"jpeg", owner="alice")
        others = [asyncio.ensure_future(library.add(b"jpeg", owner=f"user{n}")) for n in range(MAX_UPLOADS_IN_ANALYSIS - 1)]
        await asyncio.sleep(0.05)
        with pytest.raises(UploadsBusyError) as node_full:
            await library.add(b"jpeg", owner="mallory")
        release.set()
        await asyncio.gather(first, *others, return_exceptions=True)
        return alice_again.value.status, str(node_full.value), [node_full.value.status]

    status, node_reason, node_status = asyncio.run(scenario())
    assert status == 429 and node_status == [503] and "uploads" in node_reason
    assert sorted(analysed) == sorted(["alice", *(f"user{n}" for n in range(MAX_UPLOADS_IN_ANALYSIS - 1))])
    library.close()
