"""``docs/reference/metrics.md``: every Prometheus metric a node and a gateway serve at
``/metrics``, with its type and labels, read from their collectors (``streamer.metrics``).

The collectors are built with stand-in sources that have something to report everywhere
(a swap batcher, a tracking batcher, a model server), so every family a scrape can hold is
listed, not only those a quiet node shows."""

from __future__ import annotations

import asyncio
import typing
from collections.abc import Iterator
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from swapcast.docs_reference.markdown import code, prose, table

_EXPOSED_SUFFIX = {"counter": "_total", "histogram": "", "gauge": "", "summary": "", "info": "_info"}


def _batcher_numbers() -> dict[str, Any]:
    """What ``MicroBatcher.metrics`` reports, with a value for every key the node reads."""
    return {"batch_size_histogram": {1: 1}, "batches": 1, "rows": 1, "rows_failed": 0, "rejected_rows": 0,
            "queued_rows": 0, "in_flight": 0, "device_busy_pct": 0.0,
            "queue_delay_p50_ms": 0.0, "queue_delay_p99_ms": 0.0}


def _model_server_numbers() -> dict[str, Any]:
    """What ``TritonRunner.statistics`` reports."""
    return {"model": "mesh3d_swap", "requests": 1, "executions": 1, "queue_ms_mean": 0.0, "compute_ms_mean": 0.0,
            "batch_sizes": {1: 1}}


def families(metrics: Any) -> Iterator[tuple[str, str, str, list[str]]]:
    """(exposed name, type, help, label names) of every family ``metrics`` serves."""
    asyncio.run(metrics.refresh())
    wrappers = {w.describe()[0].name: w for w in vars(metrics).values() if isinstance(w, MetricWrapperBase)}
    for family in metrics.registry.collect():
        if family.name in wrappers:
            labels = list(wrappers[family.name]._labelnames)  # prometheus_client keeps them here, unobserved too
        else:
            labels = []
            for sample in family.samples:
                labels += [name for name in sample.labels if name != "le" and name not in labels]
        yield family.name + _EXPOSED_SUFFIX.get(family.type, ""), family.type, family.documentation, labels


def node_metrics() -> Any:
    from streamer.metrics import NodeMetrics

    async def no_sessions() -> list[dict[str, Any]]:
        return []

    return NodeMetrics(no_sessions, _batcher_numbers, content_refusals=dict,
                       runner_statistics=_model_server_numbers,
                       tracking_metrics=lambda: {"landmarks": _batcher_numbers()})


def gateway_metrics() -> Any:
    from signaling.registry.memory import MemoryRegistry
    from streamer.metrics import GatewayMetrics

    return GatewayMetrics(MemoryRegistry())


def _section(title: str, metrics: Any) -> list[str]:
    rows = [[code(name), kind, ", ".join(code(label) for label in labels), prose(documentation)]
            for name, kind, documentation, labels in sorted(families(metrics))]
    return [f"## {title}", "", table(["Metric", "Type", "Labels", "Meaning"], rows), ""]


def _label_values() -> str:
    from gpu.tracking.graphs import MODEL_FILES
    from signaling.registry.base import NodeState, SessionState
    from streamer.metrics import PROTOCOLS, SWAP_STAGES

    values = [
        ("protocol", ", ".join(code(p) for p in PROTOCOLS)),
        ("stage", ", ".join(code(s) for s in SWAP_STAGES) + f", and {code('total')} (their sum)"),
        ("direction", f"{code('in')}, {code('out')}"),
        ("model", "the tracking graph (" + ", ".join(code(m) for m in sorted(MODEL_FILES))
         + ") or, on the model server's metrics, the served model"),
        ("kind", f"{code('http_<status>')} (every 4xx and 5xx answer), {code('swap')}, {code('decode')}"),
        ("where", f"{code('source')} (a photo being registered), {code('frame')} (a sampled stream or job frame)"),
        ("state", "sessions: " + ", ".join(code(v) for v in typing.get_args(SessionState))
         + "; nodes: " + ", ".join(code(v) for v in typing.get_args(NodeState))),
    ]
    return table(["Label", "Values"], [[code(name), text] for name, text in values])


def render() -> str:
    out = [
        "# Metrics",
        "",
        f"What a node and a gateway serve at {code('GET /metrics')} (Prometheus text, or OpenMetrics when the "
        "scraper asks for it; no token needed). A histogram also has its "
        f"{code('_bucket')}, {code('_sum')} and {code('_count')} series. What to alert on, and a Grafana "
        "dashboard built on these: [Monitoring](../operations/monitoring.md).",
        "",
        "The swap's own batcher is unlabelled; the tracking graphs' batchers carry their `model`. The "
        "batcher families appear after the first swap, the model server's only with `engine.runner: triton`.",
        "",
        _label_values(),
        "",
    ]
    out += _section("Node", node_metrics())
    out += _section("Gateway", gateway_metrics())
    return "\n".join(out).rstrip() + "\n"
