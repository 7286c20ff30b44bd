"""Mutation primitives every layer shares: byte edits, hostile JSON values, JSON tree edits.

All randomness comes from the ``random.Random`` each layer is given, so a run is replayable
from its seed."""

from __future__ import annotations

import json
import random
from typing import Any

INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE, 0xC0, 0xC3, 0xED, 0x22, 0x5C, 0x0A, 0x0D)
NON_UTF8 = (b"\xff", b"\xfe\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xc0\xaf")
# digits Python's str.isdigit() (and int(), for some) takes that are not ASCII: superscript,
# circled, Kharoshthi, fullwidth, Arabic-Indic, Devanagari, mathematical
FOREIGN_DIGITS = ("\u00b9", "\u2461", "\U00010a40", "\uff11\uff12", "\u0661\u0662", "\u0967", "\U0001d7d9",
                  "1\u00b2", "\uff10")
# what a schema's lax reading turns into a boolean or number (stored raw once: round 3)
LAX_SCALARS = ("off", "on", "yes", "no", "0", "1", "true", "False", "0.5", " 1 ", "1_0", "+1", "\u0661")
INTERESTING_INTS = (0, -1, 1, 2**7, 2**8, 2**15, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**53 + 1, 2**63, -(2**63),
                    2**64, 10**30)


def mutate_bytes(rng: random.Random, data: bytes, edits: int | None = None) -> bytes:
    """``data`` with a few byte flips, interesting bytes, insertions, deletions, duplicated
    runs or a truncation (the classic dumb-fuzzer moves)."""
    out = bytearray(data)
    for _ in range(edits if edits is not None else rng.randint(1, 4)):
        pos = rng.randrange(len(out) + 1)
        op = rng.choice(("flip", "set", "insert", "delete", "dup", "truncate", "non-utf8"))
        if op == "flip" and pos < len(out):
            out[pos] ^= 1 << rng.randrange(8)
        elif op == "set" and pos < len(out):
            out[pos] = rng.choice(INTERESTING_BYTES)
        elif op == "insert":
            out[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == "delete":
            del out[pos:pos + rng.randint(1, 32)]
        elif op == "dup" and out:
            start = rng.randrange(len(out))
            run = out[start:start + rng.randint(1, 64)]
            out[pos:pos] = run * rng.randint(2, 16)
        elif op == "truncate":
            del out[pos:]
        elif op == "non-utf8":
            out[pos:pos] = rng.choice(NON_UTF8)
    return bytes(out)


def deep_nesting(rng: random.Random) -> bytes:
    """JSON nested far past any recursion limit (closed or not)."""
    depth = rng.choice((100, 1000, 5000, 20000, 100000))
    opener, closer = rng.choice(((b"[", b"]"), (b'{"a":', b"}")))
    tail = closer * depth if rng.random() < 0.7 else b""
    return opener * depth + b"1" + tail


def hostile_value(rng: random.Random, depth: int = 0) -> Any:
    """A JSON value of the kind handlers mishandle: wrong types, edge numbers, odd text."""
    choices = [
        lambda: None, lambda: True, lambda: False, lambda: rng.choice(INTERESTING_INTS),
        lambda: rng.choice((0.0, -0.0, 1e308, -1e308, 5e-324, 1.5, -2.5)),
        lambda: "", lambda: "x" * rng.choice((1, 81, 1000, 70000)),
        lambda: rng.choice(("é", "\u202e", "\ud800", "\x00", "../../etc/passwd", "%00", "\n\r", "null",
                            "<script>", "rtmp://127.0.0.1:6379/x", "file:///etc/passwd", "sk_", "🙂" * 50)),
        lambda: [], lambda: {},
        lambda: rng.choice(FOREIGN_DIGITS), lambda: rng.choice(LAX_SCALARS),
    ]
    if depth < 3:
        choices += [
            lambda: [hostile_value(rng, depth + 1) for _ in range(rng.randint(1, 4))],
            lambda: {rng.choice(("a", "", "face_id", "options", "__proto__")): hostile_value(rng, depth + 1)},
        ]
    return rng.choice(choices)()


def mutate_json(rng: random.Random, value: Any) -> Any:
    """A copy of ``value`` with one node replaced, dropped or joined by an unknown key."""
    if isinstance(value, dict) and value and rng.random() < 0.75:
        out = dict(value)
        key = rng.choice(list(out))
        op = rng.choice(("replace", "replace", "recurse", "drop", "add"))
        if op == "replace":
            out[key] = hostile_value(rng)
        elif op == "recurse":
            out[key] = mutate_json(rng, out[key])
        elif op == "drop":
            del out[key]
        else:
            out[rng.choice(("extra", "", "\u00e9", "face_id ", "a" * 300))] = hostile_value(rng)
        return out
    if isinstance(value, list) and value and rng.random() < 0.75:
        out = list(value)
        index = rng.randrange(len(out))
        out[index] = mutate_json(rng, out[index]) if rng.random() < 0.5 else hostile_value(rng)
        return out
    return hostile_value(rng)


def json_body(rng: random.Random, base: Any) -> bytes:
    """A request body derived from the valid ``base``: tree edits, then sometimes raw
    damage (huge numbers, NaN, deep nesting, non-UTF-8, truncation, another encoding)."""
    roll = rng.random()
    if roll < 0.08:
        return deep_nesting(rng)
    if roll < 0.12:
        return rng.choice((b"1" * 5000, b"1e999999", b"-1e999999", b"NaN", b"[Infinity]", b'{"a":1,"a":2}',
                           b"\xef\xbb\xbf{}", b"", b"{", b'"\\ud800"', b"[" + b"1," * 50000 + b"1]"))
    value = base
    for _ in range(rng.randint(0, 3)):
        value = mutate_json(rng, value)
    text = json.dumps(value, ensure_ascii=rng.random() < 0.5)
    raw = text.encode("utf-8", "surrogatepass")
    if roll < 0.25:
        return mutate_bytes(rng, raw)
    if roll < 0.28:
        return text.encode("utf-16", "surrogatepass")
    return raw
