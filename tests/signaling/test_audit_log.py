"""The audit log: concurrent appends stay whole lines, the file is private, and entries
outlive the object that wrote them."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from signaling.auth import AuditLog


def test_concurrent_appends_are_whole_lines(tmp_path: Path) -> None:
    log = AuditLog(tmp_path / "audit" / "audit.jsonl")  # the folder is created on demand

    async def main() -> None:
        await asyncio.gather(*(
            log.append(f"user{i}", "face.upload", f"face-{i}", size=i, note="x" * 5000) for i in range(100)
        ))

    asyncio.run(main())
    lines = log.path.read_text().splitlines()
    assert len(lines) == 100
    entries = [json.loads(line) for line in lines]
    assert sorted(e["target"] for e in entries) == sorted(f"face-{i}" for i in range(100))
    assert all(e["actor"] == f"user{e['size']}" and len(e["note"]) == 5000 for e in entries)
    times = [e["time"] for e in entries]
    assert times == sorted(times)  # stamped under the lock: never back in time
    assert stat.S_IMODE(os.stat(log.path).st_mode) == 0o600


def test_entry_shape_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    assert AuditLog(path).read() == []

    entry = asyncio.run(AuditLog(path).append("root", "session.kill", "s-1", reason="abuse\nnext line"))
    assert list(entry)[:4] == ["time", "actor", "action", "target"]
    stamped = datetime.fromisoformat(entry["time"])
    assert stamped.utcoffset() == timedelta(0)  # UTC, and says so
    assert abs((datetime.now(UTC) - stamped).total_seconds()) < 60

    # A new AuditLog (a restarted server) appends after what is there, never rewrites it.
    reopened = AuditLog(path)
    asyncio.run(reopened.append("alice", "key.revoke", "key-9", path=tmp_path))
    assert [e["action"] for e in reopened.read()] == ["session.kill", "key.revoke"]
    assert reopened.read()[0] == entry
    assert reopened.read()[1]["path"] == str(tmp_path)  # non-JSON values written as str
    assert len(path.read_text().splitlines()) == 2  # the newline in a reason stays escaped


def test_time_is_reserved(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="'time'"):
        asyncio.run(AuditLog(tmp_path / "a.jsonl").append("a", "node.drain", "n1", time="yesterday"))
