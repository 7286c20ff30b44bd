"""Authentication, authorization, rate limits and the audit log of the control plane.

Wiring (what a node or gateway app does)::

    verifier = TokenVerifier.from_settings(config.auth, dev_secret=maybe_dev_secret)
    app = web.Application(middlewares=[auth_middleware(
        verifier,
        per_token=RateLimiter(config.auth.requests_per_minute_per_token),
        per_ip=RateLimiter(config.auth.requests_per_minute_per_ip),
        is_public=lambda r: r.path in ("/healthz", "/readyz") or not r.path.startswith("/api/"),
        trusted_proxies={"10.0.0.0/8"},  # the gateways, on a node behind them
    )])
    # in a handler:
    caller = principal(request)            # or require_admin(request)
    check_owner(request, session.owner, "session")   # 404 "no such session" if not theirs
    await audit.append(caller.subject, "session.kill", session_id)

The request helper ``principal(request)`` lives in ``signaling.auth.middleware`` and is not
re-exported here: it would shadow the ``signaling.auth.principal`` module.
"""

from .audit import AuditLog
from .limits import RateLimiter
from .middleware import PRINCIPAL_KEY, auth_middleware, check_owner, error_response, require_admin
from .principal import ROLES, AuthError, Forbidden, NotYours, Principal, Role, TooManyRequests, Unauthorized
from .references import require_visible, visible
from .tokens import AuthConfigError, AuthSettings, TokenVerifier, dev_secret, mint_token

__all__ = [
    "PRINCIPAL_KEY", "ROLES", "AuditLog", "AuthConfigError", "AuthError", "AuthSettings", "Forbidden",
    "NotYours", "Principal", "RateLimiter", "Role", "TokenVerifier", "TooManyRequests", "Unauthorized",
    "auth_middleware", "check_owner", "dev_secret", "error_response", "mint_token", "require_admin",
    "require_visible", "visible",
]
