"""The aiohttp middleware that authenticates requests and applies the rate limits, and the
helpers handlers use to authorize them.

Order of checks, and why:
1. per client limit (an IPv4 address, mapped or not, or an IPv6 /64) — first, so a stranger cannot make us verify signatures (or guess
   tokens) faster than the limit; public routes are limited too.
2. public routes pass without a token.
3. the bearer token is verified (``Unauthorized`` → 401).
4. per subject limit — keyed by the token's ``sub``, so one user's many tokens share it.

Every ``AuthError`` raised here *or by a handler below* (``require_admin``,
``check_owner``, a handler's own ``TooManyRequests``) is rendered as JSON
``{"error": reason}`` with its status, so handlers just raise.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import hdrs, web

from signaling.client_address import IpNetwork, client_key, in_networks, parse_networks

from .limits import RateLimiter
from .principal import AuthError, Forbidden, NotYours, Principal, TooManyRequests, Unauthorized
from .references import require_visible
from .tokens import TokenVerifier

__all__ = [
    "PRINCIPAL_KEY", "AuthError", "Forbidden", "NotYours", "TooManyRequests", "Unauthorized",
    "auth_middleware", "check_owner", "error_response", "principal", "require_admin",
]

PRINCIPAL_KEY: web.RequestKey[Principal] = web.RequestKey("swapcast_principal", Principal)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def principal(request: web.Request) -> Principal:
    """The caller ``auth_middleware`` verified; ``Unauthorized`` on a public route (or an
    app without the middleware), so a handler can never act for nobody by mistake."""
    found = request.get(PRINCIPAL_KEY)
    if found is None:
        raise Unauthorized("missing bearer token")
    return found


def require_admin(request: web.Request) -> Principal:
    """The caller, who must be an admin (``Forbidden``, 403, otherwise)."""
    caller = principal(request)
    if not caller.is_admin:
        raise Forbidden("admin role required")
    return caller


def check_owner(request: web.Request, owner: str, what: str = "resource") -> Principal:
    """The caller, who must own the resource or be an admin.

    A user touching someone else's resource gets ``NotYours`` — 404 ``"no such <what>"``,
    the same answer as for an id that does not exist — so ids cannot be probed. Handlers
    should use the same ``what`` for their genuinely-missing case (e.g. ``"session"``)."""
    caller = principal(request)
    require_visible(caller, owner, f"no such {what}")
    return caller


def _client_ip(request: web.Request, proxies: tuple[IpNetwork, ...]) -> str:
    """The client's key (``signaling.client_address.client_key``) for the per-IP limit. ``X-Forwarded-For`` is believed only when the peer is a
    trusted proxy (anyone else could forge it to dodge the per-IP limit); then the
    rightmost address that is not itself a trusted proxy is the client, since each proxy
    appends the address it saw and only entries left of ours could be client-made."""
    peer = request.remote or "unknown"
    if not proxies or not in_networks(peer, proxies):
        return client_key(peer)
    hops = [h.strip() for h in ",".join(request.headers.getall(hdrs.X_FORWARDED_FOR, ())).split(",")]
    hops = [h for h in hops if h]
    for hop in reversed(hops):
        if not in_networks(hop, proxies):
            return client_key(hop)
    return client_key(hops[0] if hops else peer)


def error_response(exc: AuthError) -> web.Response:
    """The JSON response for an auth error, with the headers its status calls for:
    ``WWW-Authenticate`` on 401 (RFC 6750), ``Retry-After`` in whole seconds on 429."""
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        challenge = 'Bearer realm="swapcast"'
        if exc.reason != "missing bearer token":  # RFC 6750 §3.1: no error code without a token
            challenge += f', error="invalid_token", error_description="{_quotable(exc.reason)}"'
        headers[hdrs.WWW_AUTHENTICATE] = challenge
    elif isinstance(exc, TooManyRequests):
        headers[hdrs.RETRY_AFTER] = str(max(1, math.ceil(exc.retry_after_s)))
    return web.json_response({"error": exc.reason}, status=exc.status, headers=headers)


def auth_middleware(
    verifier: TokenVerifier,
    *,
    per_token: RateLimiter,
    per_ip: RateLimiter,
    is_public: Callable[[web.Request], bool],
    trusted_proxies: Iterable[str] = (),
) -> Middleware:
    """An aiohttp middleware: add it to ``web.Application(middlewares=[...])``.

    ``is_public(request)`` picks routes that need no token (health checks, static pages,
    the OpenAPI document). ``trusted_proxies`` are the addresses or CIDR networks of the
    gateways whose ``X-Forwarded-For`` is believed. A token comes from
    ``Authorization: Bearer <jwt>``, or — on WebSocket upgrade requests only, since
    browsers cannot set headers there — from ``?token=<jwt>``."""
    proxies = parse_networks(trusted_proxies)

    @web.middleware
    async def authenticate(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            _limit(per_ip, _client_ip(request, proxies), "too many requests from this address")
            if not is_public(request):
                caller = verifier.verify(_bearer_token(request))
                _limit(per_token, caller.subject, "too many requests for this token")
                request[PRINCIPAL_KEY] = caller
            return await handler(request)
        except AuthError as exc:
            return error_response(exc)

    return authenticate


def _limit(limiter: RateLimiter, key: str, reason: str) -> None:
    wait = limiter.take(key)
    if wait is not None:
        raise TooManyRequests(reason, wait)


def _bearer_token(request: web.Request) -> str:
    header = request.headers.get(hdrs.AUTHORIZATION)
    if header is not None:
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorized("Authorization must be 'Bearer <token>'")
        return token.strip()
    if "token" in request.query:
        if not _is_websocket_upgrade(request):
            raise Unauthorized("?token= is accepted only on WebSocket upgrades; use Authorization: Bearer")
        return request.query["token"]
    raise Unauthorized("missing bearer token")


def _is_websocket_upgrade(request: web.Request) -> bool:
    return request.method == hdrs.METH_GET and request.headers.get(hdrs.UPGRADE, "").lower() == "websocket"


def _quotable(text: str) -> str:
    """``text`` reduced to the characters RFC 6750 allows in error_description (no quote,
    backslash or control characters), since reasons may echo token contents."""
    return "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in text)
