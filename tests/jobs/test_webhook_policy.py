"""A user's webhook is checked against the push policy again when the worker sends it: the
name that resolved to a public address at submission may resolve into the operator's
network by then. Names are resolved by a fake ``getaddrinfo``, so the test needs no DNS."""

from __future__ import annotations

import asyncio
import ipaddress
import socket

import pytest
from aiohttp import web

from signaling.jobs.model import Job
from signaling.jobs.webhook import send_webhook
from signaling.push_policy import PushPolicy, StreamKeyError

HOOK_HOST = "hooks.example.com"
PUBLIC = "93.184.216.34"


@pytest.fixture
def dns(monkeypatch):
    """``{name: address}`` that every event loop's ``getaddrinfo`` answers from; other names
    resolve as usual."""
    table: dict[str, str] = {}
    real = asyncio.base_events.BaseEventLoop.getaddrinfo

    async def getaddrinfo(self, host, port, *args, **kwargs):
        if host in table:
            family = socket.AF_INET6 if ipaddress.ip_address(table[host]).version == 6 else socket.AF_INET
            return [(family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (table[host], port))]
        return await real(self, host, port, *args, **kwargs)

    monkeypatch.setattr(asyncio.base_events.BaseEventLoop, "getaddrinfo", getaddrinfo)
    return table


async def _receiver():
    """A webhook endpoint on loopback; returns (runner, port, calls received)."""
    calls: list[bytes] = []

    async def hook(request: web.Request) -> web.Response:
        calls.append(await request.read())
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1], calls


def _send(url: str, policy: PushPolicy | None):
    return send_webhook(url, "job.completed", {"event": "job.completed"}, "secret", delivery_id="job_1.completed",
                        delays_s=(0.01, 0.01), timeout_s=5, policy=policy)


def test_a_webhook_whose_name_now_resolves_into_the_private_network_is_not_sent(dns):
    async def scenario():
        runner, port, calls = await _receiver()
        try:
            url = f"http://{HOOK_HOST}:{port}/hook"
            dns[HOOK_HOST] = PUBLIC
            await PushPolicy().check_new(url, "webhook_url")  # submission: public, accepted
            dns[HOOK_HOST] = "127.0.0.1"  # the name moved onto the worker's loopback
            refused = await _send(url, PushPolicy())
            literal = await _send(f"http://127.0.0.1:{port}/hook", PushPolicy())
            mapped = await _send(f"http://[::ffff:127.0.0.1]:{port}/hook", PushPolicy())
            allowed = await _send(url, PushPolicy.from_lists([], ["127.0.0.0/8"]))  # the operator allows it
            unrestricted = await _send(url, None)  # an admin's job
            return refused, literal, mapped, allowed, unrestricted, list(calls)
        finally:
            await runner.cleanup()

    refused, literal, mapped, allowed, unrestricted, calls = asyncio.run(scenario())
    for delivery in (refused, literal, mapped):
        assert not delivery.delivered and delivery.attempts == 1, delivery  # refused at once, not retried
        assert delivery.detail.startswith("refused by the push policy") and "not a public address" in delivery.detail
    assert HOOK_HOST in refused.detail
    assert allowed.delivered and unrestricted.delivered
    assert len(calls) == 2  # only the two allowed deliveries reached the receiver


def test_a_host_outside_the_allowed_hosts_is_refused_at_send(dns):
    dns[HOOK_HOST] = PUBLIC
    policy = PushPolicy.from_lists(["hooks.partner.example"], [])
    delivery = asyncio.run(_send(f"http://{HOOK_HOST}/hook", policy))
    assert not delivery.delivered and delivery.attempts == 1
    assert "not in push.allowed_hosts" in delivery.detail
    with pytest.raises(StreamKeyError):  # the same rule as at submission
        asyncio.run(policy.check_new(f"http://{HOOK_HOST}/hook", "webhook_url"))


def test_only_admins_jobs_skip_the_send_time_check():
    fields = {"id": "job_1", "state": "completed", "priority": "normal", "input_path": "in.mp4",
              "created": "1", "updated": "1"}
    assert Job.from_fields(fields).webhook_unrestricted is False  # jobs stored before the flag: checked
    stored = Job.from_fields({**fields, "webhook_unrestricted": "1"})
    assert stored.webhook_unrestricted and Job.from_fields(stored.to_fields()).webhook_unrestricted
