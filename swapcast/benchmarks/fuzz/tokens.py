"""Authorization headers, good and hostile: the fixtures' real tokens and stream keys, none,
wrong schemes, ``alg: none`` and forged JWTs, validly signed tokens with claims of the wrong
type (integer ``sub``, list ``role``, string ``exp``), non-UTF-8 bytes and huge values."""

from __future__ import annotations

import base64
import json
import random
import time

from swapcast.benchmarks.fuzz.mutate import NON_UTF8, mutate_bytes
from swapcast.benchmarks.fuzz.node import SECRET


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


def _jwt(header: dict, claims: dict, secret: str | None) -> bytes:
    import hashlib
    import hmac

    signing = _b64(json.dumps(header).encode()) + b"." + _b64(json.dumps(claims).encode())
    if secret is None:
        return signing + b"."
    return signing + b"." + _b64(hmac.new(secret.encode(), signing, hashlib.sha256).digest())


def hostile_token(rng: random.Random) -> bytes:
    """A bearer token nobody should accept, or one signed with the real secret whose claims
    are malformed."""
    now = int(time.time())
    good = {"sub": "alice", "role": "user", "iat": now, "exp": now + 600}
    claims = dict(good)
    key = rng.choice(("sub", "role", "exp", "iat", "nbf", "aud", "iss", "extra"))
    claims[key] = rng.choice((7, -1, 2**64, 1.5, None, True, [], {}, ["admin"], "", "x" * 5000, "admin", "\u00e9",
                              "2999-01-01", 10**30))
    secret = rng.choice((SECRET, SECRET, None, "wrong-" + "s" * 40, ""))
    header = {"alg": rng.choice(("HS256", "HS256", "none", "None", "RS256", "HS512", "ES256", "", 7)), "typ": "JWT"}
    if rng.random() < 0.2:
        header[rng.choice(("kid", "jku", "x5u", "crit"))] = rng.choice(("../../x", "http://127.0.0.1/", 1, ["exp"]))
    token = _jwt(header, claims, secret if header["alg"] == "HS256" else rng.choice((None, SECRET)))
    roll = rng.random()
    if roll < 0.2:
        return mutate_bytes(rng, token)
    if roll < 0.25:
        return token + rng.choice(NON_UTF8)
    return token


def authorization(rng: random.Random, good: list[bytes]) -> bytes | None:
    """An ``Authorization`` value: one of the ``good`` credentials half the time (so routes
    are reached past auth), otherwise a broken one; None for no header at all."""
    roll = rng.random()
    if roll < 0.5:
        return b"Bearer " + rng.choice(good)
    if roll < 0.58:
        return None
    if roll < 0.8:
        return b"Bearer " + hostile_token(rng)
    return rng.choice((
        b"", b"Bearer", b"Bearer ", b"bearer  " + rng.choice(good), b"Basic " + _b64(b"alice:pw"),
        b"Bearer " + rng.choice(good) + b" extra", b"Bearer " + b"A" * rng.choice((100, 9000, 70000)),
        b"Bearer \xff\xfe" + rng.choice(good), b"Bearer sk_\xc3\xa9\xff", b"Bearer " + rng.choice(NON_UTF8) * 3,
        b"Bearer a.b.c", b"Bearer ..", b"Bearer e30.e30.", b"Bearer \x00", b"Token " + rng.choice(good),
    ))
