"""Job webhooks: a JSON POST when a job completes or fails, signed and retried.

The body is signed with HMAC-SHA256 under ``jobs.webhook_secret`` and the hex digest sent as
``X-Swapcast-Signature: sha256=<hex>`` (the GitHub convention, so receivers have code for it);
a receiver recomputes it over the raw body bytes with ``verify``. Without a secret the header
is left out. Every retry of one notification carries the same ``X-Swapcast-Delivery`` id,
so a receiver that saw a delivery whose answer got lost can drop the repeat.

Retries: connection errors, timeouts, 408, 429 and 5xx are retried after growing delays
(1, 2, 4, 8, 16 s by default); any other answer is final (2xx = delivered).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

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


async def send_webhook(
    url: str,
    event: str,
    payload: dict[str, Any],
    secret: str | None,
    *,
    delivery_id: str,
    delays_s: Sequence[float] = DEFAULT_DELAYS_S,
    timeout_s: float = 10.0,
) -> Delivery:
    """POST ``payload`` to ``url``; retried as the module docstring says. ``delivery_id`` is
    the same for every send of one notification, also when another worker repeats it."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()
    headers = {"Content-Type": "application/json", EVENT_HEADER: event, DELIVERY_HEADER: delivery_id}
    if secret:
        headers[SIGNATURE_HEADER] = sign(body, secret)
    detail = ""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        for attempt in range(1, len(delays_s) + 2):
            try:
                async with session.post(url, data=body, headers=headers) as response:
                    detail = f"HTTP {response.status}"
                    if 200 <= response.status < 300:
                        return Delivery(True, attempt, detail)
                    if response.status < 500 and response.status not in _RETRY_STATUSES:
                        return Delivery(False, attempt, detail)
            except (TimeoutError, aiohttp.ClientError) as exc:
                detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            if attempt <= len(delays_s):
                await asyncio.sleep(delays_s[attempt - 1])
    return Delivery(False, len(delays_s) + 1, detail)
