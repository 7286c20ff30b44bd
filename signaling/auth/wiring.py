"""Auth for one app (a node or the gateway) from the ``auth`` config section: the verifier,
the middleware, the audit log, and the development mode of the embedded node.

Without a secret or JWKS, only a server bound to loopback starts: it makes a development
secret and an admin token that ``swapcast serve`` prints. Anything else refuses to start,
and so does a cluster, whose gateway and nodes must share one secret."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from .audit import AuditLog
from .limits import RateLimiter
from .middleware import auth_middleware
from .signed_urls import UrlSigner
from .tokens import AuthConfigError, TokenVerifier, dev_secret, mint_token

DEV_TOKEN_TTL_S = 30 * 24 * 3600
DEV_SUBJECT = "dev"


class AuthSection(Protocol):
    jwt_secret: str | None
    jwks_file: Path | None
    issuer: str | None
    audience: str | None
    requests_per_minute_per_token: int
    requests_per_minute_per_ip: int
    max_sessions_per_user: int
    audit_log: Path | None
    trusted_proxies: list[str]


@dataclass
class ApiAuth:
    verifier: TokenVerifier
    middleware: Any
    audit: AuditLog
    max_sessions_per_user: int
    url_signer: UrlSigner  # picture links for <img> tags, which cannot send the token
    dev_token: str | None = None  # development mode: an admin token to print at start


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def api_auth(auth: AuthSection, *, host: str, cluster: bool, data_dir: Path,
             is_public: Callable[[web.Request], bool]) -> ApiAuth:
    secret, token = auth.jwt_secret, None
    if not secret and not auth.jwks_file:
        if cluster:
            raise AuthConfigError("a cluster needs auth: set auth.jwt_secret (SWAPCAST_AUTH__JWT_SECRET), the same "
                                  "on the gateway and every node, or auth.jwks_file")
        if not is_loopback(host):
            raise AuthConfigError(f"refusing to listen on {host} without authentication: set auth.jwt_secret "
                                  "(SWAPCAST_AUTH__JWT_SECRET) or auth.jwks_file, or listen on 127.0.0.1 "
                                  "for development")
        secret = dev_secret()
        token = mint_token(secret, DEV_SUBJECT, role="admin", ttl_s=DEV_TOKEN_TTL_S)
    verifier = TokenVerifier.from_settings(auth, dev_secret=secret if token else None)
    middleware = auth_middleware(
        verifier,
        per_token=RateLimiter(auth.requests_per_minute_per_token),
        per_ip=RateLimiter(auth.requests_per_minute_per_ip),
        is_public=is_public,
        trusted_proxies=auth.trusted_proxies,
    )
    audit = AuditLog(Path(auth.audit_log or Path(data_dir).expanduser() / "audit.jsonl"))
    # JWKS alone gives no shared secret: links then verify only on the node that issued them
    signer = UrlSigner(secret or dev_secret())
    return ApiAuth(verifier, middleware, audit, auth.max_sessions_per_user, signer, token)
