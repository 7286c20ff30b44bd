"""The import rule docs/architecture.md states, checked on the code: gpu/ imports none of
the other planes; signaling/ outside the gateway takes only the base error from gpu/ and
nothing of streamer/."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLANES = ("gpu", "streamer", "signaling", "swapcast", "web")


def imports(folder: str) -> list[tuple[Path, str]]:
    """(file, imported module) of every absolute import of another plane under ``folder``."""
    found = []
    for path in sorted((REPO / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
            found += [(path.relative_to(REPO), name) for name in names
                      if name.split(".")[0] in PLANES and name.split(".")[0] != folder]
    return found


def test_the_compute_plane_imports_no_other_plane():
    assert imports("gpu") == []


def test_the_control_plane_outside_the_gateway_takes_only_the_base_error_from_the_compute_plane():
    outside = [(path, name) for path, name in imports("signaling") if path.parts[1] != "gateway"]
    assert outside, "signaling/ imports gpu.errors somewhere"
    assert {name for _, name in outside} == {"gpu.errors"}, outside
