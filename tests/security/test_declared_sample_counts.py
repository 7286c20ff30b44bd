"""An MP4 whose tables declare millions of samples it does not hold: libavformat indexes every
declared sample when the file is opened, before anything of ours reads a packet (a 5 KB .mp4
declaring 20,000,000 one-byte samples in one chunk grew the opening process by 0.7 GB, 80,000,000
by 2.8 GB; a fragment's ``trun`` the same; an edit list indexes them once per edit, 100,000
samples and 400 edits took 0.9 GB). The tables are read first: an offline job fails
saying why, the verifier answers 413 with the reason, and a real file of both layouts still
passes."""

from __future__ import annotations

import fractions
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.jobs.split import split_video
from streamer.media.errors import VideoError
from streamer.media.sample_tables import MAX_INDEXED_SAMPLES
from verifier_client import post_to_verifier

REPO = Path(__file__).resolve().parents[2]
_CONTAINERS = {b"moov", b"trak", b"mdia", b"minf", b"stbl", b"moof", b"traf"}


def _write_mp4(path: Path, *, fragmented: bool) -> None:
    """A real 64x64 H.264 .mp4 of 10 frames: one ``moov`` with the tables, or fragments."""
    options = {"movflags": "frag_keyframe+empty_moov"} if fragmented else {}
    rng = np.random.default_rng(0)
    with av.open(str(path), "w", format="mp4", options=options) as output:
        stream = output.add_stream("libx264", rate=25, options={"preset": "ultrafast"})
        stream.width = stream.height = 64
        stream.pix_fmt = "yuv420p"
        for index in range(10):
            frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (64, 64, 3), np.uint8), format="rgb24")
            frame.pts, frame.time_base = index, fractions.Fraction(1, 25)
            output.mux(stream.encode(frame))
        output.mux(stream.encode(None))


def _boxes(data: bytes, start: int, end: int):
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        yield kind, pos
        if kind in _CONTAINERS:
            yield from _boxes(data, pos + 8, pos + size)
        pos += size


def _declare_samples(path: Path, samples: int) -> None:
    """The file's video track declares ``samples`` samples: its ``stsz`` as that many of one
    byte (a constant size needs no table) all in the first chunk (``stsc``), or its first
    ``trun`` as that many with no per-sample fields (the defaults apply)."""
    data = bytearray(path.read_bytes())
    for kind, pos in _boxes(bytes(data), 0, len(data)):
        if kind == b"stsz":
            struct.pack_into(">II", data, pos + 12, 1, samples)
        elif kind == b"stsc":
            struct.pack_into(">I", data, pos + 20, samples)
        elif kind == b"trun":
            flags = struct.unpack(">I", data[pos + 8:pos + 12])[0] & 0x000005  # data offset, first flags
            struct.pack_into(">II", data, pos + 8, flags, samples)
            break
    path.write_bytes(bytes(data))


