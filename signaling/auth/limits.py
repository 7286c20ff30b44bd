"""Request rate limits: one token bucket per key (a token's subject, a client IP).

Memory is bounded by construction: buckets are kept in least-recently-used order, a bucket
idle long enough to have refilled completely is indistinguishable from a new one and is
dropped, and past ``max_keys`` the least recently used bucket goes even if not yet full.
That last case lets a flood of distinct keys reset *other* idle keys' buckets — the price
of never growing without bound, and a flood large enough to do it is itself rate-limited
per IP.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable


class RateLimiter:
    """``per_minute`` requests per key on average, with bursts of up to ``burst``
    (default: ``per_minute``, i.e. a minute's allowance at once). Not thread-safe: it is
    meant for one asyncio event loop, where ``take`` never yields."""

    def __init__(
        self,
        per_minute: int,
        burst: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 100_000,
    ) -> None:
        if per_minute < 1 or (burst is not None and burst < 1) or max_keys < 1:
            raise ValueError("per_minute, burst and max_keys must be at least 1")
        self._rate = per_minute / 60.0  # tokens per second
        self._capacity = float(burst if burst is not None else per_minute)
        self._refill_s = self._capacity / self._rate  # empty → full
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # key → (tokens, at)

    @property
    def tracked_keys(self) -> int:
        """How many keys hold a bucket now (for tests and metrics). Deliberately not
        ``__len__``: an empty limiter must not be falsy."""
        return len(self._buckets)

    def take(self, key: Hashable) -> float | None:
        """Spend one request for ``key``: None when allowed, else the seconds until it
        would be (nothing is spent on a refusal, so waiting that long succeeds)."""
        now = self._clock()
        self._evict_idle(now)
        state = self._buckets.pop(key, None)
        if state is None:
            if len(self._buckets) >= self._max_keys:
                self._buckets.popitem(last=False)
            state = (self._capacity, now)
        tokens, at = state
        tokens = min(self._capacity, tokens + (now - at) * self._rate)
        wait = None if tokens >= 1.0 else (1.0 - tokens) / self._rate
        self._buckets[key] = (tokens - 1.0 if wait is None else tokens, now)
        return wait

    def _evict_idle(self, now: float) -> None:
        """Drop buckets (oldest first) that have refilled completely since last used."""
        buckets = self._buckets
        while buckets and now - next(iter(buckets.values()))[1] >= self._refill_s:
            buckets.popitem(last=False)
