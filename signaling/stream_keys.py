"""Stream keys: the secret a publisher (OBS over RTMP, or WHIP) presents, bound to a stream
configuration (source face, swap options, push destinations, recording).

Keys are shown once when created; only their SHA-256 is stored, so a leaked store does not
leak keys. The store is an SQLite database indexed by that hash (``StreamKeyStore``); source
faces are copied next to it so a key keeps working if the original photo moves. Nodes of a
cluster may share the folder (a volume): every write is one transaction, so two nodes
creating keys at the same instant both keep theirs, and a revocation made on one node is
seen by every node's ``signaling.key_revocation`` watch within a second."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from gpu.errors import SwapcastError

KEY_PREFIX = "sk_"
KEEP_PHOTO = "keep"  # in map_photos: the person stays as they are
PLAY_PREFIX = "pt_"


class StreamKeyError(SwapcastError):
    """A stream key operation was refused (unknown id, bad destination, ...)."""


class StreamKeyLimitError(StreamKeyError):
    """The owner already holds as many active keys as one user may."""


@dataclass(frozen=True)
class StreamConfig:
    """What a stream key publishes: whose face, with which options, to where."""

    name: str
    source_face: str = ""  # path of the stored source photo ("" when face_id names the face)
    swap: dict = field(default_factory=dict)  # SwapConfig overrides, validated by the app
    push: tuple[str, ...] = ()  # rtmp:// destinations
    record: str | None = None  # recording path (a file or a folder)
    face_id: str | None = None  # a face of the face library (keys made over the API)
    push_unrestricted: bool = False  # an admin made it: push.allowed_* do not apply (signaling.push_policy)
    map_photos: dict = field(default_factory=dict)  # map faces by photo (command-line keys): stored reference photo -> stored photo or "keep"
    more_source_faces: tuple[str, ...] = ()  # further stored photos of source_face's person, merged with it

    @property
    def source_photos(self) -> tuple[str, ...]:
        """Every stored photo of the source face (none when ``face_id`` names it)."""
        return (self.source_face, *self.more_source_faces) if self.source_face else ()


@dataclass(frozen=True)
class StreamKey:
    key_id: str  # public handle: shown in lists, used to revoke
    key_hash: str
    stream: StreamConfig
    created: float
    revoked: float | None = None
    owner: str = ""  # the user who made it over the API ("" = made on the command line)

    @property
    def active(self) -> bool:
        return self.revoked is None

    @property
    def play_token(self) -> str:
        """What a viewer needs to play the stream over RTMP (``rtmp://host/live/<token>``):
        128 bits derived from the key's hash, so it is as unguessable as the key, needs no
        storage of its own, and cannot be used to publish."""
        return PLAY_PREFIX + hashlib.sha256(f"swapcast-play:{self.key_hash}".encode()).hexdigest()[:32]


def hash_key(key: str) -> str:
    # surrogatepass: a key that arrived as undecodable bytes (an HTTP header, an RTMP stream
    # name) still hashes, to a key no store holds, instead of raising
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def rtmp_session_id(key: str) -> str:
    """The registry id of a stream key's live session: the same on the gateway (which only
    sees the key) and on the node, and stable across reconnects."""
    return "rtmp-" + hash_key(key)[:16]


def play_handle(play_token: str) -> str:
    """What a live session's registry record holds to find it by its play token: a one-way
    hash, so the registry (and whoever can read it) never holds a token that plays the
    stream, while a gateway that is handed the token finds the node that has it."""
    return "ph-" + hashlib.sha256(f"swapcast-play-handle:{play_token}".encode("utf-8", "surrogatepass")).hexdigest()[:24]


def check_destination(url: str) -> str:
    if not url.startswith(("rtmp://", "rtmps://")) or len(url) < 10:
        raise StreamKeyError(f"push destination {url!r}: expected rtmp://host[:port]/app/key")
    return url


_SCHEMA = """
CREATE TABLE IF NOT EXISTS stream_keys (
    key_id TEXT PRIMARY KEY,
    key_hash TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    created REAL NOT NULL,
    revoked REAL,
    stream TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS stream_keys_by_owner ON stream_keys (owner, created);
CREATE TABLE IF NOT EXISTS stream_key_pushes (
    url TEXT NOT NULL,
    key_id TEXT NOT NULL REFERENCES stream_keys (key_id) ON DELETE CASCADE,
    PRIMARY KEY (url, key_id)
);
CREATE INDEX IF NOT EXISTS stream_key_pushes_by_key ON stream_key_pushes (key_id);
"""
_COLUMNS = "key_id, key_hash, owner, created, revoked, stream"
DB_NAME = "stream-keys.db"
LEGACY_NAME = "stream-keys.json"  # the store of earlier versions, moved into the database when first opened
BUSY_TIMEOUT_S = 10.0  # the longest a read or write waits for another process's write (those take milliseconds)
_T = TypeVar("_T")


class StreamKeyStore:
    """Stream keys in ``<data_dir>/stream-keys.db`` (and copied faces in ``faces/``).

    Every lookup is by an index: the key's hash (a publish), the key id (revoke), the owner
    (their list and their quota), a push URL (the push policy's connect-time check). None
    reads the whole store, so a bogus publish costs the same at 10 keys as at 100,000. The
    synchronous methods do file I/O: the event loop calls them through ``call`` (the
    store's own two threads) or uses the coroutines ``lookup`` and ``active_among``.
    SQLite's own locking makes every write one transaction across processes, nodes sharing
    the folder included (the rollback journal, not WAL, so a volume shared between hosts
    works as far as its file locks do, as the flock of the JSON store needed too)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.path = self.data_dir / DB_NAME
        self._faces = self.data_dir / "faces"
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._opened = threading.Lock()
        self._ready = False
        self._executor: ThreadPoolExecutor | None = None

    # -- from the event loop ------------------------------------------------------------------

    async def call(self, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``function(*args, **kwargs)`` (one of this store's methods) on the store's threads."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="stream-keys")
        return await asyncio.get_running_loop().run_in_executor(self._executor, partial(function, *args, **kwargs))

    async def lookup(self, key: str) -> StreamKey | None:
        """The record of a presented key, active or revoked (None: no such key)."""
        return await self.call(self.record_of_hash, hash_key(key))

    async def active_among(self, key_hashes: Iterable[str]) -> set[str]:
        """Which of these key hashes belong to active keys (a live stream's key revoked since
        is not among them)."""
        wanted = list(dict.fromkeys(key_hashes))
        return await self.call(self._active_among, wanted) if wanted else set()

    def close(self) -> None:
        """Let go of the threads and database connections (a node's cleanup)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        with self._opened:
            for connection in self._connections:
                with contextlib.suppress(sqlite3.Error):
                    connection.close()
            self._connections.clear()
            self._local = threading.local()

    # -- synchronous (threads, the command line) ------------------------------------------------

    def prepare(self) -> None:
        """Create the database, or move an earlier version's JSON store into it; the first
        use does it anyway, a node does it at start so no request waits for it."""
        self._db()

    def add(self, name: str, source_face: str | Path | None = None, *, face_id: str | None = None,
            swap: dict | None = None, push: tuple[str, ...] = (), record: str | None = None,
            owner: str = "", push_unrestricted: bool = False,
            max_per_owner: int | None = None, map_photos: dict[str, str] | None = None,
            more_source_faces: Iterable[str | Path] = ()) -> tuple[str, StreamKey]:
        """Create a key for a photo (copied into the store; ``more_source_faces``: more
        photos of the same person, copied too) or a face library id; returns
        (the secret key, shown only now, and its record). ``map_photos`` maps faces by photo
        (reference photo -> photo to wear, or "keep"): the photos are copied into the store
        too. With ``max_per_owner`` the owner
        keeps at most that many records: their oldest revoked ones make room, and with
        none revoked it is a ``StreamKeyLimitError``."""
        if (source_face is None) == (face_id is None):
            raise StreamKeyError("a stream key needs either a source photo or a face id")
        for url in push:
            check_destination(url)
        source = Path(source_face) if source_face is not None else None
        more = [Path(photo) for photo in more_source_faces]
        if more and source is None:
            raise StreamKeyError("more source photos need a first one (source_face)")
        for photo in [source, *more] if source is not None else []:
            if not photo.is_file():
                raise StreamKeyError(f"source face {photo}: no such file")
        for photo in [p for pair in (map_photos or {}).items() for p in pair if p != KEEP_PHOTO]:
            if not Path(photo).is_file():
                raise StreamKeyError(f"map photo {photo}: no such file")
        key = KEY_PREFIX + secrets.token_urlsafe(24)
        with self._transaction() as db:
            if owner and max_per_owner is not None:
                _make_room_for_one_more(db, owner, max_per_owner)
            key_id = _fresh_key_id(db)
            stored_face = ""
            if source is not None:
                stored_face = self._copy(source, key_id)
            stored_more = tuple(self._copy(photo, f"{key_id}-photo{n}") for n, photo in enumerate(more, 2))
            stored_map = {self._copy(Path(ref), f"{key_id}-ref{n}-{_stem(ref)}"):
                          KEEP_PHOTO if wears == KEEP_PHOTO else self._copy(Path(wears), f"{key_id}-wears{n}-{_stem(wears)}")
                          for n, (ref, wears) in enumerate((map_photos or {}).items())}
            made = StreamKey(
                key_id=key_id,
                key_hash=hash_key(key),
                stream=StreamConfig(name=name, source_face=stored_face, swap=dict(swap or {}), push=tuple(push),
                                    record=record, face_id=face_id, push_unrestricted=push_unrestricted,
                                    map_photos=stored_map, more_source_faces=stored_more),
                created=time.time(),
                owner=owner,
            )
            _insert(db, made)
        return key, made

    def import_records(self, records: Iterable[StreamKey]) -> None:
        """Store whole records at once, in one transaction (a migration, a benchmark's
        store of 100,000 keys); a record whose key id is taken is left out."""
        with self._transaction() as db:
            _import(db, records)

    def _copy(self, photo: Path, name: str) -> str:
        """``photo`` copied into the store's faces folder as ``name``; its stored path."""
        self._faces.mkdir(parents=True, exist_ok=True)
        stored = str(self._faces / f"{name}{photo.suffix.lower()}")
        shutil.copyfile(photo, stored)
        return stored

    def list(self, owner: str | None = None) -> list[StreamKey]:
        """Every key (or one owner's), oldest first."""
        if owner is None:
            rows = self._rows(f"SELECT {_COLUMNS} FROM stream_keys ORDER BY created, key_id")
        else:
            rows = self._rows(f"SELECT {_COLUMNS} FROM stream_keys WHERE owner = ? ORDER BY created, key_id", (owner,))
        return [_record(row) for row in rows]

    def get(self, key_id: str) -> StreamKey:
        rows = self._rows(f"SELECT {_COLUMNS} FROM stream_keys WHERE key_id = ?", (key_id,))
        if not rows:
            raise StreamKeyError(f"no stream key with id {key_id!r}")
        return _record(rows[0])

    def revoke(self, key_id: str) -> StreamKey:
        with self._transaction() as db:
            db.execute("UPDATE stream_keys SET revoked = ? WHERE key_id = ? AND revoked IS NULL", (time.time(), key_id))
            row = db.execute(f"SELECT {_COLUMNS} FROM stream_keys WHERE key_id = ?", (key_id,)).fetchone()
        if row is None:
            raise StreamKeyError(f"no stream key with id {key_id!r} (see 'swapcast keys list')")
        return _record(row)

    def find(self, key: str) -> StreamKey | None:
        """The active record for a secret key, or None (unknown or revoked)."""
        record = self.record_of_hash(hash_key(key))
        return record if record is not None and record.active else None

    def record_of_hash(self, key_hash: str) -> StreamKey | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM stream_keys WHERE key_hash = ?", (key_hash,))
        return _record(rows[0]) if rows else None

    def pushing_to(self, url: str) -> list[StreamKey]:
        """The active keys that push to ``url``."""
        rows = self._rows(f"SELECT {', '.join('k.' + c for c in _COLUMNS.split(', '))} FROM stream_key_pushes AS p "
                          "JOIN stream_keys AS k ON k.key_id = p.key_id WHERE p.url = ? AND k.revoked IS NULL", (url,))
        return [_record(row) for row in rows]

    def _active_among(self, key_hashes: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(key_hashes), 500):  # SQLite's bound on parameters per statement
            part = key_hashes[start:start + 500]
            rows = self._rows(
                f"SELECT key_hash FROM stream_keys WHERE revoked IS NULL AND key_hash IN ({', '.join('?' * len(part))})",
                part)
            found.update(row[0] for row in rows)
        return found

    # -- the database ---------------------------------------------------------------------------

    def _rows(self, sql: str, parameters: Iterable[object] = ()) -> list[tuple]:
        try:
            return self._db().execute(sql, tuple(parameters)).fetchall()
        except sqlite3.Error as exc:
            raise StreamKeyError(f"stream key store {self.path} cannot be read ({exc})") from None

    def _db(self) -> sqlite3.Connection:
        """This thread's connection (SQLite connections are not shared between threads)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            return connection
        with self._opened:
            if not self._ready:
                self._create()
            connection = self._connect()
            self._connections.append(connection)
        self._local.connection = connection
        return connection

    def _connect(self) -> sqlite3.Connection:
        try:
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                         check_same_thread=False)
            connection.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error as exc:
            raise StreamKeyError(f"stream key store {self.path} cannot be opened ({exc})") from None
        return connection

    def _create(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        db = self._connect()
        try:
            db.executescript(_SCHEMA)
            if created:
                os.chmod(self.path, 0o600)
            self._migrate(db)
        except sqlite3.Error as exc:
            raise StreamKeyError(f"stream key store {self.path} is unusable ({exc})") from None
        finally:
            db.close()
        self._ready = True

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Move the JSON store of earlier versions into the database, in one transaction;
        the file stays beside it as ``stream-keys.json.migrated``. Several processes
        starting at once each import it; the key ids make the second import a no-op."""
        legacy = self.data_dir / LEGACY_NAME
        if not legacy.exists():
            return
        try:
            rows = json.loads(legacy.read_text(encoding="utf-8"))
            records = [_legacy_record(row) for row in rows]
        except FileNotFoundError:  # another process moved it just now
            return
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise StreamKeyError(f"stream key store {legacy} is unreadable ({exc}); "
                                 f"it was not moved into {self.path.name}") from None
        db.execute("BEGIN IMMEDIATE")
        try:
            _import(db, records)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        with contextlib.suppress(FileNotFoundError):
            legacy.replace(legacy.with_name(LEGACY_NAME + ".migrated"))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (``IMMEDIATE``): a read-then-write of another
        process cannot slip between our read and our write."""
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StreamKeyError(f"stream key store {self.path} is busy or unwritable ({exc})") from None
        try:
            yield db
            db.execute("COMMIT")
        except BaseException as exc:
            db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StreamKeyError(f"stream key store {self.path}: the change failed ({exc})") from None
            raise


def _insert(db: sqlite3.Connection, made: StreamKey) -> None:
    stream = asdict(made.stream)
    db.execute(f"INSERT INTO stream_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
               (made.key_id, made.key_hash, made.owner, made.created, made.revoked, json.dumps(stream)))
    db.executemany("INSERT OR IGNORE INTO stream_key_pushes (url, key_id) VALUES (?, ?)",
                   [(url, made.key_id) for url in made.stream.push])


def _import(db: sqlite3.Connection, records: Iterable[StreamKey]) -> None:
    for made in records:
        if db.execute("SELECT 1 FROM stream_keys WHERE key_id = ?", (made.key_id,)).fetchone() is None:
            _insert(db, made)


def _record(row: tuple) -> StreamKey:
    key_id, key_hash, owner, created, revoked, stream = row
    config = json.loads(stream)
    return StreamKey(key_id=key_id, key_hash=key_hash, owner=owner, created=created, revoked=revoked,
                     stream=_stream_config(config))


def _legacy_record(row: dict) -> StreamKey:
    return StreamKey(**{**row, "stream": _stream_config(row["stream"])})


def _stream_config(stored: dict) -> StreamConfig:
    """A stored configuration (JSON: lists where the record has tuples)."""
    return StreamConfig(**{**stored, "push": tuple(stored.get("push", ())),
                           "more_source_faces": tuple(stored.get("more_source_faces", ()))})


def _stem(photo: str | Path) -> str:
    """A photo's name, safe in a file name (what a key's map lists it as)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", Path(photo).stem)[:40] or "photo"


def _fresh_key_id(db: sqlite3.Connection) -> str:
    """A key id no record holds: a node keeps one live stream per key id (and the key's
    copied face is named by it), so two users' keys sharing an id would put the second
    one's publisher into the first one's stream."""
    while db.execute("SELECT 1 FROM stream_keys WHERE key_id = ?", (key_id := secrets.token_hex(4),)).fetchone():
        pass
    return key_id


def _make_room_for_one_more(db: sqlite3.Connection, owner: str, limit: int) -> None:
    """Delete as many of ``owner``'s oldest revoked keys as it takes to add one."""
    held = db.execute("SELECT COUNT(*) FROM stream_keys WHERE owner = ?", (owner,)).fetchone()[0]
    excess = held + 1 - limit
    if excess <= 0:
        return
    revoked = [row[0] for row in db.execute(
        "SELECT key_id FROM stream_keys WHERE owner = ? AND revoked IS NOT NULL ORDER BY revoked LIMIT ?",
        (owner, excess))]
    if len(revoked) < excess:
        raise StreamKeyLimitError(f"you already hold {limit} stream keys, the most one user may; revoke one first")
    db.executemany("DELETE FROM stream_keys WHERE key_id = ?", [(key_id,) for key_id in revoked])
