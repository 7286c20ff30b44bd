"""The fuzzer's HTTP hold layer (slowloris: headers sent a byte at a time, or nothing at all)
against a real aiohttp app on the guarded listener: each way is cut by the request-header
timeout, and caught as held where that bound is lifted, so the layer can tell."""

from __future__ import annotations

import asyncio
import random

import pytest
from aiohttp import web

from signaling.connection_limits import ConnectionLimits, GuardedSite, guard_app
from swapcast.benchmarks.fuzz.http_hold import HOLD_WAYS, HttpHoldLayer


class _Node:
    def __init__(self, http_port: int) -> None:
        self.http_port = http_port


def _hold(how: str, header_timeout_s: float):
    async def scenario():
        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_get("/healthz", healthz)
        guard = guard_app(app, ConnectionLimits(max_per_ip=8, header_timeout_s=header_timeout_s))
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = GuardedSite(runner, "127.0.0.1", 0, guard=guard)
        await site.start()
        try:
            rng = next(random.Random(seed) for seed in range(100) if random.Random(seed).choice(HOLD_WAYS) == how)
            return await HttpHoldLayer(_Node(site.port)).once(rng)
        finally:
            await runner.cleanup()

    return asyncio.run(scenario())


@pytest.mark.parametrize("how", HOLD_WAYS)
def test_each_way_of_holding_a_connection_is_cut(how):
    outcome = _hold(how, header_timeout_s=1.0)
    assert (outcome.layer, outcome.label, outcome.status, outcome.problem) == ("http-hold", how, "cut", None)


@pytest.mark.parametrize("how", HOLD_WAYS)
def test_without_the_bound_the_layer_reports_the_connection_held(how, monkeypatch):
    monkeypatch.setattr(HttpHoldLayer, "HOLD_S", 3.0)
    outcome = _hold(how, header_timeout_s=1000.0)
    assert outcome.status == "held" and outcome.problem.startswith(how)
