"""The number of samples an MP4/MOV file's tables declare, read before FFmpeg opens it.

libavformat's mov demuxer builds an index entry (24 bytes, more while building) for every
sample a track's ``stsz`` declares, when the file is opened, before any check of ours can
run: a 5 KB .mp4 whose video track declares 80,000,000 samples of one byte each (``stsz``
with a constant size needs no table) in a single chunk (``stsc``) grew the opening process
by 2.8 GB (20,000,000: 0.7 GB); a fragment's ``trun`` declaring 80,000,000 samples without
per-sample fields (the defaults then apply) the same. An edit list indexes the samples once
per edit that spans them: 100,000 samples and 400 edits each spanning the track (a 7.5 KB
file) grew it by 0.9 GB. So the box tree is walked here first, by seeking, reading only the
few header bytes of ``hdlr``, ``stts``, ``stsz``/``stz2``, ``elst``, ``tfhd`` and ``trun``;
a compressed header (``cmov``), which would hide them, is refused."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path
from typing import BinaryIO

from gpu.errors import SwapcastError

# ~35 bytes each while the index is built: at most ~140 MB; 18.5 hours of 60 fps video,
# 23 hours of 48 kHz AAC frames
MAX_INDEXED_SAMPLES = 4_000_000
# the boxes libavformat reads as lists of boxes (mov_read_default): a table in any of them
# counts for the last track opened, wherever it is
_CONTAINERS = frozenset({b"moov", b"trak", b"mdia", b"minf", b"stbl", b"dinf", b"edts", b"mvex", b"udta",
                         b"tref", b"moof", b"traf", b"sinf", b"schi", b"wave"})
_MEDIA_HANDLERS = {b"vide": False, b"soun": True, b"m1a ": True, b"subp": False, b"clcp": False}
_MAX_DEPTH = 16


class SampleTableError(SwapcastError):
    """A track declares more samples than the node lets the demuxer index."""

    status = 413


class CompressedHeaderError(SampleTableError):
    """A compressed movie header (``cmov``, legacy QuickTime): libavformat inflates it (up to
    2 GB) and reads the tables inside, which the walk here does not see (a 5 KB file hiding
    20,000,000 samples in one took 0.7 GB), so it is not read at all."""

    status = 422


class _Track:
    """What one ``trak`` declares, as libavformat keeps it: the kind of its last media
    handler, whether its ``stts`` is one entry of duration 1, its largest sample count and
    edit count."""

    def __init__(self) -> None:
        self.audio = False
        self.one_tick_timing = False
        self.samples = 0
        self.edits = 0

    def indexed_samples(self) -> int:
        """The index entries libavformat may build: one a sample (mov_build_index), except for
        uncompressed audio (one ``stts`` entry of duration 1), indexed by chunk; once per edit
        where an edit list is (mov_fix_index: each edit may span every sample)."""
        return 0 if self.audio and self.one_tick_timing else self.samples * max(1, self.edits)


def check_sample_tables(source: str | Path) -> None:
    """``SampleTableError`` when a track of an MP4/MOV file declares more than
    ``MAX_INDEXED_SAMPLES`` samples, ``CompressedHeaderError`` when its header is compressed;
    any other file (or one whose boxes end early) passes, left to the demuxer."""
    with open(source, "rb") as file:
        walk = _BoxWalk(file)
        walk.boxes(0, file.seek(0, 2), 0)
    declared = [(f"its track {number}" + (f" ({track.samples:,} for each of its {track.edits:,} edits)"
                                          if track.edits > 1 else ""), track.indexed_samples())
                for number, track in enumerate(walk.tracks, 1)]
    declared += [(f"its fragments for track ID {track_id}", samples) for track_id, samples in walk.fragments.items()]
    for where, samples in declared:
        if samples > MAX_INDEXED_SAMPLES:
            raise SampleTableError(
                f"the file declares {samples:,} samples in {where}; the limit is {MAX_INDEXED_SAMPLES:,} a track"
            )


class _BoxWalk:
    """The box tree read by seeking; each table is read for the last ``trak`` begun, each
    ``trun`` counted for the track its fragment's last ``tfhd`` names."""

    def __init__(self, file: BinaryIO) -> None:
        self.file = file
        self.tracks: list[_Track] = []
        self.fragments: Counter[int] = Counter()  # samples the fragments add, by track ID
        self._fragment_track: int | None = None

    def boxes(self, start: int, end: int, depth: int) -> None:
        pos = start
        while pos + 8 <= end:
            self.file.seek(pos)
            size, kind = struct.unpack(">I4s", self.file.read(8))
            header = 8
            if size == 1:
                large = self.file.read(8)
                if len(large) < 8:
                    return
                size, header = struct.unpack(">Q", large)[0], 16
            elif size == 0:
                size = end - pos
            if size < header:
                return
            box_end = min(pos + size, end)
            if kind == b"cmov":
                raise CompressedHeaderError("the file's movie header is compressed (cmov, old QuickTime), which "
                                            "the node does not read; remux it, e.g. ffmpeg -i in.mov -c copy out.mp4")
            if kind == b"trak":
                self.tracks.append(_Track())
            if depth < _MAX_DEPTH and kind in _CONTAINERS:
                self.boxes(pos + header, box_end, depth + 1)
            elif depth < _MAX_DEPTH and kind == b"meta":  # a full box (ISO) or not (QuickTime)
                self.boxes(pos + header + 4, box_end, depth + 1)
                self.boxes(pos + header, box_end, depth + 1)
            else:
                self._table(kind, pos + header, box_end)
            pos += size

    def _table(self, kind: bytes, body: int, box_end: int) -> None:
        if kind not in (b"hdlr", b"stts", b"stsz", b"stz2", b"elst", b"tfhd", b"trun"):
            return
        self.file.seek(body)
        data = self.file.read(min(16, box_end - body))
        if kind == b"tfhd" and len(data) >= 8:
            self._fragment_track = struct.unpack(">I", data[4:8])[0]
        elif kind == b"trun" and len(data) >= 8 and self._fragment_track is not None:
            self.fragments[self._fragment_track] += struct.unpack(">I", data[4:8])[0]
        if not self.tracks:
            return
        track = self.tracks[-1]
        if kind == b"hdlr" and len(data) >= 12 and data[8:12] in _MEDIA_HANDLERS:
            track.audio = _MEDIA_HANDLERS[data[8:12]]
        elif kind == b"stts" and len(data) >= 16:
            entries, _, duration = struct.unpack(">III", data[4:16])
            track.one_tick_timing = entries == 1 and duration == 1
        elif kind in (b"stsz", b"stz2") and len(data) >= 12:
            track.samples = max(track.samples, struct.unpack(">I", data[8:12])[0])
        elif kind == b"elst" and len(data) >= 8:
            track.edits = max(track.edits, struct.unpack(">I", data[4:8])[0])
