"""The reference pages of the docs site, generated from the code so they cannot drift.

- ``reference/config.md``: every config key (the schema, ``configs/default.yaml``'s comments);
- ``reference/cli.md``: every command and flag (the argument parsers);
- ``reference/api.md``: the HTTP API (the OpenAPI document the node serves);
- ``reference/metrics.md``: every Prometheus metric with its labels (the collectors).

``scripts/docs generate`` (``python -m swapcast.docs_reference``) rewrites them, and
``tests/test_docs_reference.py`` fails when one differs from what the code generates. Pages
are deterministic (code order or sorted, no dates) so a regeneration only shows real changes.
Importing this loads no model: the page builders import the schema, the parsers and the
collectors, never the engine."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REGENERATE = "scripts/docs generate"
DOCS_DIR = Path(__file__).resolve().parents[2] / "docs"


def _builders() -> dict[str, Callable[[], str]]:
    from swapcast.docs_reference import api_page, cli_page, config_page, metrics_page

    return {"reference/config.md": config_page.render, "reference/cli.md": cli_page.render,
            "reference/api.md": api_page.render, "reference/metrics.md": metrics_page.render}


NOTICE = ("<!-- Generated from the code by `{command}`: edit the code (or configs/default.yaml's comments), "
          "not this file. -->\n")


def pages() -> dict[str, str]:
    """Each generated page's path under docs/ and its text."""
    return {path: NOTICE.format(command=REGENERATE) + build() for path, build in _builders().items()}


def stale(docs_dir: Path = DOCS_DIR) -> list[str]:
    """The generated pages whose file under ``docs_dir`` is missing or differs from the code's."""
    found = []
    for path, text in pages().items():
        target = docs_dir / path
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            found.append(path)
    return found


def write(docs_dir: Path = DOCS_DIR) -> list[str]:
    """Write every generated page; the paths that changed."""
    changed = []
    for path, text in pages().items():
        target = docs_dir / path
        if target.is_file() and target.read_text(encoding="utf-8") == text:
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        changed.append(path)
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m swapcast.docs_reference",
                                     description="Regenerate the docs' reference pages from the code.")
    parser.add_argument("--check", action="store_true", help="only report stale pages (exit 1 if any)")
    parser.add_argument("--docs-dir", type=Path, default=DOCS_DIR, help="the docs folder (default: the repository's)")
    args = parser.parse_args(argv)
    if args.check:
        found = stale(args.docs_dir)
        for path in found:
            print(f"stale: docs/{path} (run {REGENERATE})")
        return 1 if found else 0
    changed = write(args.docs_dir)
    print("\n".join(f"wrote docs/{path}" for path in changed) or "reference pages already current")
    return 0


if __name__ == "__main__":
    sys.exit(main())
