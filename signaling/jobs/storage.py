"""Where job files live: the input upload, the source photo, the chunks, the rendered
chunks and the output, under keys like ``job_ab12/input.mp4`` shared by every API node and
worker.

``JobStorage`` is what the API and the workers need from it; ``LocalStorage`` is a folder
(shared by mounting it everywhere), ``S3Storage`` (``signaling.jobs.s3``) a bucket of any
S3-compatible service. Media work needs real files (FFmpeg reads and writes paths), so a
file is written into a local ``scratch()`` folder and then ``put_file``'d into the storage,
and read through ``fetch``: the stored file itself in a local folder, a download into the
scratch folder from S3. Nothing holds a whole video in memory.

Scratch folders live under one root per storage (``ScratchFolders``), each marked with the
host and process that made it, so the folders a killed process leaves behind (its cleanup
never ran) are found and removed by ``sweep_scratch`` in a later process.

The methods block (file system or network): async code runs them in a thread.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import stat
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, Protocol

OUTSIDE = "must be relative to the job storage and stay inside it"
CANNOT_BE_A_FILE = "cannot be used as a file in the job storage"
SCRATCH_MARKER = ".owner"  # in each scratch folder: JSON {"host": ..., "pid": ...} of its process
FOREIGN_SCRATCH_FACTOR = 10  # another host's scratch folder goes once untouched this many claim timeouts
log = logging.getLogger(__name__)


class JobStorageError(Exception):
    """The storage cannot be used (a missing bucket, an unreachable endpoint, refused
    credentials, a folder that cannot be written). Not a ``SwapcastError``: it is an outage,
    not bad input, so a worker retries the task instead of failing the job at once."""


class Readable(Protocol):
    """A stored file opened for streaming: a local file, or an S3 response body."""

    def read(self, size: int, /) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class StoredFile:
    """What the API's download needs to know of a stored file before sending any of it."""

    size: int
    modified: datetime
    etag: str  # quoted, as in the ETag header


@dataclass(frozen=True)
class Swept:
    """The scratch folders a sweep removed."""

    folders: int = 0
    bytes: int = 0


@dataclass(frozen=True)
class _Owner:
    host: str
    pid: int


class ScratchFolders:
    """Scratch folders under one ``root``: ``<host>-<pid>-<random>/``, each with a marker
    (``SCRATCH_MARKER``) naming the host and process that made it. A process killed outright
    never removes its folders; ``sweep`` removes them later from any process."""

    def __init__(self, root: Path) -> None:
        self.root = root

    @contextmanager
    def new(self) -> Iterator[Path]:
        """A new folder of this process; removed at exit."""
        self.root.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        name = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname())  # for people: the marker is what counts
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-{pid}-", dir=self.root))
        try:
            (folder / SCRATCH_MARKER).write_text(json.dumps({"host": _host(), "pid": pid}))
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def sweep(self, dead_after_s: float, foreign_after_s: float) -> Swept:
        """Remove the folders whose process is gone. One of this host whose process no longer
        runs goes once untouched for ``dead_after_s`` (a guard against a marker misread, or a
        host name shared by machines); one of another host (a shared folder) cannot be
        asked, so it goes only once untouched for ``foreign_after_s``: a live process writes
        in its folder all along (downloads, renders, uploads). A reused pid keeps a folder
        longer, never removes a live one."""
        host, now = _host(), time.time()
        folders = bytes_ = 0
        for folder in self._folders():
            try:
                touched, size = _usage(folder)
            except OSError:  # removed meanwhile (by its process, or another sweep)
                continue
            owner = _owner(folder)
            if owner is not None and owner.host == host:
                stale = not _running(owner.pid) and now - touched > dead_after_s
            else:
                stale = now - touched > foreign_after_s
            if stale:
                shutil.rmtree(folder, ignore_errors=True)
                if not folder.exists():
                    folders, bytes_ = folders + 1, bytes_ + size
        return Swept(folders, bytes_)

    def _folders(self) -> list[Path]:
        try:
            with os.scandir(self.root) as entries:
                return [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:  # no root yet (nothing to sweep), or one that cannot be read
            return []


def _host() -> str:
    """This host as scratch markers name it: its name, and on Linux its pid namespace, so
    containers sharing a host name (and a folder) never judge each other's pids."""
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()} {namespace}"


