"""The audit log: who did what to what, and when — one JSON object per line.

Append-only by construction: the file is opened with ``O_APPEND`` for every entry (so a
rotated-away file is never written again) and never truncated or rewritten; each entry is
one ``write`` followed by ``fsync``, so an acknowledged action survives a crash. A lock
keeps concurrent appends from interleaving. The file is created ``0600``: entries name
users and resources.

Actions in use: ``face.upload``, ``face.delete``, ``key.create``, ``key.revoke``,
``session.kill``, ``node.drain``, ``node.ready``.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC


class AuditLog:
    """Appends audit entries to ``path`` (created, with its folder, on the first entry)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        # A thread lock, not an asyncio one: the write runs in a worker thread, and this way
        # one AuditLog may serve several event loops (tests, a CLI tool) safely.
        self._lock = threading.Lock()

    async def append(self, actor: str, action: str, target: str, **details: Any) -> dict[str, Any]:
        """Record that ``actor`` (a principal's subject, or ``"system"``) did ``action`` to
        ``target`` (an id); ``details`` are extra JSON fields (values that JSON cannot hold
        are written as ``str``). Returns the entry written. Blocking I/O runs off the loop."""
        if "time" in details:
            raise TypeError("'time' is set by the audit log")
        return await asyncio.to_thread(self._write, {"actor": actor, "action": action, "target": target, **details})

    def read(self) -> list[dict[str, Any]]:
        """Every entry, oldest first (empty when nothing was logged yet)."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line]

    def _write(self, fields: dict[str, Any]) -> dict[str, Any]:
        with self._lock:  # the timestamp is taken inside, so times never go back in the file
            entry = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), **fields}
            data = (json.dumps(entry, default=str, separators=(",", ":")) + "\n").encode()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, _FLAGS, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
        return entry
