"""Short-lived signed URLs for the pictures a page shows with ``<img src>``.

A browser fetching an image sends no ``Authorization`` header, and a long-lived token in
a URL ends up in logs, history and Referer headers. So the API hands out picture URLs that
carry their own proof instead: ``?expires=<unix time>&sig=<HMAC-SHA256>`` over the path,
the resource's owner and the expiry, keyed by a server secret (derived from the JWT secret,
so every node and the gateway of a cluster agree). A link is bound to one resource and one
owner, stops working minutes after it was issued, and is compared in constant time.

Expiry times are rounded up to ``ROUND_S`` so a page listing faces twice in a row gets the
same URLs, and the browser's cache keeps working.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import time
from collections.abc import Callable
from urllib.parse import urlencode

from gpu.errors import SwapcastError
from signaling.numbers import NumberError, parse_natural

DEFAULT_TTL_S = 600.0
ROUND_S = 60
MAX_EXPIRES = 10**12 - 1  # twelve digits: a unix time until the year 33658


class SignedUrlError(SwapcastError):
    """A signed URL that cannot be used; ``reason`` says why."""

    status = 404

    @property
    def reason(self) -> str:
        return str(self)


class ExpiredUrlError(SignedUrlError):
    """The link was genuine once; checked before the resource is looked up, so saying
    so tells nothing about whether the resource exists."""

    status = 403


class UrlSigner:
    """Signs and checks ``path`` + owner links. ``clock`` is injectable for tests."""

    def __init__(self, secret: str | bytes, ttl_s: float = DEFAULT_TTL_S,
                 clock: Callable[[], float] = time.time) -> None:
        if not secret:
            raise ValueError("a URL signer needs a secret")
        raw = secret.encode() if isinstance(secret, str) else secret
        # a key of its own: a signature is never usable as (or derived from) a token signature
        self._key = hmac.new(raw, b"swapcast signed picture URL v1", hashlib.sha256).digest()
        self.ttl_s = ttl_s
        self._clock = clock

    def sign(self, path: str, owner: str) -> str:
        """``path`` with ``expires`` and ``sig`` query parameters."""
        expires = math.ceil((self._clock() + self.ttl_s) / ROUND_S) * ROUND_S
        return f"{path}?{urlencode({'expires': expires, 'sig': self._signature(path, owner, expires)})}"

    def check_expiry(self, expires: str | None) -> int:
        """The link's expiry time; ``ExpiredUrlError`` once it passed, ``SignedUrlError``
        when it is no number."""
        try:
            when = parse_natural(expires, "expires", maximum=MAX_EXPIRES)
        except NumberError:
            raise SignedUrlError("malformed signed link: expires must be a unix time") from None
        if when <= self._clock():
            raise ExpiredUrlError("this picture link has expired; list the faces again for a fresh one")
        return when

    def check(self, path: str, owner: str, expires: str | None, sig: str | None, missing: str) -> None:
        """``SignedUrlError(missing)`` unless ``sig`` signs ``path`` for ``owner`` until
        ``expires`` (a forged or misdirected link is answered like a missing resource)."""
        when = self.check_expiry(expires)
        if not sig or not hmac.compare_digest(sig.encode(), self._signature(path, owner, when).encode()):
            raise SignedUrlError(missing)

    def remaining_s(self, expires: str) -> int:
        return max(0, self.check_expiry(expires) - int(self._clock()))

    def _signature(self, path: str, owner: str, expires: int) -> str:
        message = f"{path}\n{owner}\n{expires}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()