def _owner(folder: Path) -> _Owner | None:
    """The folder's marker; None when it is missing (the folder is just being made) or unreadable."""
    try:
        marker = json.loads((folder / SCRATCH_MARKER).read_text())
        owner = _Owner(host=marker["host"], pid=marker["pid"])
    except (OSError, ValueError, TypeError, KeyError):
        return None
    # kill() takes a C int, and 0 or a negative pid names a process group
    valid = isinstance(owner.host, str) and isinstance(owner.pid, int) and 0 < owner.pid < 2**31
    return owner if valid else None


def _running(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (a pid reused since counts: kept longer)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _usage(folder: Path) -> tuple[float, int]:
    """When anything in ``folder`` last changed, and the bytes of its files."""
    newest, size = folder.lstat().st_mtime, 0
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                info = os.lstat(os.path.join(parent, name))
            except OSError:  # removed meanwhile
                continue
            newest = max(newest, info.st_mtime)
            size += info.st_size if stat.S_ISREG(info.st_mode) else 0
    return newest, size


class JobStorage(ABC):
    @property
    @abstractmethod
    def where(self) -> str:
        """The storage in words, for logs and errors (a folder, or ``s3://bucket/prefix``)."""

    @property
    @abstractmethod
    def scratch_folders(self) -> ScratchFolders:
        """Where ``scratch()`` makes its folders: local disk, close to where files are stored."""

    @abstractmethod
    def check(self) -> None:
        """``JobStorageError`` with the reason unless the storage answers now: a folder can be
        written, a bucket exists and takes the credentials."""

    def scratch(self) -> AbstractContextManager[Path]:
        """A new empty local folder to write files in before ``put_file``; removed at exit
        (or by a later ``sweep_scratch`` when this process is killed)."""
        return self.scratch_folders.new()

    def sweep_scratch(self, claim_timeout_s: float) -> Swept:
        """Remove the scratch folders of processes that are gone (see ``ScratchFolders.sweep``),
        and log what went."""
        swept = self.scratch_folders.sweep(claim_timeout_s, FOREIGN_SCRATCH_FACTOR * claim_timeout_s)
        if swept.folders:
            log.info("removed %d scratch folder(s) of stopped processes from %s (%.1f MB)",
                     swept.folders, self.scratch_folders.root, swept.bytes / 1e6)
        return swept

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
    def stat(self, key: str) -> StoredFile:
        """``key``'s size, modification time and ETag; ``FileNotFoundError``."""

    @abstractmethod
    def open(self, key: str, start: int = 0, stop: int | None = None) -> tuple[Readable, int]:
        """``key``'s bytes ``start`` to ``stop`` (excluded; None: to the end) opened for
        streaming, and how many there are; ``FileNotFoundError``. Only that part is read
        (a ranged download serves a seek without reading what comes before)."""

    def read_head(self, key: str, size: int) -> bytes:
        """The first ``size`` bytes of ``key`` (fewer when it is shorter); ``FileNotFoundError``."""
        body, _ = self.open(key, 0, size)
        try:
            return body.read(size)
        finally:
            body.close()

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
        self._scratch = ScratchFolders(root / ".scratch")

    @property
    def where(self) -> str:
        return str(self.root)

    @property
    def scratch_folders(self) -> ScratchFolders:
        return self._scratch

    def check(self) -> None:
        """Also makes the scratch root, so the folder's listing does not change at the first upload."""
        try:
            self._scratch.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root):
                pass
        except OSError as exc:
            raise JobStorageError(f"job storage folder {self.root} cannot be written ({exc.strerror or exc})") from None

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

    def stat(self, key: str) -> StoredFile:
        """The ETag is aiohttp's ``FileResponse``'s for the same file."""
        info = (self.root / key).stat()
        return StoredFile(size=info.st_size, modified=datetime.fromtimestamp(info.st_mtime, UTC),
                          etag=f'"{info.st_mtime_ns:x}-{info.st_size:x}"')

    def open(self, key: str, start: int = 0, stop: int | None = None) -> tuple[Readable, int]:
        handle = (self.root / key).open("rb")
        size = os.fstat(handle.fileno()).st_size
        count = max(0, min(size if stop is None else stop, size) - start)
        handle.seek(start)
        return _Window(handle, count), count

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


class _Window:
    """``count`` bytes of a file from where it stands: a ranged local read."""

    def __init__(self, handle: BinaryIO, count: int) -> None:
        self.handle, self.left = handle, count

    def read(self, size: int = -1, /) -> bytes:
        data = self.handle.read(self.left if size < 0 else min(size, self.left))
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.handle.close()
