"""Reading what an HTTP client sent, with one answer for anything unreadable: 400 and a reason.

``read_json`` is the one way a route reads a JSON body (every API route uses it), so bad
UTF-8, bad JSON and JSON nested past what the parser can walk are refused alike, before a
handler sees them. ``bad_input_middleware`` is the safety net under every route: a parse
error that escaped a handler's own checks (``UnicodeError``, ``RecursionError``) is still
the client's input, so it answers 400 — and is logged with its traceback, since it also
means a check is missing where it was raised.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Awaitable, Callable

from aiohttp import web

from gpu.errors import SwapcastError
from signaling.log_safety import quoted

log = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class BadInput(SwapcastError):
    """A request body or field the server cannot read (HTTP 400); the message says why."""

    status = 400

    @property
    def reason(self) -> str:
        return str(self)


# invisible or layout-breaking: controls, surrogates, line and paragraph separators, and the
# format characters that reorder or hide text (bidi embeddings, overrides, isolates; marks)
_NOT_IN_NAMES = frozenset("\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2060\u2066\u2067\u2068\u2069\ufeff")


def display_name(value: object, what: str, max_chars: int) -> str:
    """A name a user gives something (a stream key, a face), trimmed: what is checked here is
    what is stored and shown. ``BadInput`` when it is no string, empty, longer than
    ``max_chars`` or holds a character that breaks or disguises a line."""
    if not isinstance(value, str):
        raise BadInput(f"{what} must be a string")
    name = value.strip()
    if not name:
        raise BadInput(f"{what} must not be empty")
    if len(name) > max_chars:
        raise BadInput(f"{what} is {len(name)} characters long; the limit is {max_chars}")
    bad = next((c for c in name if unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or c in _NOT_IN_NAMES), None)
    if bad is not None:
        raise BadInput(f"{what} must not contain control characters (found U+{ord(bad):04X})")
    return name


async def read_json(request: web.Request) -> object:
    """The request's JSON body; ``BadInput`` when it is not UTF-8, not JSON, nested too
    deeply to parse (the parser's recursion limit: no real request comes near it), or holds
    a string that is not text (a lone surrogate escape)."""
    try:
        text = (await request.read()).decode("utf-8")  # whatever charset the header claims
    except UnicodeDecodeError:
        raise BadInput("the body must be JSON (UTF-8)") from None
    try:
        body = json.loads(text)
    except RecursionError:
        raise BadInput("the JSON body is nested too deeply") from None
    except ValueError:
        raise BadInput("the body must be JSON") from None
    try:  # "\ud800" is valid JSON but no text: it would fail later, wherever a string is encoded
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except RecursionError:
        raise BadInput("the JSON body is nested too deeply") from None
    except UnicodeEncodeError:
        raise BadInput("the JSON body holds a lone surrogate escape (\\ud800-\\udfff), which is not text") from None
    return body


async def read_json_object(request: web.Request, fields: str) -> dict:
    """``read_json``, which must be an object; ``fields`` describes it in the refusal."""
    body = await read_json(request)
    if not isinstance(body, dict):
        raise BadInput(f"expected a JSON object {fields}")
    return body


@web.middleware
async def bad_input_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """``BadInput`` and parse errors no handler caught -> 400 JSON ``{"error": reason}``.
    Anything else keeps its course (a bug stays a 500 with its traceback in the log)."""
    try:
        return await handler(request)
    except BadInput as exc:
        return web.json_response({"error": exc.reason}, status=400)
    except (UnicodeError, RecursionError) as exc:
        log.warning("%s %s: unreadable input reached the handler (answered 400)", request.method, quoted(request.path),
                    exc_info=True)
        reason = "the request nests too deeply" if isinstance(exc, RecursionError) else "the request is not valid UTF-8"
        return web.json_response({"error": reason}, status=400)
