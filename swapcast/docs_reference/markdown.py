"""Small Markdown helpers for the generated reference pages: text from docstrings and help
strings made safe for a table cell, code spans, and tables."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence

_CODE_SPAN = re.compile(r"(``?)(.+?)\1")
_SPECIAL = re.compile(r"([\\*_<>|\[\]])")


def code(text: object) -> str:
    """``text`` as one inline code span (a table-safe one: pipes escaped)."""
    value = str(text).replace("|", "\\|")
    fence = "``" if "`" in value else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def prose(text: str | None) -> str:
    """A docstring or help string as one Markdown paragraph for a table cell: reST's
    ``double backticks`` become code spans, everything outside code spans is escaped (a
    ``<stream key>`` would otherwise vanish as an HTML tag, a ``*`` start emphasis, a ``|``
    end the cell), and lines are joined."""
    if not text:
        return ""
    flat = " ".join(inspect.cleandoc(text).split())
    parts: list[str] = []
    last = 0
    for match in _CODE_SPAN.finditer(flat):
        parts.append(_SPECIAL.sub(r"\\\1", flat[last:match.start()]))
        parts.append(code(match.group(2)))
        last = match.end()
    parts.append(_SPECIAL.sub(r"\\\1", flat[last:]))
    return "".join(parts)


def paragraphs(text: str | None) -> str:
    """A docstring as Markdown paragraphs (blank lines kept, each paragraph through ``prose``);
    a reST ``::`` literal block becomes a fenced block."""
    if not text:
        return ""
    blocks = inspect.cleandoc(text).split("\n\n")
    out: list[str] = []
    literal_next = False
    for block in blocks:
        if literal_next:
            out.append("```\n" + inspect.cleandoc(block) + "\n```")
            literal_next = False
            continue
        literal_next = block.rstrip().endswith("::")
        lines = block.splitlines()
        if all(line.lstrip().startswith(("- ", "  ")) for line in lines) and lines[0].lstrip().startswith("- "):
            items = "\n".join(lines).split("\n- ")
            out.append("\n".join("- " + prose(item.lstrip("- ")) for item in items))
        else:
            out.append(prose(block.rstrip(":") + (":" if literal_next else "")))
    return "\n\n".join(out)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table; cells are already Markdown (see ``prose`` and ``code``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def anchor(text: str) -> str:
    """The id MkDocs' toc extension gives a heading with this text (its default slugify)."""
    slug = re.sub(r"[^\w\s-]", "", text.strip().lower())
    return re.sub(r"[-\s]+", "-", slug).strip("-")
