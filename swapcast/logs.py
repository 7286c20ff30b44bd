"""Process-wide logging: human text on a terminal, or one JSON object per line for log
shippers (Loki, Elasticsearch, Cloud Logging), which parse fields instead of guessing them
from a format string.

A JSON line is ``{"time", "level", "logger", "message", ...extra, "exc"}``: ``time`` is
UTC ISO 8601 with milliseconds, ``extra`` is whatever the call passed with
``log.info(..., extra={"session_id": ...})``, and ``exc`` (only when there is one) is the
formatted traceback, kept inside the one line so an exception never splits a record.

Neither format lets a record's text forge another record (``signaling.log_safety``): a
text line's message has every line-breaking, terminal and bidi control character escaped and
its traceback lines indented, so each line that starts at column 0 is a record's own first
line; a JSON line escapes the separators JSON itself leaves raw (U+2028, U+2029, C1
controls). Both cut swapcast's own secrets (stream keys, play tokens, JWTs) to a hint.

The HTTP access log goes through ``RedactingAccessLogger``: a token in a query string
(the events WebSocket's ``?token=``, since browsers cannot set headers on a WebSocket) or a
signed picture link's ``sig`` is written as ``***``, so the access log never holds a credential.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

from aiohttp.abc import AbstractAccessLogger
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.web_log import AccessLogger

from signaling.log_safety import redact_secrets, safe_line

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"

# attributes every LogRecord has: anything else on a record came from ``extra=``
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}
# what json.dumps leaves raw inside strings although line readers break there or it hides text
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
TRACEBACK_INDENT = "    "


class TextFormatter(logging.Formatter):
    """``logging.Formatter`` whose records stay one line each: the message escaped and
    redacted (``signaling.log_safety.safe_line``), the traceback and stack lines under it
    indented (and escaped), so no text of a record starts a line of its own."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = safe_line(record.getMessage())
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = self.formatMessage(record)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        blocks = [record.exc_text] if record.exc_text else []
        if record.stack_info:
            blocks.append(self.formatStack(record.stack_info))
        for block in blocks:
            text += "".join(f"\n{TRACEBACK_INDENT}{safe_line(line)}" for line in block.splitlines())
        return text


class JsonFormatter(logging.Formatter):
    """One JSON object per record; values JSON cannot hold are written as their ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact_secrets(record.getMessage()),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = redact_secrets(self.formatException(record.exc_info))
        elif record.exc_text:
            entry["exc"] = redact_secrets(record.exc_text)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        line = json.dumps(entry, default=str, ensure_ascii=False)
        return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", line)


def configure_logging(level: int | str = logging.INFO, fmt: LogFormat = "text", stream: TextIO | None = None,
                      *, force: bool = False) -> None:
    """Log ``fmt`` lines to ``stream`` (stderr) from the root logger.

    Like ``logging.basicConfig`` (which it uses), it leaves a root logger that already has
    handlers alone unless ``force``: a host that configured logging itself (pytest, an
    embedding program) keeps its own."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=force)
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, ClientFaultFilter) for f in server_log.filters):
        server_log.addFilter(ClientFaultFilter())


class ClientFaultFilter(logging.Filter):
    """aiohttp logs at ERROR, with a traceback, every request it cannot parse (quoting the
    raw request line or header, credentials in it included) and every client that hangs up
    while its body is being read. Neither is the server's fault, and the first already got
    its 400: one INFO line without the request's bytes is all they should be, or any
    stranger can flood the log with tracebacks and write tokens into it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        if isinstance(exc, HttpProcessingError) and (exc.code or 400) < 500:
            first_line = (exc.message or "").strip().split("\n", 1)[0]
            reason = re.split(r"""[:\s]*b?['"]""", first_line, maxsplit=1)[0][:60]  # never the request's own bytes
            self._quiet(record, "unparsable HTTP request from %s: %s %s", (remote, type(exc).__name__, reason))
        elif isinstance(exc, ConnectionResetError):
            self._quiet(record, "client %s went away during its request", (remote,))
        return True

    @staticmethod
    def _quiet(record: logging.LogRecord, message: str, args: tuple) -> None:
        record.levelno, record.levelname = logging.INFO, "INFO"
        record.msg, record.args = message, args
        record.exc_info, record.exc_text = None, None


SECRET_QUERY_PARAMETERS = frozenset({"token", "access_token", "sig"})


class RedactingAccessLogger(AbstractAccessLogger):
    """aiohttp's access log (same format, same logger) with credentials in query strings
    replaced by ``***``. Pass it as ``web.run_app(..., access_log_class=...)``."""

    def __init__(self, logger: logging.Logger, log_format: str) -> None:
        super().__init__(logger, log_format)
        self._inner = AccessLogger(logger, log_format)

    @property
    def enabled(self) -> bool:
        return self._inner.enabled

    def log(self, request, response, time: float) -> None:
        if request is not None and not SECRET_QUERY_PARAMETERS.isdisjoint(request.query):
            request = _RedactedRequest(request)
        self._inner.log(request, response, time)


class _RedactedRequest:
    """A read-only stand-in for a request whose URL has its secret parameters masked; the
    access log reads ``path_qs`` (``%r``) and the rest as it is."""

    def __init__(self, request) -> None:
        self._request = request
        masked = [(k, "***" if k in SECRET_QUERY_PARAMETERS else v) for k, v in request.query.items()]
        self.rel_url = request.rel_url.with_query(masked)
        self.path_qs = str(self.rel_url)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)
