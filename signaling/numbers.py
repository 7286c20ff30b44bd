"""The one parser of the integers a client or an operator writes: query parameters, headers
(``Range``, a signed link's ``expires``), form fields, the environment and config files.

Python's ``int()`` is no such parser. ``'²'``, ``'①'`` and ``'𐩀'`` pass ``str.isdigit()``
and then make ``int()`` raise (a 500 where the client deserved a 400), while fullwidth
``'１２'`` and Arabic-Indic ``'١٢'`` parse as 12: a number nobody wrote in ASCII, seen
differently by every check written for ASCII (a regex, a cache key, a log reader).
``int()`` also takes ``' 12'``, ``'+12'``, ``'1_2'`` and thousands of digits (quadratic to
convert). Here a number is 1 to ``MAX_DIGITS`` ASCII digits, nothing else.
"""

from __future__ import annotations

import re

from gpu.errors import SwapcastError

MAX_DIGITS = 18  # below 2**63: every count, size, port and unix time fits
_ASCII_NUMBER = re.compile(r"[0-9]{1,%d}" % MAX_DIGITS)


class NumberError(SwapcastError, ValueError):
    """Text that is not a number this parser takes; a ``ValueError`` too, so schema
    validators (pydantic) report it like their own. ``status`` 400 for the HTTP layer."""

    status = 400

    @property
    def reason(self) -> str:
        return str(self)


def is_ascii_number(text: str) -> bool:
    """1 to ``MAX_DIGITS`` ASCII digits and nothing else (no sign, space or underscore)."""
    return _ASCII_NUMBER.fullmatch(text) is not None


def parse_natural(text: object, what: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """``text`` as a whole number from ``minimum`` to ``maximum``; ``NumberError`` naming
    ``what`` otherwise (the text itself is not echoed: it may be anything)."""
    if not isinstance(text, str) or not is_ascii_number(text):
        raise NumberError(f"{what} must be a whole number written in ASCII digits 0-9")
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"{minimum}..{maximum}" if maximum is not None else f"at least {minimum}"
        raise NumberError(f"{what} must be {bounds}")
    return value


def has_foreign_digits(text: str) -> bool:
    """Whether ``text`` holds a digit that is not ASCII (``'٣'``, ``'１'``, ``'²'``): text
    a third-party parser reads numbers out of (an SDP offer) is refused with one."""
    return not text.isascii() and any(c.isdigit() and not c.isascii() for c in text)
