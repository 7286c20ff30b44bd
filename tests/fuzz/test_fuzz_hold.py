"""The fuzzer's hold layer (one connection trying to keep the node's resources: pings
alone, answers never read, partial messages on many chunk streams, a command that takes
seconds to decode) against a real RTMP
server: each of its three ways is cut, and each is caught as held where the bound that cuts
it is lifted, so the layer can tell."""

from __future__ import annotations

import asyncio
import random

import pytest

from streamer.rtmp import RtmpServer
from streamer.rtmp.chunk import ChunkReader
from streamer.rtmp.connection import RtmpConnection
from streamer.rtmp import messages
from swapcast.benchmarks.fuzz.rtmp import HOLD_WAYS, AcceptAll, RtmpLayers


class _Node:
    def __init__(self, rtmp_port: int) -> None:
        self.rtmp_port = rtmp_port


def _hold(how: str, setup_timeout: float):
    async def scenario():
        async with RtmpServer(AcceptAll(), port=0, setup_timeout=setup_timeout) as server:
            layers = RtmpLayers(_Node(server.port), None, [])
            rng = next(random.Random(seed) for seed in range(100) if random.Random(seed).choice(HOLD_WAYS) == how)
            return await layers.once(rng, "hold")

    return asyncio.run(scenario())


@pytest.mark.parametrize("how", HOLD_WAYS)
def test_each_way_of_holding_a_connection_is_cut(how):
    outcome = _hold(how, setup_timeout=2.0)
    assert (outcome.layer, outcome.label, outcome.status, outcome.problem) == ("rtmp-hold", how, "cut", None)


@pytest.mark.parametrize("how", HOLD_WAYS)
def test_without_the_bound_the_layer_reports_the_connection_held(how, monkeypatch):
    monkeypatch.setattr(RtmpConnection, "MAX_UNSENT_BYTES", 1 << 40)
    reader_init = ChunkReader.__init__

    def unbounded(self, **kwargs):
        reader_init(self, **kwargs)
        self.max_message_size = 0xFFFFFF  # the 24-bit length field's own bound
        self.max_partial_bytes = 1 << 40

    monkeypatch.setattr(ChunkReader, "__init__", unbounded)
    monkeypatch.setattr(RtmpLayers, "HOLD_IDLE_S", 3.0)
    monkeypatch.setattr(messages, "MAX_COMMAND_BYTES", 1 << 40)
    outcome = _hold(how, setup_timeout=1000.0)
    assert outcome.status == "held" and outcome.problem.startswith(how)
