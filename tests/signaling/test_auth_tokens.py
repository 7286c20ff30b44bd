"""Token verification: every way a bearer token can be wrong maps to a clear reason, and
only the algorithms the configuration names are accepted (no alg none, no HS/RS confusion)."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import HMACAlgorithm, RSAAlgorithm

from signaling.auth import (
    AuthConfigError,
    Principal,
    RateLimiter,
    TokenVerifier,
    Unauthorized,
    dev_secret,
    mint_token,
)

SECRET = "test-secret-" + "x" * 32


def reason(verifier: TokenVerifier, token: str) -> str:
    with pytest.raises(Unauthorized) as caught:
        verifier.verify(token)
    assert caught.value.status == 401
    return caught.value.reason


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# ---- HS256 ----

def test_dev_secret_is_random_and_long() -> None:
    a, b = dev_secret(), dev_secret()
    assert a != b and len(a) >= 43  # 32 bytes, urlsafe base64


def test_hs256_round_trip() -> None:
    verifier = TokenVerifier(secret=SECRET)
    assert verifier.verify(mint_token(SECRET, "alice")) == Principal("alice", "user")
    admin = verifier.verify(mint_token(SECRET, "root", role="admin"))
    assert admin.is_admin and admin.may_access("anyone")


def test_principal_may_access_only_own() -> None:
    user = Principal("alice", "user")
    assert user.may_access("alice") and not user.may_access("bob") and not user.is_admin


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("", "missing bearer token"),
        ("not-a-jwt", "malformed token"),
        ("a.b.c", "malformed token"),
        ("x" * 10_000, "malformed token"),
        (mint_token(SECRET, "alice", ttl_s=-60), "token expired"),
        (mint_token("another-secret-" + "y" * 32, "alice"), "token signature is invalid"),
        (mint_token(SECRET, "alice", role="root"), "unknown role 'root' (admin or user)"),
        (mint_token(SECRET, "alice", role=None), "unknown role 'none' (admin or user)"),
        (mint_token(SECRET, ""), "token has no subject"),
        (jwt.encode({"role": "user", "exp": time.time() + 24 * 3600}, SECRET, algorithm="HS256"), "token has no subject"),
        (jwt.encode({"sub": "alice", "role": "user"}, SECRET, algorithm="HS256"), "token has no 'exp' claim"),
        (mint_token(SECRET, "alice", iat=int(time.time()) + 3600), "token not yet valid"),
    ],
    ids=["empty", "garbage", "bad-segments", "huge", "expired", "forged", "bad-role", "no-role",
         "empty-sub", "no-sub", "no-exp", "future-iat"],
)
def test_hs256_rejections(token: str, expected: str) -> None:
    assert reason(TokenVerifier(secret=SECRET), token) == expected


def test_tampered_payload_is_forged() -> None:
    header, _, signature = mint_token(SECRET, "alice").split(".")
    payload = b64(json.dumps({"sub": "alice", "role": "admin", "exp": time.time() + 60}).encode())
    assert reason(TokenVerifier(secret=SECRET), f"{header}.{payload}.{signature}") == "token signature is invalid"


def test_leeway_tolerates_small_clock_skew() -> None:
    token = mint_token(SECRET, "alice", ttl_s=-2)
    assert TokenVerifier(secret=SECRET, leeway_s=5).verify(token).subject == "alice"
    assert reason(TokenVerifier(secret=SECRET, leeway_s=0), token) == "token expired"


def test_alg_none_is_refused() -> None:
    unsigned = jwt.encode({"sub": "alice", "role": "admin", "exp": time.time() + 60}, None, algorithm="none")
    assert reason(TokenVerifier(secret=SECRET), unsigned) == "token algorithm 'none' is not accepted"
    header = b64(json.dumps({"alg": "none", "typ": "JWT"}).encode())
    payload = b64(json.dumps({"sub": "alice", "role": "admin", "exp": time.time() + 60}).encode())
    assert reason(TokenVerifier(secret=SECRET), f"{header}.{payload}.") == "token algorithm 'none' is not accepted"


def test_issuer_and_audience() -> None:
    verifier = TokenVerifier(secret=SECRET, issuer="https://id.example", audience="swapcast")
    good = mint_token(SECRET, "alice", iss="https://id.example", aud="swapcast")
    assert verifier.verify(good).subject == "alice"
    mismatch = "token issuer/audience mismatch"
    assert reason(verifier, mint_token(SECRET, "alice", iss="https://evil.example", aud="swapcast")) == mismatch
    assert reason(verifier, mint_token(SECRET, "alice", iss="https://id.example", aud="other")) == mismatch
    assert reason(verifier, mint_token(SECRET, "alice")) == mismatch  # neither claim present
    # A token meant for some audience is refused by a verifier that expects none.
    assert reason(TokenVerifier(secret=SECRET), mint_token(SECRET, "alice", aud="other")) == mismatch


def test_from_settings_and_missing_config() -> None:
    settings = SimpleNamespace(jwt_secret=None, jwks_file=None, issuer=None, audience=None)
    with pytest.raises(AuthConfigError, match=r"jwt_secret or auth\.jwks_file"):
        TokenVerifier.from_settings(settings)
    dev = dev_secret()
    verifier = TokenVerifier.from_settings(settings, dev_secret=dev)
    assert verifier.algorithms == ("HS256",)
    assert verifier.verify(mint_token(dev, "dev", "admin")).is_admin
    settings.jwt_secret = SECRET
    settings.issuer = "iss"
    assert reason(TokenVerifier.from_settings(settings, dev_secret=dev), mint_token(SECRET, "a")) == (
        "token issuer/audience mismatch"
    )


# ---- RS256 with a JWKS ----

def rsa_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def keys() -> dict[str, rsa.RSAPrivateKey]:
    return {"k1": rsa_key(), "k2": rsa_key(), "stranger": rsa_key()}


def jwk(key: rsa.RSAPrivateKey, kid: str | None) -> dict[str, Any]:
    entry = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    entry.update({"use": "sig", "alg": "RS256"})
    if kid:
        entry["kid"] = kid
    return entry


def rs_token(key: rsa.RSAPrivateKey, kid: str | None, sub: str = "alice", role: str = "user") -> str:
    headers = {"kid": kid} if kid else None
    claims = {"sub": sub, "role": role, "iat": int(time.time()), "exp": int(time.time()) + 60}
    return jwt.encode(claims, key, algorithm="RS256", headers=headers)


def test_rs256_selects_key_by_kid(keys: dict[str, rsa.RSAPrivateKey], tmp_path: Path) -> None:
    jwks = {"keys": [jwk(keys["k1"], "k1"), jwk(keys["k2"], "k2"), {"kty": "oct", "k": b64(b"s" * 32)}]}
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(jwks))
    for source in (jwks, path, str(path)):
        verifier = TokenVerifier(jwks=source)
        assert verifier.algorithms == ("RS256",)
        assert verifier.verify(rs_token(keys["k1"], "k1")) == Principal("alice", "user")
        assert verifier.verify(rs_token(keys["k2"], "k2", "root", "admin")) == Principal("root", "admin")
        # Signed by k1 but claiming to be k2: checked against k2, so it fails.
        assert reason(verifier, rs_token(keys["k1"], "k2")) == "token signature is invalid"
        assert reason(verifier, rs_token(keys["k1"], "nope")) == "unknown signing key 'nope'"
        assert reason(verifier, rs_token(keys["k1"], None)) == "token has no key id (kid)"


def test_rs256_single_key_may_omit_kid(keys: dict[str, rsa.RSAPrivateKey]) -> None:
    verifier = TokenVerifier(jwks={"keys": [jwk(keys["k1"], None)]})
    assert verifier.verify(rs_token(keys["k1"], None)).subject == "alice"
    assert verifier.verify(rs_token(keys["k1"], "rotated-name")).subject == "alice"
    assert TokenVerifier(jwks={"keys": [jwk(keys["k1"], "k1")]}).verify(rs_token(keys["k1"], None)).subject == "alice"
    assert reason(verifier, rs_token(keys["stranger"], None)) == "token signature is invalid"


def test_rs256_token_refused_by_hs_only_verifier(keys: dict[str, rsa.RSAPrivateKey]) -> None:
    assert reason(TokenVerifier(secret=SECRET), rs_token(keys["k1"], "k1")) == "token algorithm 'RS256' is not accepted"


def test_hs256_signed_with_public_key_is_refused(keys: dict[str, rsa.RSAPrivateKey]) -> None:
    """The algorithm-confusion attack: an HS256 token whose HMAC key is the server's RSA
    public key (which is public) must not verify against the JWKS."""
    verifier = TokenVerifier(jwks={"keys": [jwk(keys["k1"], "k1")]})
    pem = keys["k1"].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    payload = b64(json.dumps({"sub": "mallory", "role": "admin", "exp": int(time.time()) + 60}).encode())
    signing_input = f"{header}.{payload}".encode()
    forged = f"{header}.{payload}.{b64(HMACAlgorithm(HMACAlgorithm.SHA256).sign(signing_input, pem))}"
    assert reason(verifier, forged) == "token algorithm 'HS256' is not accepted"


def test_both_configured_keys_are_used_only_with_their_algorithm(keys: dict[str, rsa.RSAPrivateKey]) -> None:
    verifier = TokenVerifier(secret=SECRET, jwks={"keys": [jwk(keys["k1"], "k1")]})
    assert verifier.algorithms == ("HS256", "RS256")
    assert verifier.verify(mint_token(SECRET, "a")).subject == "a"
    assert verifier.verify(rs_token(keys["k1"], "k1")).subject == "alice"
    # HS256 signed with the PEM public key checks against the secret, not the RSA key.
    pem = keys["k1"].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = b64(json.dumps({"sub": "mallory", "role": "admin", "exp": int(time.time()) + 60}).encode())
    sig = b64(HMACAlgorithm(HMACAlgorithm.SHA256).sign(f"{header}.{payload}".encode(), pem))
    assert reason(verifier, f"{header}.{payload}.{sig}") == "token signature is invalid"


@pytest.mark.parametrize(
    ("jwks", "message"),
    [
        ({}, "'keys' list"),
        ({"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}, "no RS256 signing key"),
        ({"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB", "use": "enc"}]}, "no RS256 signing key"),
        ({"keys": [{"kty": "RSA", "n": "!!", "e": "AQAB"}]}, "JWKS key None"),
    ],
    ids=["no-keys", "only-oct", "only-enc", "bad-key"],
)
def test_unusable_jwks(jwks: dict[str, Any], message: str) -> None:
    with pytest.raises(AuthConfigError, match=message):
        TokenVerifier(jwks=jwks)


def test_unusable_jwks_file(tmp_path: Path, keys: dict[str, rsa.RSAPrivateKey]) -> None:
    with pytest.raises(AuthConfigError, match="cannot read JSON"):
        TokenVerifier(jwks=tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(AuthConfigError, match="cannot read JSON"):
        TokenVerifier(jwks=tmp_path / "bad.json")
    with pytest.raises(AuthConfigError, match="needs a 'kid'"):
        TokenVerifier(jwks={"keys": [jwk(keys["k1"], None), jwk(keys["k2"], None)]})


# ---- rate limiter ----

def test_rate_limiter_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(60, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [None, None, None]
    assert limiter.take("a") == pytest.approx(1.0)
    assert limiter.take("b") is None  # keys are independent
    now[0] += 0.5
    assert limiter.take("a") == pytest.approx(0.5)  # a refusal spends nothing
    now[0] += 0.5
    assert limiter.take("a") is None
    assert RateLimiter(120, clock=lambda: now[0]).take("c") is None  # default burst = per_minute


def test_rate_limiter_memory_is_bounded() -> None:
    now = [0.0]
    limiter = RateLimiter(60, burst=2, clock=lambda: now[0], max_keys=3)
    for key in "abcde":
        limiter.take(key)
    assert limiter.tracked_keys == 3  # least recently used evicted
    limiter.take("e")
    assert limiter.take("e") == pytest.approx(1.0)  # a tracked key is never evicted for itself
    now[0] += 2.0  # every bucket has refilled: idle ones are dropped
    limiter.take("f")
    assert limiter.tracked_keys == 1
    with pytest.raises(ValueError):
        RateLimiter(0)
