"""The fuzzer's verify case: videos whose headers declare 16000x16000 (every codec and place
of ``video_bombs``) sent to ``POST /api/v1/provenance/verify`` are refused with a 413 and
the plain files read; and where the verifier's header reading is lifted the case reports
each bomb past the first packet as read, so the case can tell."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import cv2
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from streamer.provenance import verify as verifier
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.routes import add_provenance_routes
from streamer.samples import astronaut
from swapcast.benchmarks.fuzz.uploads import UploadLayer, verify_clips

pytestmark = pytest.mark.slow


@dataclass
class _Node:
    http_port: int


@dataclass
class _Fixtures:
    face_jpeg: bytes
    alice: str = "alice-token"
    bob: str = "bob-token"


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    return verify_clips(tmp_path_factory.mktemp("clips"))


def _answers(clips) -> list[tuple[str, int | str, str | None]]:
    """(label, status, problem) of each clip sent once to a bare verifier app."""

    async def scenario():
        app = web.Application()
        add_provenance_routes(app, ProvenanceSettings())
        async with TestServer(app, host="127.0.0.1") as server:
            face = cv2.imencode(".jpg", cv2.cvtColor(astronaut(), cv2.COLOR_RGB2BGR))[1].tobytes()
            layer = UploadLayer(_Node(server.port), _Fixtures(face), None, clips)
            answers = []
            for clip in clips:
                outcome = await layer.verify(clip, clip.data, "alice-token")
                answers.append((clip.label, outcome.status, outcome.problem))
            return answers

    return asyncio.run(asyncio.wait_for(scenario(), 240))


def test_every_bomb_is_refused_with_a_413_and_every_plain_file_read(clips):
    answers = _answers(clips)
    assert {label for label, _, _ in answers} >= {"hevc/in-band", "vp9/in-band", "av1/extradata", "h264/in-band"}
    for clip, (label, status, problem) in zip(clips, answers, strict=True):
        assert problem is None, (label, status, problem)
        assert status == (413 if clip.bomb else 200), (label, status)


def test_a_verifier_that_reads_no_headers_is_caught_on_each_bomb_after_the_first_packet(clips, monkeypatch):
    """Lifted: the verifier's check before decoding. The decoders' own bound still holds
    (``max_pixels``), so the bombs the open's probe does not see (in-band, a second sample
    description) fail as damaged (422) instead of allocating; the case reports each."""
    monkeypatch.setattr(verifier, "check_video_file", lambda path: None)
    later = [clip for clip in clips if clip.label.endswith(("/in-band", "/described-again"))]
    answers = _answers(later)
    assert all(problem and "not 413: it was read" in problem for _, _, problem in answers), answers
