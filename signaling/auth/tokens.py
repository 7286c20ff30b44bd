"""JWT bearer tokens: minting (development, tests) and verification (every request).

Verification is deliberately strict about algorithms: HS256 is accepted only when a secret
is configured and RS256 only when a JWKS is, and the key is chosen *by* the algorithm, so
the classic confusion attack (an HS256 token "signed" with the RSA public key) and
``alg: none`` never reach a signature check that could pass.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import jwt
from jwt.exceptions import InvalidSubjectError  # not re-exported at jwt's top level

from gpu.errors import SwapcastError

from .principal import ROLES, Principal, Unauthorized

# Tokens are read from headers and query strings before any other check: bound the parsing
# work a stranger can cause. Real tokens are a few hundred bytes.
MAX_TOKEN_BYTES = 8192
_REQUIRED_CLAIMS = ["exp"]  # no eternal tokens


class AuthConfigError(SwapcastError):
    """The auth configuration cannot be used (no key, unreadable or empty JWKS)."""


class AuthSettings(Protocol):
    """The attributes of ``swapcast.config.AuthConfig`` this module reads."""

    jwt_secret: str | None
    jwks_file: Path | None
    issuer: str | None
    audience: str | None


def dev_secret() -> str:
    """A fresh random HS256 secret (256 bits) for a development server's lifetime."""
    return secrets.token_urlsafe(32)


