"""The fuzzer's round-3 surfaces against a node in this process: signed thumbnail links with
hostile ``expires`` (Unicode digits, signs, underscores, 5,000 digits), stream keys with push
lists past the quota or spelled into the node's network, options written as lax scalars
("off", "１"), Range headers in foreign digits, and events sockets opened with tokens that
expire, expired, or were forged. No case may get a 5xx, hang, or leave an error in the log;
an events socket must close when its token expires."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from aiohttp.test_utils import TestServer

from swapcast.app import build_app
from swapcast.benchmarks.fuzz.api import ApiLayer
from swapcast.benchmarks.fuzz.events import EventsLayer
from swapcast.benchmarks.fuzz.fixtures import Fixtures
from swapcast.benchmarks.fuzz.node import SECRET, token
from swapcast.benchmarks.fuzz.sdp import make_offers
from swapcast.config import load_config
from swapcast.logs import ClientFaultFilter

pytestmark = pytest.mark.slow
OPERATIONS = {"faceThumbnail", "createKey", "listKeys", "revokeKey", "createSession", "updateSession",
              "listSessions", "jobOutput", "listJobs"}
CASES = 400


class _Node:
    def __init__(self, port: int) -> None:
        self.http_port = port


def test_round_three_surfaces_take_hostile_input_without_a_5xx(engine, tmp_path, caplog):
    config = load_config(environ={}, overrides={
        "server": {"data_dir": str(tmp_path / "data"), "max_connections_per_ip": 10_000},
        "rtmp": {"port": 0}, "webrtc": {"host_addresses": ["127.0.0.1"]},
        "auth": {"jwt_secret": SECRET, "requests_per_minute_per_ip": 10**7, "requests_per_minute_per_token": 10**7},
    })

    async def scenario():
        offers = await make_offers()
        async with TestServer(build_app(config, engine=engine), host="127.0.0.1") as server:
            node = _Node(server.port)
            fixtures = Fixtures(alice=token("alice"), bob=token("bob"), admin=token("ops", "admin"),
                                face_id="astronaut", stream_key="sk_none", spare_key="sk_none", spare_key_id="none",
                                face_jpeg=b"", play_token="", attacker_key="", well_behaved_key="")
            api = ApiLayer(node, fixtures, offers["browser"])
            api.routes = [route for route in api.routes if route.operation in OPERATIONS]
            assert {route.operation for route in api.routes} >= {"faceThumbnail", "createKey", "updateSession"}
            rng = random.Random(20261204)
            outcomes = [await api.once(rng) for _ in range(CASES)]
            events = EventsLayer(node)
            outcomes += await asyncio.gather(*(events.once(random.Random(seed)) for seed in range(12)))
            return outcomes

    quiet = ClientFaultFilter()  # as `swapcast serve` logs requests aiohttp cannot parse: INFO, no traceback
    logging.getLogger("aiohttp.server").addFilter(quiet)
    try:
        with caplog.at_level(logging.WARNING):
            outcomes = asyncio.run(asyncio.wait_for(scenario(), 240))
    finally:
        logging.getLogger("aiohttp.server").removeFilter(quiet)
    problems = [(o.layer, o.label, o.status, o.problem) for o in outcomes if o.problem]
    assert problems == []
    assert {o.label for o in outcomes if o.layer == "events"} >= {"expiring", "hostile"}
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
