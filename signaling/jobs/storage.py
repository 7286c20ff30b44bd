"""Where job files live: the input upload, the source photo, the chunks, the rendered
chunks and the output, under keys like ``job_ab12/input.mp4`` shared by every API node and
worker.

``JobStorage`` is what the API and the workers need from it; ``LocalStorage`` is a folder
(shared by mounting it everywhere), ``S3Storage`` (``signaling.jobs.s3``) a bucket of any
S3-compatible service. Media work needs real files (FFmpeg reads and writes paths), so a
file is written into a local ``scratch()`` folder and then ``put_file``'d into the storage,
and read through ``fetch``: the stored file itself in a local folder, a download into the
scratch folder from S3. Nothing holds a whole video in memory.

The methods block (file system or network): async code runs them in a thread.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Protocol

OUTSIDE = "must be relative to the job storage and stay inside it"
CANNOT_BE_A_FILE = "cannot be used as a file in the job storage"


class JobStorageError(Exception):
    """The storage cannot be used (a missing bucket, an unreachable endpoint, refused
    credentials, a folder that cannot be written). Not a ``SwapcastError``: it is an outage,
    not bad input, so a worker retries the task instead of failing the job at once."""


class Readable(Protocol):
    """A stored file opened for streaming: a local file, or an S3 response body."""

    def read(self, size: int, /) -> bytes: ...

    def close(self) -> None: ...


class JobStorage(ABC):
    @property
    @abstractmethod
    def where(self) -> str:
        """The storage in words, for logs and errors (a folder, or ``s3://bucket/prefix``)."""

    @abstractmethod
    def check(self) -> None:
        """``JobStorageError`` with the reason unless the storage answers now: a folder can be
        written, a bucket exists and takes the credentials."""

    @abstractmethod
    def scratch(self) -> AbstractContextManager[Path]:
        """A new empty local folder to write files in before ``put_file``; removed at exit."""

    @abstractmethod
    def put_file(self, local: Path, key: str) -> None:
        """Store the file ``local`` (one in a ``scratch()`` folder) as ``key``, replacing what
        was there; the stored file is complete or absent, never partial. ``local`` is gone
        afterwards (moved into place, or uploaded)."""

    @abstractmethod
    def fetch(self, key: str, scratch: Path) -> Path:
        """A local file with ``key``'s content, to read only: the stored file itself, or a
        download into the folder ``scratch``. ``FileNotFoundError`` when there is none."""

    @abstractmethod
    def path(self, key: str) -> Path | None:
        """The stored file's own path where the storage is a local folder (so the API can
        serve it with ranges and sendfile); None for remote storage."""

    @abstractmethod
    def open(self, key: str) -> tuple[Readable, int]:
        """``key`` opened for streaming, and its size in bytes; ``FileNotFoundError``."""

    @abstractmethod
    def read_head(self, key: str, size: int) -> bytes:
        """The first ``size`` bytes of ``key`` (fewer when it is shorter); ``FileNotFoundError``."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; nothing happens when it is already gone."""

    @abstractmethod
    def delete_folder(self, folder: str) -> None:
        """Remove every key under ``folder/`` (e.g. a job, its rendered chunks)."""

    @abstractmethod
    def key_of(self, path: str) -> str:
        """The key a user names with ``path`` (a submission's ``path`` field); ``ValueError``
        saying why (``OUTSIDE``, ``CANNOT_BE_A_FILE``) when it cannot name one."""


class LocalStorage(JobStorage):
    """A folder, shared by every API node and worker (e.g. an NFS mount): today's layout.
    Scratch folders are made inside it, so ``put_file`` is a rename on the same file system."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def where(self) -> str:
        return str(self.root)

    def check(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root):
                pass
        except OSError as exc:
            raise JobStorageError(f"job storage folder {self.root} cannot be written ({exc.strerror or exc})") from None

    @contextmanager
    def scratch(self) -> Iterator[Path]:
        self.root.mkdir(parents=True, exist_ok=True)
        folder = Path(tempfile.mkdtemp(prefix=".scratch-", dir=self.root))
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def put_file(self, local: Path, key: str) -> None:
        target = self.root / key
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(local, target)

    def fetch(self, key: str, scratch: Path) -> Path:
        path = self.root / key
        if not path.is_file():
            raise FileNotFoundError(f"{key}: not in the job storage")
        return path

    def path(self, key: str) -> Path:
        return self.root / key

    def open(self, key: str) -> tuple[Readable, int]:
        handle = (self.root / key).open("rb")
        return handle, os.fstat(handle.fileno()).st_size

    def read_head(self, key: str, size: int) -> bytes:
        with (self.root / key).open("rb") as handle:
            return handle.read(size)

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)

    def delete_folder(self, folder: str) -> None:
        shutil.rmtree(self.root / folder, ignore_errors=True)

    def key_of(self, path: str) -> str:
        """Symbolic links are followed: a link out of the folder leaves it too."""
        root = self.root.resolve()
        try:
            resolved = (root / path).resolve()
        except (OSError, ValueError):  # a NUL byte, a name too long
            raise ValueError(CANNOT_BE_A_FILE) from None
        if Path(path).is_absolute() or not resolved.is_relative_to(root):
            raise ValueError(OUTSIDE)
        return resolved.relative_to(root).as_posix()
