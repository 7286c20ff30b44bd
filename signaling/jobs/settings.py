"""The jobs settings every part of the queue shares (API, workers, CLI), resolved once from
the config's ``jobs`` section so nobody re-derives the storage default on their own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


class JobsSection(Protocol):
    """The config's ``jobs`` section (``swapcast.config.JobsConfig``), as far as read here."""

    storage_dir: Path | None
    chunk_seconds: float
    claim_timeout_s: float
    max_attempts: int
    max_upload_mb: int
    webhook_secret: str | None


@dataclass(frozen=True)
class JobSettings:
    storage_dir: Path  # uploads, chunks and outputs; shared by every API node and worker
    chunk_seconds: float = 3.0
    claim_timeout_s: float = 30.0
    max_attempts: int = 3
    max_upload_mb: int = 2048
    webhook_secret: str | None = None

    @classmethod
    def from_config(cls, jobs: JobsSection, data_dir: Path) -> JobSettings:
        """``jobs.storage_dir`` defaults to ``<server.data_dir>/jobs``; ``~`` is expanded."""
        storage = jobs.storage_dir if jobs.storage_dir is not None else Path(data_dir) / "jobs"
        return cls(
            storage_dir=storage.expanduser(),
            chunk_seconds=jobs.chunk_seconds,
            claim_timeout_s=jobs.claim_timeout_s,
            max_attempts=jobs.max_attempts,
            max_upload_mb=jobs.max_upload_mb,
            webhook_secret=jobs.webhook_secret,
        )

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    def path(self, relative: str) -> Path:
        """A job's stored path (relative to the storage) on this host."""
        return self.storage_dir / relative
