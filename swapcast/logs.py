"""Process-wide logging: human text on a terminal, or one JSON object per line for log
shippers (Loki, Elasticsearch, Cloud Logging), which parse fields instead of guessing them
from a format string.

A JSON line is ``{"time", "level", "logger", "message", ...extra, "exc"}``: ``time`` is
UTC ISO 8601 with milliseconds, ``extra`` is whatever the call passed with
``log.info(..., extra={"session_id": ...})``, and ``exc`` (only when there is one) is the
formatted traceback, kept inside the one line so an exception never splits a record.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(levelname)s %(name)s: %(message)s"

# attributes every LogRecord has: anything else on a record came from ``extra=``
_STANDARD = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record; values JSON cannot hold are written as their ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure_logging(level: int | str = logging.INFO, fmt: LogFormat = "text", stream: TextIO | None = None,
                      *, force: bool = False) -> None:
    """Log ``fmt`` lines to ``stream`` (stderr) from the root logger.

    Like ``logging.basicConfig`` (which it uses), it leaves a root logger that already has
    handlers alone unless ``force``: a host that configured logging itself (pytest, an
    embedding program) keeps its own."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', not {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=force)
