"""The provenance verifier's decode is bounded by what it costs: every decoded frame counted,
pixels and wall time too. Round 3 sent one 64x64 frame, then 20,000 static 1280x720 frames
at 90 kHz timestamps (335 KB): frames of another size than the first were skipped without
being counted, so the frame limit never ended the loop, and the 3 s media-time limit was
0.22 s away in timestamps; 45-130 s per upload, both verifier slots held by two."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from streamer.provenance import verify as verifier
from swapcast.config import ProvenanceConfig

FRAMES = 1500  # of the second size: more than the budget, fewer than a slow test


def annex_b(width: int, height: int, frames: int) -> bytes:
    """``frames`` identical H.264 frames (a few bytes each after the first), Annex B."""
    context = av.CodecContext.create("libx264", "w")
    context.width, context.height, context.pix_fmt = width, height, "yuv420p"
    context.time_base = Fraction(1, 90000)
    context.options = {"preset": "ultrafast", "tune": "zerolatency", "bframes": "0", "keyint": "100000"}
    picture = np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)
    out = bytearray()
    for number in range(frames):
        frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
        frame.pts = number
        out += b"".join(bytes(p) for p in context.encode(frame))
    return bytes(out + b"".join(bytes(p) for p in context.encode(None)))


@pytest.fixture(scope="module")
def odd_first_frame(tmp_path_factory) -> Path:
    """One 64x64 frame, then FRAMES frames of 160x120, one 90 kHz tick apart, in an MP4."""
    raw = tmp_path_factory.mktemp("odd") / "raw.h264"
    raw.write_bytes(annex_b(64, 64, 1) + annex_b(160, 120, FRAMES))
    path = raw.with_name("odd.mp4")
    with av.open(str(raw), format="h264") as source, av.open(str(path), "w") as output:
        stream = output.add_stream_from_template(source.streams.video[0])
        stream.time_base = Fraction(1, 90000)
        for number, packet in enumerate(p for p in source.demux(source.streams.video[0]) if p.size):
            packet.stream, packet.time_base = stream, Fraction(1, 90000)
            packet.pts = packet.dts = number
            packet.duration = 1
            output.mux(packet)
    return path


class CountingAv:
    """``av`` as the verifier sees it, counting the frames its containers decode."""

    def __init__(self) -> None:
        self.decoded = 0

    def __getattr__(self, name: str):
        return getattr(av, name)

    def open(self, *args, **kwargs):
        counter, container = self, av.open(*args, **kwargs)

        class Counted:
            def __enter__(self):
                container.__enter__()
                return self

            def __exit__(self, *exc_info):
                return container.__exit__(*exc_info)

            def __getattr__(self, name: str):
                return getattr(container, name)

            def decode(self, *a, **k):
                for frame in container.decode(*a, **k):
                    counter.decoded += 1
                    yield frame

        return Counted()


def test_frames_of_another_size_count_and_the_decode_stops_within_its_budget(odd_first_frame, monkeypatch):
    counting = CountingAv()
    monkeypatch.setattr(verifier, "av", counting)
    verdict = verifier.verify(odd_first_frame, ProvenanceConfig().settings())
    assert verdict.kind == "video" and not verdict.detection.found
    assert counting.decoded <= verifier.MAX_DECODED_FRAMES + 1 < FRAMES + 1


def test_the_budget_counts_frames_pixels_and_seconds():
    from streamer.media.decode_budget import DecodeBudget, DecodeBudgetExceeded

    now = [0.0]
    by_frames = DecodeBudget(max_frames=2, max_pixels=10**9, max_seconds=60, clock=lambda: now[0])
    by_frames.charge(10, 10)
    by_frames.charge(10, 10)
    with pytest.raises(DecodeBudgetExceeded, match="2 frames"):
        by_frames.charge(10, 10)
    by_pixels = DecodeBudget(max_frames=100, max_pixels=150, max_seconds=60, clock=lambda: now[0])
    by_pixels.charge(10, 10)
    with pytest.raises(DecodeBudgetExceeded, match="150 pixels"):
        by_pixels.charge(10, 10)
    by_time = DecodeBudget(max_frames=100, max_pixels=10**9, max_seconds=5, clock=lambda: now[0])
    by_time.charge(10, 10)
    now[0] = 6.0
    with pytest.raises(DecodeBudgetExceeded, match="5 s"):
        by_time.check_time()
