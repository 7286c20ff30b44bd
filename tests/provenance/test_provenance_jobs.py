"""Offline jobs: a rendered chunk carries the job's mark (every chunk of a job the same
payload, so the joined output does too), and the joined output gets signed credentials."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamer.jobs.render import Encoding, render_chunk
from streamer.provenance.credentials import ContentCredentials
from streamer.provenance.marker import ProvenanceSettings
from streamer.provenance.payload import stream_hash
from streamer.provenance.verify import verify
from streamer.samples import grace_hopper, moving_face_frames
from swapcast.config import SwapConfig
from provenance_kit import h264

pytestmark = pytest.mark.slow


def test_a_rendered_chunk_carries_the_jobs_mark_and_the_output_is_signed(engine, astronaut_image, tmp_path, test_ca):
    settings = replace(ProvenanceSettings(key=b"jobs test key", issuer=9), c2pa_cert=test_ca.cert_chain,
                       c2pa_key=test_ca.key, c2pa_trust_anchors=test_ca.anchors)
    chunk, output = tmp_path / "chunk.mp4", tmp_path / "rendered.mp4"
    h264(moving_face_frames(grace_hopper(), 20, (640, 480)), 2000, chunk)
    source = engine.register_source(astronaut_image, None, label="source")
    render_chunk(engine, source, SwapConfig().options(), chunk, output, expected_frames=20, encoding=Encoding(),
                 stopped=lambda: False, label="the chunk", session_id="job-1-0", marker=settings.marker("job-1"))
    assert ContentCredentials(settings).sign(output, stream_id="job-1")
    verdict = verify(output, settings)
    assert verdict.detection.found and verdict.payload.stream == stream_hash("job-1") and verdict.payload.issuer == 9
    assert verdict.manifest.state == "Trusted" and verdict.exit_code == 0
