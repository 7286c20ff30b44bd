"""Stream keys: the secret a publisher (OBS over RTMP, or WHIP) presents, bound to a stream
configuration (source face, swap options, push destinations, recording).

Keys are shown once when created; only their SHA-256 is stored, so a leaked store does not
leak keys. The store is one JSON file written atomically; source faces are copied next to it
so a key keeps working if the original photo moves. Nodes of a cluster may share the folder
(a volume), so every read-modify-write holds an exclusive ``flock`` on a lock file beside it:
two nodes creating keys at the same instant both keep theirs."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

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


class StreamKeyStore:
    """Stream keys persisted in ``<data_dir>/stream-keys.json`` (and faces in ``faces/``)."""

    def __init__(self, data_dir: str | Path) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.path = self.data_dir / "stream-keys.json"
        self._faces = self.data_dir / "faces"

    def add(self, name: str, source_face: str | Path | None = None, *, face_id: str | None = None,
            swap: dict | None = None, push: tuple[str, ...] = (), record: str | None = None,
            owner: str = "", push_unrestricted: bool = False,
            max_per_owner: int | None = None, map_photos: dict[str, str] | None = None) -> tuple[str, StreamKey]:
        """Create a key for a photo (copied into the store) or a face library id; returns
        (the secret key, shown only now, and its record). ``map_photos`` maps faces by photo
        (reference photo -> photo to wear, or "keep"): the photos are copied into the store
        too. With ``max_per_owner`` the owner
        keeps at most that many records: their oldest revoked ones make room, and with
        none revoked it is a ``StreamKeyLimitError`` (every publish reads the whole store)."""
        if (source_face is None) == (face_id is None):
            raise StreamKeyError("a stream key needs either a source photo or a face id")
        for url in push:
            check_destination(url)
        source = Path(source_face) if source_face is not None else None
        if source is not None and not source.is_file():
            raise StreamKeyError(f"source face {source}: no such file")
        for photo in [p for pair in (map_photos or {}).items() for p in pair if p != KEEP_PHOTO]:
            if not Path(photo).is_file():
                raise StreamKeyError(f"map photo {photo}: no such file")
        key = KEY_PREFIX + secrets.token_urlsafe(24)
        with self._locked():
            keys = self._load()
            key_id = _fresh_key_id({k.key_id for k in keys})
            if owner and max_per_owner is not None:
                keys = _room_for_one_more(keys, owner, max_per_owner)
            stored_face = ""
            if source is not None:
                stored_face = self._copy(source, key_id)
            stored_map = {self._copy(Path(ref), f"{key_id}-ref{n}-{_stem(ref)}"):
                          KEEP_PHOTO if wears == KEEP_PHOTO else self._copy(Path(wears), f"{key_id}-wears{n}-{_stem(wears)}")
                          for n, (ref, wears) in enumerate((map_photos or {}).items())}
            record = StreamKey(
                key_id=key_id,
                key_hash=hash_key(key),
                stream=StreamConfig(name=name, source_face=stored_face, swap=dict(swap or {}), push=tuple(push),
                                    record=record, face_id=face_id, push_unrestricted=push_unrestricted,
                                    map_photos=stored_map),
                created=time.time(),
                owner=owner,
            )
            keys.append(record)
            self._save(keys)
        return key, record

    def _copy(self, photo: Path, name: str) -> str:
        """``photo`` copied into the store's faces folder as ``name``; its stored path."""
        self._faces.mkdir(parents=True, exist_ok=True)
        stored = str(self._faces / f"{name}{photo.suffix.lower()}")
        shutil.copyfile(photo, stored)
        return stored

    def list(self) -> list[StreamKey]:
        return self._load()

    def get(self, key_id: str) -> StreamKey:
        for record in self._load():
            if record.key_id == key_id:
                return record
        raise StreamKeyError(f"no stream key with id {key_id!r}")

    def revoke(self, key_id: str) -> StreamKey:
        with self._locked():
            keys = self._load()
            for index, record in enumerate(keys):
                if record.key_id == key_id:
                    if record.revoked is None:
                        keys[index] = record = StreamKey(**{**asdict(record), "stream": record.stream, "revoked": time.time()})
                        self._save(keys)
                    return record
        raise StreamKeyError(f"no stream key with id {key_id!r} (see 'swapcast keys list')")

    def find(self, key: str) -> StreamKey | None:
        """The active record for a secret key, or None (unknown or revoked)."""
        wanted = hash_key(key)
        return next((r for r in self._load() if r.active and secrets.compare_digest(r.key_hash, wanted)), None)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive across processes (and hosts sharing the folder, where the file system
        supports ``flock``); readers need no lock, since the file is replaced atomically."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.data_dir / ".stream-keys.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> list[StreamKey]:
        try:
            rows = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise StreamKeyError(f"stream key store {self.path} is unreadable ({exc})") from None
        return [
            StreamKey(**{**row, "stream": StreamConfig(**{**row["stream"], "push": tuple(row["stream"]["push"])})})
            for row in rows
        ]

    def _save(self, keys: list[StreamKey]) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(prefix=".stream-keys.", dir=self.data_dir)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump([asdict(k) for k in keys], out, indent=2)
        os.chmod(temp, 0o600)
        os.replace(temp, self.path)


def _stem(photo: str | Path) -> str:
    """A photo's name, safe in a file name (what a key's map lists it as)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", Path(photo).stem)[:40] or "photo"


def _fresh_key_id(taken: set[str]) -> str:
    """A key id no record holds: a node keeps one live stream per key id (and the key's
    copied face is named by it), so two users' keys sharing an id would put the second
    one's publisher into the first one's stream."""
    while (key_id := secrets.token_hex(4)) in taken:
        pass
    return key_id


def _room_for_one_more(keys: list[StreamKey], owner: str, limit: int) -> list[StreamKey]:
    """``keys`` without as many of ``owner``'s oldest revoked keys as it takes to add one."""
    theirs = [k for k in keys if k.owner == owner]
    excess = len(theirs) + 1 - limit
    if excess <= 0:
        return keys
    revoked = sorted((k for k in theirs if not k.active), key=lambda k: k.revoked or 0.0)[:excess]
    if len(revoked) < excess:
        raise StreamKeyLimitError(f"you already hold {limit} stream keys, the most one user may; revoke one first")
    dropped = {id(k) for k in revoked}
    return [k for k in keys if id(k) not in dropped]
