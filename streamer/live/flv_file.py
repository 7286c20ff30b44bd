"""Recording a live stream to an FLV file: the tag bodies RTMP carries, framed as FLV.

FLV is written as it arrives (no index to patch at the end), so a recording cut short by a
crash is still playable up to its last tag."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path
from typing import BinaryIO

from streamer.rtmp.handler import MediaMessage

_TAG_TYPES = {"audio": 8, "video": 9, "data": 18}
_HEADER = b"FLV\x01\x05\x00\x00\x00\x09" + b"\x00\x00\x00\x00"  # audio + video, PreviousTagSize0


class FlvFileWriter:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: BinaryIO = path.open("xb")
        self._file.write(_HEADER)

    def write(self, message: MediaMessage) -> None:
        size = len(message.payload)
        timestamp = message.timestamp & 0xFFFFFFFF
        header = (
            bytes([_TAG_TYPES[message.kind]])
            + size.to_bytes(3, "big")
            + (timestamp & 0xFFFFFF).to_bytes(3, "big")
            + bytes([timestamp >> 24])
            + b"\x00\x00\x00"  # stream id
        )
        self._file.write(header + message.payload + (11 + size).to_bytes(4, "big"))

    def close(self) -> None:
        self._file.close()


MAX_NAME_CHARS = 64
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_file_stem(name: str) -> str:
    """A stream's name (chosen by its key's owner) as a file name that stays in its folder:
    letters, digits, ``.``, ``_`` and ``-`` only, no leading dot, at most ``MAX_NAME_CHARS``;
    ``stream`` when nothing is left. So ``../../etc/x`` is ``etc_x``, never a path."""
    ascii_name = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    stem = _UNSAFE.sub("_", ascii_name).strip("._-")[:MAX_NAME_CHARS].rstrip("._-")
    return stem or "stream"


def recording_path(target: str, name: str, started: str) -> Path:
    """``target`` is a .flv file (a numbered sibling when it exists) or a folder that gets
    ``<name>-<started>.flv``, ``name`` made safe (:func:`safe_file_stem`): the target comes
    from an admin, the name from any user, and the file never lands outside the folder."""
    path = Path(target).expanduser()
    if path.suffix.lower() != ".flv":
        path = path / f"{safe_file_stem(name)}-{safe_file_stem(started)}.flv"
    candidate, number = path, 1
    while candidate.exists():
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
        number += 1
    return candidate
