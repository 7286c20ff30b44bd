"""The jobs settings every part of the queue shares (API, workers, CLI), resolved once from
the config's ``jobs`` section so nobody re-derives the storage default on their own."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from signaling.jobs.storage import JobStorage, LocalStorage


class JobsSection(Protocol):
    """The config's ``jobs`` section (``swapcast.config.JobsConfig``), as far as read here."""

    storage: str
    storage_dir: Path | None
    s3_endpoint_url: str | None
    s3_bucket: str | None
    s3_prefix: str
    s3_region: str | None
    chunk_seconds: float
    claim_timeout_s: float
    max_attempts: int
    max_upload_mb: int
    max_active_per_user: int
    max_frames: int
    chunk_timeout_s: float
    webhook_secret: str | None


@dataclass(frozen=True)
class S3Location:
    """A bucket of an S3-compatible service; credentials come from the AWS chain, not from here."""

    bucket: str
    prefix: str = ""  # keys go under "<prefix>/"; "" = the bucket's top
    endpoint_url: str | None = None  # None = AWS
    region: str | None = None  # None = the credential chain's (AWS_DEFAULT_REGION, profile)


@dataclass(frozen=True)
class JobSettings:
    storage_dir: Path  # uploads, chunks and outputs; shared by every API node and worker (unless s3)
    chunk_seconds: float = 3.0
    claim_timeout_s: float = 30.0
    max_attempts: int = 3
    max_upload_mb: int = 2048
    max_active_per_user: int = 16  # a user's unfinished jobs (each may store a 2 GB upload): more are a 429
    max_frames: int = 216_000  # frames a job's video may show: the work a small upload can ask for is bounded
    chunk_timeout_s: float = 600.0  # wall time of one chunk's render
    webhook_secret: str | None = None
    s3: S3Location | None = None  # set: the files live in this bucket instead of storage_dir

    @classmethod
    def from_config(cls, jobs: JobsSection, data_dir: Path) -> JobSettings:
        """``jobs.storage_dir`` defaults to ``<server.data_dir>/jobs``; ``~`` is expanded."""
        storage = jobs.storage_dir if jobs.storage_dir is not None else Path(data_dir) / "jobs"
        s3 = None
        if jobs.storage == "s3":
            assert jobs.s3_bucket is not None  # the config refuses s3 without a bucket
            s3 = S3Location(bucket=jobs.s3_bucket, prefix=jobs.s3_prefix, endpoint_url=jobs.s3_endpoint_url,
                            region=jobs.s3_region)
        return cls(
            storage_dir=storage.expanduser(),
            chunk_seconds=jobs.chunk_seconds,
            claim_timeout_s=jobs.claim_timeout_s,
            max_attempts=jobs.max_attempts,
            max_upload_mb=jobs.max_upload_mb,
            max_active_per_user=jobs.max_active_per_user,
            max_frames=jobs.max_frames,
            chunk_timeout_s=jobs.chunk_timeout_s,
            webhook_secret=jobs.webhook_secret,
            s3=s3,
        )

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    def open_storage(self) -> JobStorage:
        """The storage these settings name; ``JobStorageError`` for an S3 endpoint that is not
        a URL (whether it answers is ``check()``'s business)."""
        if self.s3 is None:
            return LocalStorage(self.storage_dir)
        from signaling.jobs.s3 import S3Storage  # boto3 only where S3 is used

        return S3Storage(self.s3)
