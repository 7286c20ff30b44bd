"""The provenance verifier's decode is bounded by what it costs: every decoded frame counted,
pixels and wall time too. Round 3 sent one 64x64 frame, then 20,000 static 1280x720 frames
at 90 kHz timestamps (335 KB): frames of another size than the first were skipped without
being counted, so the frame limit never ended the loop, and the 3 s media-time limit was
0.22 s away in timestamps; 45-130 s per upload, both verifier slots held by two."""

from __future__ import annotations

from pathlib import Path

import av
import pytest

from streamer.provenance import verify as verifier
from swapcast.benchmarks.fuzz.video_bombs import odd_first_frame
from swapcast.config import ProvenanceConfig

FRAMES = 1500  # of the second size (160x120): more than the budget, fewer than a slow test


@pytest.fixture(scope="module")
def odd_clip(tmp_path_factory) -> Path:
    return odd_first_frame(tmp_path_factory.mktemp("odd"), FRAMES)


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


def test_frames_of_another_size_count_and_the_decode_stops_within_its_budget(odd_clip, monkeypatch):
    counting = CountingAv()
    monkeypatch.setattr(verifier, "av", counting)
    verdict = verifier.verify(odd_clip, ProvenanceConfig().settings())
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
