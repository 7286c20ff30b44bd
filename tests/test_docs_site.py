"""The docs site builds with ``mkdocs build --strict`` (a broken link, a missing anchor or a
page left out of the nav fails), without fetching anything; the README stays a short door
into it from which every page is two clicks away; its pictures come from tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def nav_pages(entries) -> list[str]:
    pages = []
    for entry in entries:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def links(text: str) -> list[str]:
    return [target.split("#")[0] for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


def test_the_site_builds_strict_and_offline(tmp_path):
    import mkdocs  # noqa: F401 - installed by scripts/bootstrap (the test extra); a missing one fails here

    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=REPO,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    index = (site / "index.html").read_text()
    assert "swapcast" in index and "fonts.googleapis.com" not in index  # no web fonts: it works offline
    for page in nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]):
        built = site / (page[:-3] + "/index.html" if page != "index.md" else "index.html")
        assert built.is_file(), page


def test_every_markdown_file_is_in_the_nav():
    nav = set(nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]))
    on_disk = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert on_disk == nav, f"not in mkdocs.yml's nav: {sorted(on_disk - nav)}; missing files: {sorted(nav - on_disk)}"


def test_readme_is_short_and_its_links_resolve():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", readme), "no dates in the README"
    assert "load average" not in readme and "->" not in readme, "no measurement histories in the README"
    for target in links(readme):
        assert (REPO / target).exists(), f"README links to a missing file: {target}"
    for command in ("scripts/serve", "scripts/test"):
        assert f"{command}  " in readme and (REPO / command).is_file()


def test_every_page_is_two_clicks_from_the_readme():
    """The README links to the docs' home and the guides; the home links to every page."""
    nav = nav_pages(yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"])
    from_readme = {str(Path(target).relative_to("docs")) for target in links((REPO / "README.md").read_text())
                   if target.startswith("docs/") and target.endswith(".md")}
    from_home = {target for target in links((DOCS / "index.md").read_text()) if target.endswith(".md")}
    assert "index.md" in from_readme
    assert {page for page in nav if page.startswith(("guides/", "getting-started/"))} <= from_readme
    unreachable = [page for page in nav if page not in from_readme | from_home | {"index.md"}]
    assert not unreachable, f"pages more than two clicks from the README: {unreachable}"


def test_pictures_exist_and_come_from_tests():
    """Every picture a page shows is in docs/screenshots/ and is written by a test
    (SWAPCAST_SCREENSHOTS=docs/screenshots), not drawn by hand."""
    tests = "\n".join(path.read_text() for path in (REPO / "tests").rglob("*.py"))
    shown = set()
    for page in [REPO / "README.md", *DOCS.rglob("*.md")]:
        for target in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", page.read_text()):
            picture = (page.parent / target).resolve()
            assert picture.is_file(), (page, target)
            shown.add(picture.name)
    assert shown
    for name in sorted(shown):
        assert f'"{name}"' in tests, f"{name} is not written by any test"
