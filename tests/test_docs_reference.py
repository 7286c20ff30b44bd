"""The generated reference pages (swapcast.docs_reference) match the code, say what every
config key means, list every metric the code defines, and the Grafana dashboard queries
only metrics that exist. A failure here names the command that fixes it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from swapcast import docs_reference
from swapcast.docs_reference import cli_page, config_page, metrics_page

REPO = Path(__file__).resolve().parents[1]
FIX = f"run `{docs_reference.REGENERATE}` and commit docs/reference/"


def test_generated_reference_pages_are_current():
    stale = docs_reference.stale(REPO / "docs")
    assert not stale, f"stale generated pages: {', '.join('docs/' + p for p in stale)}; {FIX}"


def test_generation_is_deterministic_and_writes_only_what_changed(tmp_path, monkeypatch):
    first = docs_reference.pages()
    monkeypatch.setenv("SWAPCAST_TOKEN", "a-token-that-must-not-show")  # a default read from the environment
    assert docs_reference.pages() == first
    assert sorted(docs_reference.write(tmp_path)) == sorted(first)
    assert docs_reference.write(tmp_path) == []
    assert docs_reference.stale(tmp_path) == []
    (tmp_path / "reference" / "cli.md").write_text("old\n")
    assert docs_reference.stale(tmp_path) == ["reference/cli.md"]
    assert docs_reference.main(["--check", "--docs-dir", str(tmp_path)]) == 1


def test_every_config_key_is_on_the_page_with_a_meaning():
    undocumented = config_page.undocumented_keys()
    assert not undocumented, (f"config keys with no meaning: {', '.join(undocumented)}: give the Field a description= "
                              f"in swapcast/config.py or a comment beside the key in configs/default.yaml; then {FIX}")
    page = config_page.render()
    for section, model in config_page.sections():
        assert f"\n## {section}\n" in page
        rows = page.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
        for key, _ in config_page.keys(model, section):
            assert f"| `{key.rsplit('.', 1)[-1]}` |" in rows, key


def test_yaml_comments_follow_keys_and_their_continuation_lines():
    text = "a:            # section\n  b: 1        # first\n               # and more\n  c: x  # the c\n\nd: 2\n"
    assert config_page.yaml_comments(text) == {"a": "section", "a.b": "first and more", "a.c": "the c"}


def test_every_command_and_flag_is_on_the_cli_page():
    from swapcast.cli import build_parser

    page = cli_page.render()
    for words, _, parser in cli_page.commands(build_parser()):
        assert f" {' '.join(words)}\n" in page, words
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}`" in page, (words, flag)


def test_every_metric_name_in_the_code_is_on_the_metrics_page():
    """Metric names written in streamer/metrics.py (whole, or the prefix of a family made
    from it) each appear on the page: a new family whose source the generator does not feed
    fails here rather than go missing from the docs."""
    page = metrics_page.render()
    documented = set(re.findall(r"`(swapcast_\w+)`", page))
    source = (REPO / "streamer" / "metrics.py").read_text()
    written = set(re.findall(r'"(swapcast_\w+)"', source)) | set(re.findall(r'f"(swapcast_\w+)', source))
    written -= set(re.findall(r'RequestKey\("(swapcast_\w+)"', source))  # a request's key, not a metric
    missing = [name for name in sorted(written) if not any(d.startswith(name) for d in documented)]
    assert not missing, f"metrics the code defines but the page lacks: {missing}; feed them in swapcast/docs_reference/metrics_page.py"
    for name in ("swapcast_http_requests_total", "swapcast_stage_seconds", "swapcast_gateway_nodes"):
        assert f"`{name}`" in page
    assert "| `swapcast_http_requests_total` | counter | `method`, `route`, `status` |" in page


def test_the_api_page_has_every_operation_of_the_openapi_document():
    from signaling.openapi import openapi_document

    page = (REPO / "docs" / "reference" / "api.md").read_text()
    document = openapi_document(gateway=False)
    for path, operations in document["paths"].items():
        for method in operations:
            if method in ("get", "post", "put", "patch", "delete"):
                assert f"\n### {method.upper()} {path}\n" in page, (method, path)
    for name in document["components"]["schemas"]:
        assert f"\n### {name}\n" in page, name


def test_grafana_dashboard_queries_only_metrics_that_exist():
    dashboard = json.loads((REPO / "configs" / "grafana-dashboard.json").read_text())
    exposed = {name for metrics in (metrics_page.node_metrics(), metrics_page.gateway_metrics())
               for name, kind, _, _ in metrics_page.families(metrics)
               for name in ([name, f"{name}_bucket", f"{name}_sum", f"{name}_count"] if kind == "histogram" else [name])}
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(queries) >= 10
    used = {name for query in queries for name in re.findall(r"\b(swapcast_\w+)", query)}
    assert used and used <= exposed, f"the dashboard queries metrics no collector serves: {sorted(used - exposed)}"
