"""The stream key store shared by several processes (nodes on one volume): concurrent
creates and revokes all land, none overwrites another's."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

from signaling.stream_keys import StreamKeyStore

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