def _with_edits(path: Path, edits: int) -> None:
    """The video track gets an edit list of ``edits`` edits, each spanning the whole track (the
    ``moov`` is rebuilt: it follows the ``mdat``, so no chunk offset moves)."""

    def children(body: bytes) -> list[tuple[bytes, bytes]]:
        found, pos = [], 0
        while pos + 8 <= len(body):
            size, kind = struct.unpack(">I4s", body[pos:pos + 8])
            found.append((kind, body[pos + 8:pos + size]))
            pos += size
        return found

    def box(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I4s", 8 + len(body), kind) + body

    elst = box(b"elst", b"\0\0\0\0" + struct.pack(">I", edits) + struct.pack(">IiHH", 10**7, 0, 1, 0) * edits)
    top = children(path.read_bytes())
    assert [kind for kind, _ in top][-1] == b"moov"
    moov = b""
    for kind, body in children(top[-1][1]):
        if kind == b"trak":
            inner = [(k, b) for k, b in children(body) if k != b"edts"]
            body = b"".join(box(k, b) for k, b in inner[:1]) + box(b"edts", elst) + b"".join(box(k, b) for k, b in inner[1:])
        moov += box(kind, body)
    path.write_bytes(b"".join(box(kind, body) for kind, body in top[:-1]) + box(b"moov", moov))


def _crafted(tmp_path: Path, layout: str, samples: int) -> Path:
    path = tmp_path / f"{layout}-{samples}.mp4"
    _write_mp4(path, fragmented=layout == "fragments")
    if samples:
        _declare_samples(path, samples)
    return path


@pytest.mark.parametrize("layout", ["moov", "fragments"])
def test_a_job_upload_declaring_millions_of_samples_fails_with_the_reason(tmp_path, layout):
    video = _crafted(tmp_path, layout, MAX_INDEXED_SAMPLES + 1)
    with pytest.raises(VideoError, match=rf"^upload\.mp4: the file declares {MAX_INDEXED_SAMPLES + 1:,} samples in "
                                         rf"its (track 1|fragments for track ID 1); the limit is"):
        split_video(video, tmp_path / "chunks", 2.0, label="upload.mp4")
    plain = split_video(_crafted(tmp_path, layout, 0), tmp_path / "plain-chunks", 2.0, label="plain.mp4")
    assert plain.frames == 10


def test_a_job_upload_whose_edit_list_multiplies_its_samples_fails_with_the_reason(tmp_path):
    video = _crafted(tmp_path, "moov", 100_000)
    _with_edits(video, 50)
    with pytest.raises(VideoError, match=r"^upload\.mp4: the file declares 5,000,000 samples in its track 1 "
                                         r"\(100,000 for each of its 50 edits\); the limit is"):
        split_video(video, tmp_path / "chunks", 2.0, label="upload.mp4")
    plain = _crafted(tmp_path, "moov", 0)
    _with_edits(plain, 2)
    assert split_video(plain, tmp_path / "plain-chunks", 2.0, label="plain.mp4").frames == 20  # played twice


def test_a_job_upload_with_a_compressed_movie_header_fails_with_the_reason(tmp_path):
    """A ``cmov`` (zlib) hides its tables from the walk; libavformat inflates and reads them
    (a 5 KB file hiding 20,000,000 samples took 0.7 GB): refused unread."""
    video = _crafted(tmp_path, "moov", MAX_INDEXED_SAMPLES + 1)
    data = video.read_bytes()
    at = data.rfind(b"moov") - 4
    moov = data[at:]

    def box(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I4s", 8 + len(body), kind) + body

    cmov = box(b"cmov", box(b"dcom", b"zlib") + box(b"cmvd", struct.pack(">I", len(moov)) + zlib.compress(moov)))
    video.write_bytes(data[:at] + box(b"moov", cmov))
    with pytest.raises(VideoError, match=r"^upload\.mp4: the file's movie header is compressed \(cmov"):
        split_video(video, tmp_path / "chunks", 2.0, label="upload.mp4")


@pytest.mark.parametrize("layout", ["moov", "fragments"])
def test_the_verifier_refuses_an_upload_declaring_millions_of_samples(tmp_path, layout):
    crafted, plain = _crafted(tmp_path, layout, MAX_INDEXED_SAMPLES + 1), _crafted(tmp_path, layout, 0)
    status, answer = post_to_verifier(crafted.read_bytes(), "clip.mp4", "video/mp4")
    assert status == 413 and f"declares {MAX_INDEXED_SAMPLES + 1:,} samples" in answer["error"], (status, answer)
    status, answer = post_to_verifier(plain.read_bytes(), "clip.mp4", "video/mp4")
    assert status == 200 and answer["kind"] == "video", (status, answer)


_PEAK_GROWTH = """
import resource, sys
from streamer.media.stream_guard import check_video_file
from streamer.media.sample_tables import SampleTableError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    check_video_file(sys.argv[1])
except SampleTableError:
    pass
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_checking_a_file_declaring_20_million_samples_allocates_next_to_nothing(tmp_path):
    """Measured in a fresh process: the open alone took 0.7 GB for this file before."""
    crafted = _crafted(tmp_path, "moov", 20_000_000)
    grown_mb = subprocess.run([sys.executable, "-c", _PEAK_GROWTH, str(crafted)], cwd=REPO, check=True,
                              capture_output=True, text=True, timeout=60).stdout
    assert int(grown_mb) < 100, grown_mb
