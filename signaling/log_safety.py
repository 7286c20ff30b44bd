"""Writing what clients chose into the operator's log without letting it forge lines or
leak secrets.

A key's name, an RTMP app or stream name, a path, a user agent: each is the client's text.
Written raw, a name holding ``\\n`` starts a line of its own that reads like any record
(``ERROR signaling.auth.middleware: ...``), a carriage return or an ANSI escape rewrites
what a terminal shows, and a bidi override reorders it. ``escape`` writes every such
character as a visible escape; the log formatters (``swapcast.logs``) apply it to every
record's message, and ``quoted`` is for call sites that show a client's text, so it also
reads as quoted. ``redact_secrets`` is the last net under the call sites that already log
only a key's first characters (``key_hint``): swapcast's own stream keys, play tokens and
JWTs never reach a log line whole, whatever logged them.
"""

from __future__ import annotations

import re

# C0 and C1 controls and DEL, Unicode's line and paragraph separators (Python's
# str.splitlines() and many viewers break lines there), and the invisible format
# characters that reorder or hide text (bidi embeddings, overrides and isolates; marks).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
HINT_CHARS = 6  # of a stream key shown in the log: enough to tell two keys apart, nothing to publish with

# what the node issues: stream keys (sk_ + 32 base64url), play tokens (pt_ + 32 hex), JWTs
_SECRETS = re.compile(r"\b(sk_|pt_)([A-Za-z0-9_-]{3})[A-Za-z0-9_-]{5,}|\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")


def escape(text: str) -> str:
    """``text`` with every character that could break, rewrite or reorder a log line
    written as ``\\n``, ``\\x1b``, ``\\u2028``, ...; anything else as it is."""
    return _UNSAFE.sub(_escape_one, text)


def _escape_one(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    return f"\\x{ord(char):02x}" if ord(char) <= 0xFF else f"\\u{ord(char):04x}"


def quoted(value: object, limit: int = 80) -> str:
    """A client's text for a log line: secrets cut to hints, escaped, at most ``limit``
    characters, in quotes."""
    text = redact_secrets(str(value))
    cut = text[:limit] + "…" if len(text) > limit else text
    return '"' + escape(cut).replace('"', '\\"') + '"'


def key_hint(key: str) -> str:
    """What the log shows of a stream key, a play token or any name that may be one: its
    first ``HINT_CHARS`` characters, escaped, and an ellipsis."""
    return escape(key[:HINT_CHARS]) + "…"


def redact_secrets(text: str) -> str:
    """``text`` with every stream key, play token and JWT in it cut to a hint."""
    return _SECRETS.sub(lambda m: f"{m.group(1)}{m.group(2)}…" if m.group(1) else "eyJ…(a token)", text)


def safe_line(text: str) -> str:
    """Redacted, then escaped (an escape must not glue a key to the text before it):
    what a log formatter writes for a record's message."""
    return escape(redact_secrets(text))
