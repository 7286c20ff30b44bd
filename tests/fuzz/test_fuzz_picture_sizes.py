"""The oversize layer's SPS way against a real ``swapcast serve``: ffmpeg's camera recording
with its sequence header's SPS declaring 16000x16000 pictures, beside the well-behaved
publisher. The node reads the SPS before its decoder does: the attacker is refused with the
size named on the wire, the node's RSS stays within the layer's bound, the publisher beside
it goes on. (The layer's other ways run against a bare RTMP server in test_fuzz_oversize.py:
this one needs the node's decoder.)"""

from __future__ import annotations

import asyncio

import pytest

from swapcast.benchmarks.fuzz.fixtures import set_up
from swapcast.benchmarks.fuzz.node import FuzzNode
from swapcast.benchmarks.fuzz.oversize import RSS_BOUND_MB, Attack, RtmpOversizeLayer
from swapcast.benchmarks.fuzz.rtmp import record

pytestmark = pytest.mark.slow


def test_a_sequence_header_declaring_16000x16000_is_refused_by_a_live_node_and_the_publisher_beside_goes_on(tmp_path):
    node = FuzzNode(tmp_path, with_redis=False).start()
    try:
        async def scenario():
            fixtures = await set_up(node)
            camera = await record("camera")
            assert camera is not None, "ffmpeg could not record a publish"
            return await RtmpOversizeLayer(node, fixtures, camera).run(Attack("sps"))

        outcome = asyncio.run(asyncio.wait_for(scenario(), 90))
        log = node.log_path.read_text()
    finally:
        node.stop()
    assert (outcome.label, outcome.status, outcome.problem) == ("sps", "refused", None), outcome
    assert "NetStream.Publish.Failed: the stream's H.264 SPS declares 16000x16000 pictures" in outcome.detail
    assert "the well-behaved publisher went on" in outcome.detail
    assert float(outcome.detail.split("RSS +")[1].split(" MB")[0]) <= RSS_BOUND_MB
    assert "Traceback" not in log
