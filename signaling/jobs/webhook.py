"""Job webhooks: a JSON POST when a job completes or fails, signed and retried.

The body is signed with HMAC-SHA256 under ``jobs.webhook_secret`` and the hex digest sent as
``X-Swapcast-Signature: sha256=<hex>`` (the GitHub convention, so receivers have code for it);
a receiver recomputes it over the raw body bytes with ``verify``. Without a secret the header
is left out. Every retry of one notification carries the same ``X-Swapcast-Delivery`` id,
so a receiver that saw a delivery whose answer got lost can drop the repeat.

Retries: connection errors, timeouts, 408, 429 and 5xx are retried after growing delays
(1, 2, 4, 8, 16 s by default); any other answer is final (2xx = delivered), and so is a
redirect: it is not followed.

A user's webhook is checked against the push policy when the job is submitted, and again
when it is sent: the name may resolve elsewhere by then (DNS rebinding). The send-time check
sits in the connection's resolver, so the address checked is the address connected to.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import ThreadedResolver

from signaling.push_policy import DestinationRefused, PushPolicy

SIGNATURE_HEADER = "X-Swapcast-Signature"
EVENT_HEADER = "X-Swapcast-Event"
DELIVERY_HEADER = "X-Swapcast-Delivery"
DEFAULT_DELAYS_S = (1.0, 2.0, 4.0, 8.0, 16.0)
_RETRY_STATUSES = frozenset({408, 429})


def sign(body: bytes, secret: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str, signature: str | None) -> bool:
    """True when ``signature`` (the header's value) was made from ``body`` with ``secret``."""
    return signature is not None and hmac.compare_digest(sign(body, secret), signature)


@dataclass(frozen=True)
class Delivery:
    delivered: bool
    attempts: int
    detail: str  # the last answer ("HTTP 200") or error, for the job's webhook_status


class PolicyResolver(AbstractResolver):
    """Resolves a webhook's host and keeps only the addresses ``policy`` allows; none left
    is ``DestinationRefused``."""

    def __init__(self, policy: PushPolicy) -> None:
        self._policy = policy
        self._inner = ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET,
                      ) -> list[ResolveResult]:
        self._policy.check_host(host, "webhook_url")
        refusal: DestinationRefused | None = None
        allowed = []
        for result in await self._inner.resolve(host, port, family):
            try:
                self._policy.check_address(host, ipaddress.ip_address(result["host"]), "webhook_url")
            except DestinationRefused as exc:
                refusal = refusal or exc
                continue
            allowed.append(result)
        if not allowed:
            raise refusal or DestinationRefused(f"webhook_url host {host!r} has no address")
        return allowed

    async def close(self) -> None:
        await self._inner.close()


def _check_literal(url: str, policy: PushPolicy) -> None:
    """An address written in the URL never reaches a resolver: check it here."""
    host = urlsplit(url).hostname or ""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return
    policy.check_host(host, "webhook_url")
    policy.check_address(host, address, "webhook_url")


async def send_webhook(
    url: str,
    event: str,
    payload: dict[str, Any],
    secret: str | None,
    *,
    delivery_id: str,
    delays_s: Sequence[float] = DEFAULT_DELAYS_S,
    timeout_s: float = 10.0,
    policy: PushPolicy | None = None,
) -> Delivery:
    """POST ``payload`` to ``url``; retried as the module docstring says. ``delivery_id`` is
    the same for every send of one notification, also when another worker repeats it.
    With ``policy`` (a user's webhook), an address it refuses is not connected to: the
    delivery fails at once, without retries, saying why."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", EVENT_HEADER: event, DELIVERY_HEADER: delivery_id}
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    detail = ""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    connector = None
    if policy is not None:
        try:
            _check_literal(url, policy)
        except DestinationRefused as exc:
            return Delivery(False, 1, f"refused by the push policy: {exc}")
        connector = aiohttp.TCPConnector(resolver=PolicyResolver(policy))
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        for attempt in range(1, len(delays_s) + 2):
            try:
                async with session.post(url, data=body, headers=headers, allow_redirects=False) as response:
                    detail = f"HTTP {response.status}"
                    if 200 <= response.status < 300:
                        return Delivery(True, attempt, detail)
                    if response.status < 500 and response.status not in _RETRY_STATUSES:
                        return Delivery(False, attempt, detail)
            except aiohttp.ClientConnectorError as exc:
                if isinstance(exc.os_error, DestinationRefused):
                    return Delivery(False, attempt, f"refused by the push policy: {exc.os_error}")
                detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            except (TimeoutError, aiohttp.ClientError) as exc:
                detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            if attempt <= len(delays_s):
                await asyncio.sleep(delays_s[attempt - 1])
    return Delivery(False, len(delays_s) + 1, detail)