def mint_token(secret: str, subject: str, role: str = "user", ttl_s: float = 3600, **claims: Any) -> str:
    """An HS256 token for ``subject`` with ``role``, valid from now for ``ttl_s`` seconds.

    Extra ``claims`` (``iss``, ``aud``, ...) are added and override the defaults; nothing
    is validated here, so tests can mint tokens the verifier must refuse."""
    now = int(time.time())
    payload = {"sub": subject, "role": role, "iat": now, "exp": now + int(ttl_s), **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


def _load_jwks(jwks: Mapping[str, Any] | str | Path) -> dict[str | None, jwt.PyJWK]:
    """The RS256 signing keys of a JWKS, by ``kid``. Keys for other algorithms or for
    encryption are ignored; a JWKS with one key may omit its ``kid`` (stored under None)."""
    if isinstance(jwks, (str, Path)):
        try:
            jwks = json.loads(Path(jwks).read_text())
        except (OSError, ValueError) as exc:
            raise AuthConfigError(f"jwks_file {jwks}: cannot read JSON ({exc})") from exc
    entries = jwks.get("keys") if isinstance(jwks, Mapping) else None
    if not isinstance(entries, list):
        raise AuthConfigError("JWKS must be a JSON object with a 'keys' list")
    usable = [
        k for k in entries
        if isinstance(k, Mapping) and k.get("kty") == "RSA"
        and k.get("use", "sig") == "sig" and k.get("alg", "RS256") == "RS256"
    ]
    keys: dict[str | None, jwt.PyJWK] = {}
    for entry in usable:
        kid = entry.get("kid")
        if kid is None and len(usable) > 1:
            raise AuthConfigError("JWKS with several keys: every key needs a 'kid'")
        try:
            keys[kid] = jwt.PyJWK(dict(entry), algorithm="RS256")
        except jwt.PyJWTError as exc:  # InvalidKeyError, PyJWKError
            raise AuthConfigError(f"JWKS key {kid!r}: {exc}") from exc
    if not keys:
        raise AuthConfigError("JWKS holds no RS256 signing key (kty RSA, use sig)")
    return keys


class TokenVerifier:
    """Turns a bearer token into a ``Principal`` or raises ``Unauthorized`` with a reason
    a client developer can act on. Thread-safe and cheap to call: keys are parsed once.

    With both a secret and a JWKS, HS256 tokens are checked against the secret and RS256
    ones against the JWKS — never a key with the other algorithm. Required claims: ``sub``,
    ``role`` (admin | user; a missing role is refused, not defaulted), ``exp``; ``iss`` and
    ``aud`` when configured (and a token carrying an ``aud`` is refused when none is)."""

    def __init__(
        self,
        secret: str | None = None,
        jwks: Mapping[str, Any] | str | Path | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        leeway_s: float = 5,
    ) -> None:
        if not secret and jwks is None:
            raise AuthConfigError("no token key configured: set auth.jwt_secret or auth.jwks_file")
        self._secret = secret or None
        self._rsa_keys = _load_jwks(jwks) if jwks is not None else {}
        self._issuer = issuer
        self._audience = audience
        self._leeway_s = leeway_s

    @classmethod
    def from_settings(cls, auth: AuthSettings, *, dev_secret: str | None = None) -> TokenVerifier:
        """A verifier for an ``AuthConfig``; ``dev_secret`` stands in for a missing
        ``jwt_secret`` (the loopback development server). Raises ``AuthConfigError`` when
        neither a secret nor a JWKS is available."""
        return cls(
            secret=auth.jwt_secret or dev_secret,
            jwks=auth.jwks_file,
            issuer=auth.issuer,
            audience=auth.audience,
        )

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The algorithms this verifier accepts, fixed by its configuration."""
        return (("HS256",) if self._secret else ()) + (("RS256",) if self._rsa_keys else ())

    def verify(self, token: str) -> Principal:
        """The principal a valid token names; ``Unauthorized(reason)`` otherwise."""
        if not token:
            raise Unauthorized("missing bearer token")
        if len(token) > MAX_TOKEN_BYTES or not token.isascii():  # a JWT is base64url and dots only
            raise Unauthorized("malformed token")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("malformed token") from None
        alg = header.get("alg")
        if alg not in self.algorithms:
            raise Unauthorized(f"token algorithm {str(alg)[:16]!r} is not accepted")
        key = self._secret if alg == "HS256" else self._rsa_key(header.get("kid"))
        try:
            claims = jwt.decode(
                token, key, algorithms=[alg], issuer=self._issuer, audience=self._audience,
                leeway=self._leeway_s, options={"require": _REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError:
            raise Unauthorized("token expired") from None
        except jwt.ImmatureSignatureError:
            raise Unauthorized("token not yet valid") from None
        except jwt.InvalidSignatureError:
            raise Unauthorized("token signature is invalid") from None
        except (jwt.InvalidIssuerError, jwt.InvalidAudienceError):
            raise Unauthorized("token issuer/audience mismatch") from None
        except jwt.MissingRequiredClaimError as exc:
            if exc.claim in ("iss", "aud"):
                raise Unauthorized("token issuer/audience mismatch") from None
            raise Unauthorized(f"token has no '{exc.claim}' claim") from None
        except InvalidSubjectError:  # a 'sub' that is not a string
            raise Unauthorized("token has no subject") from None
        except jwt.PyJWTError:
            raise Unauthorized("malformed token") from None
        return _principal(claims)

    def _rsa_key(self, kid: object) -> jwt.PyJWK:
        """The key ``kid`` names; a lone key serves a token without a kid, and a lone key
        without a kid serves every token (the signature check still decides)."""
        if len(self._rsa_keys) == 1 and (kid is None or None in self._rsa_keys):
            return next(iter(self._rsa_keys.values()))
        if kid is None:
            raise Unauthorized("token has no key id (kid)")
        key = self._rsa_keys.get(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthorized(f"unknown signing key {str(kid)[:64]!r}")
        return key


def _principal(claims: Mapping[str, Any]) -> Principal:
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Unauthorized("token has no subject")
    role = claims.get("role")
    if role not in ROLES:
        shown = str(role)[:32] if role is not None else "none"
        raise Unauthorized(f"unknown role {shown!r} (admin or user)")
    expires = claims.get("exp")
    return Principal(subject=subject, role=role,
                     expires=float(expires) if isinstance(expires, (int, float)) and not isinstance(expires, bool) else None)
