"""Prometheus metrics of a node (and of the gateway), served at ``GET /metrics``.

Each app owns a ``CollectorRegistry`` rather than the process-wide default, so tests that
run several nodes (or a node and a gateway) in one process keep their numbers apart.

Two kinds of numbers:

- **Per frame**, observed where a stream records its output frame (``LiveStats.record_output``
  calls the :class:`StreamObserver` the node gave it): stage latencies, frames in / out /
  dropped, swap and decode errors. A stream's input-side counters (frames in, dropped,
  errors) are read from its ``LiveStats`` at that moment and added as deltas, so they need
  no hook of their own; what arrives after a stream's last output frame is not counted.
- **At scrape time** (a custom collector fed by one ``await`` before each scrape): sessions
  by protocol and state, summed fps, and the face engine's batcher numbers, which are
  already aggregated by their owners.

Node metrics (label values: protocol webrtc | whip | rtmp; stage track | identity | prepare
| run | paste | total, where total is the sum of the five swap stages):

    swapcast_stage_seconds{stage,protocol}            histogram, per output frame that was swapped
    swapcast_frame_latency_seconds{protocol}          histogram, frame arrival -> swapped frame out
    swapcast_frames_in_total / _out_total / _dropped_total / _unswapped_total{protocol}
    swapcast_fps{protocol,direction=in|out}           gauge, summed over the node's sessions
    swapcast_sessions{protocol,state}                 gauge (the HPA's per-pod metric)
    swapcast_batch_size                               histogram of the batcher's batch sizes
    swapcast_batch_queue_delay_seconds{quantile}      gauge, p50 / p99 of recent rows
    swapcast_batch_rows_total, _rows_failed_total, _rows_rejected_total, swapcast_batches_total
    swapcast_batch_queued_rows, swapcast_batch_in_flight, swapcast_device_busy_ratio
    swapcast_tracking_batch_*{model}, swapcast_tracking_batches_total{model},
    swapcast_tracking_busy_ratio{model}               the same for the tracking graphs' batchers
                                                      (model: landmarks | short | full), once a
                                                      graphs tracker made them
    swapcast_errors_total{kind}                       kind: http_<status> (4xx/5xx answers), swap, decode
    swapcast_http_requests_total{method,route,status}, swapcast_http_request_seconds{method,route}

The gateway adds ``swapcast_gateway_placement_seconds{protocol}`` (request arrival until a
node is placed for the new session), ``swapcast_gateway_nodes{state}``,
``swapcast_gateway_sessions{protocol,state}`` (the registry's view of the whole cluster,
named apart from the nodes' ``swapcast_sessions`` so sums over all targets do not double
count) and ``swapcast_gateway_registry_up``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Protocol

from aiohttp import hdrs, web
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder

from signaling.registry import Registry, RegistryUnavailable
from streamer.pipeline.frame_swapper import StageTimes

PROTOCOLS = ("webrtc", "whip", "rtmp")
SWAP_STAGES = ("track", "identity", "prepare", "run", "paste", "enhance")
# a frame at 30 fps has 33 ms; the buckets resolve sub-millisecond stages up to stalls
STAGE_BUCKETS = (0.0005, 0.001, 0.002, 0.004, 0.008, 0.012, 0.016, 0.025, 0.033, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
HTTP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
_STARTED = web.RequestKey("swapcast_metrics_started", float)


class StreamStats(Protocol):
    """What a :class:`StreamObserver` reads from a stream's ``LiveStats``."""

    frames_in: int
    frames_dropped: int
    decode_errors: int
    swap_errors: int


class HttpMetrics:
    """Requests and error answers of one aiohttp app, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("swapcast_http_requests", "HTTP responses by method, route and status",
                                ["method", "route", "status"], registry=self.registry)
        self.request_seconds = Histogram("swapcast_http_request_seconds", "Request arrival until response headers",
                                         ["method", "route"], buckets=HTTP_BUCKETS, registry=self.registry)
        self.errors = Counter("swapcast_errors", "Errors by kind: http_<status> answers, swap, decode",
                              ["kind"], registry=self.registry)

    async def refresh(self) -> None:
        """Gather what needs awaiting before a scrape (nothing here)."""

    def observe_response(self, request: web.Request, response: web.StreamResponse) -> None:
        """Count one response (every response passes here, including the ones aiohttp or a
        middleware made from an exception). A WebSocket's time is its lifetime: not timed."""
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "unmatched"
        method = request.method if request.method in hdrs.METH_ALL else "other"  # clients may invent methods
        self.requests.labels(method, route, str(response.status)).inc()
        started = request.get(_STARTED)
        if started is not None and response.status != 101:
            self.request_seconds.labels(method, route).observe(time.perf_counter() - started)
        if response.status >= 400:
            self.errors.labels(f"http_{response.status}").inc()

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition (Prometheus text, or OpenMetrics when the scraper asks for it)."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type


class NodeMetrics(HttpMetrics):
    """A node's metrics. ``sessions`` lists the node's sessions as the API describes them
    (``protocol``, ``state``, ``stats`` with ``fps_in``/``fps_out``); ``batch_metrics`` is
    ``FaceEngine.batch_metrics``, ``tracking_metrics`` ``FaceEngine.tracking_metrics``; ``content_refusals`` counts the content gate's refusals by
    where (``Processors.refusals``); ``runner_statistics`` is ``FaceEngine.runner_statistics``
    (a model server's own numbers, fetched over the network: read in a thread at refresh)."""

    def __init__(self, sessions: Callable[[], Awaitable[list[dict[str, Any]]]],
                 batch_metrics: Callable[[], Mapping[str, Any] | None],
                 content_refusals: Callable[[], Mapping[str, int]] = dict,
                 runner_statistics: Callable[[], Mapping[str, Any] | None] | None = None,
                 tracking_metrics: Callable[[], Mapping[str, Mapping[str, Any]] | None] = lambda: None) -> None:
        super().__init__()
        self._list_sessions = sessions
        self._batch_metrics = batch_metrics
        self._tracking_metrics = tracking_metrics
        self._content_refusals = content_refusals
        self._runner_statistics = runner_statistics
        self._runner_numbers: Mapping[str, Any] | None = None
        self._sessions: list[dict[str, Any]] = []
        r = self.registry
        self.stage_seconds = Histogram("swapcast_stage_seconds", "Per-stage time of each swapped frame",
                                       ["stage", "protocol"], buckets=STAGE_BUCKETS, registry=r)
        self.frame_latency = Histogram("swapcast_frame_latency_seconds", "Frame arrival until its swapped frame is out",
                                       ["protocol"], buckets=STAGE_BUCKETS, registry=r)
        self.frames_in = Counter("swapcast_frames_in", "Decoded input frames", ["protocol"], registry=r)
        self.frames_out = Counter("swapcast_frames_out", "Frames sent on (swapped or not)", ["protocol"], registry=r)
        self.frames_dropped = Counter("swapcast_frames_dropped", "Input frames skipped: a newer one arrived first",
                                      ["protocol"], registry=r)
        self.frames_unswapped = Counter("swapcast_frames_unswapped",
                                        "Frames sent unswapped because the batcher was saturated", ["protocol"], registry=r)
        for protocol in PROTOCOLS:  # present from the start, so rate() sees the first frames
            for family in (self.frames_in, self.frames_out, self.frames_dropped, self.frames_unswapped):
                family.labels(protocol)
        r.register(self)  # collect(): the scrape-time gauges

    def stream_observer(self, protocol: str) -> StreamObserver:
        """The observer a new stream of ``protocol`` reports its output frames to."""
        return StreamObserver(self, protocol)

    async def refresh(self) -> None:
        self._sessions = await self._list_sessions()
        if self._runner_statistics is not None:
            self._runner_numbers = await asyncio.to_thread(self._runner_statistics)

    def collect(self) -> Iterable[Metric]:
        """Scrape-time gauges, from what ``refresh`` gathered."""
        yield _sessions_gauge("swapcast_sessions", "Sessions of this node by protocol and state", self._sessions)
        fps = GaugeMetricFamily("swapcast_fps", "Frames per second summed over the node's sessions",
                                labels=["protocol", "direction"])
        for protocol in PROTOCOLS:
            mine = [s.get("stats") or {} for s in self._sessions if s.get("protocol") == protocol]
            for direction in ("in", "out"):
                fps.add_metric([protocol, direction], sum(float(stats.get(f"fps_{direction}") or 0.0) for stats in mine))
        yield fps
        swap = self._batch_metrics()
        yield from _batcher_metrics({(): swap} if swap is not None else {})
        tracking = self._tracking_metrics() or {}
        yield from _batcher_metrics({(model,): numbers for model, numbers in sorted(tracking.items())},
                                    "swapcast_tracking_batch", ("model",), "swapcast_tracking_busy_ratio", "tracking ")
        yield from _model_server_metrics(self._runner_numbers)
        refusals = CounterMetricFamily("swapcast_content_refusals", "Images the content gate refused: source "
                                       "photos, and sampled frames of streams and jobs", labels=["where"])
        counted = {"source": 0, "frame": 0, **self._content_refusals()}
        for where, count in sorted(counted.items()):
            refusals.add_metric([where], float(count))
        yield refusals


class StreamObserver:
    """One stream's feed into its node's metrics (see the module docstring). Called for
    each output frame, from the stream's worker thread or the event loop; one stream calls
    from one thread, and the metrics it touches are thread-safe."""

    def __init__(self, metrics: NodeMetrics, protocol: str) -> None:
        self._stages = [(name, metrics.stage_seconds.labels(name, protocol)) for name in SWAP_STAGES]
        self._total = metrics.stage_seconds.labels("total", protocol)
        self._latency = metrics.frame_latency.labels(protocol)
        self._out = metrics.frames_out.labels(protocol)
        self._unswapped = metrics.frames_unswapped.labels(protocol)
        self._deltas = [  # (counter, what it reads from the stats, value already counted)
            [metrics.frames_in.labels(protocol), "frames_in", 0],
            [metrics.frames_dropped.labels(protocol), "frames_dropped", 0],
            [metrics.errors.labels("decode"), "decode_errors", 0],
            [metrics.errors.labels("swap"), "swap_errors", 0],
        ]

    def __call__(self, stats: StreamStats, latency_ms: float, stages: StageTimes) -> None:
        self._out.inc()
        self._latency.observe(latency_ms / 1000.0)
        if stages.total > 0:  # 0: the swap did not run (disabled, or it failed): no stage times
            for name, histogram in self._stages:
                histogram.observe(getattr(stages, name) / 1000.0)
            self._total.observe(stages.total / 1000.0)
        if stages.dropped_by_batcher:
            self._unswapped.inc(stages.dropped_by_batcher)
        for entry in self._deltas:
            counter, field, counted = entry
            value = getattr(stats, field)
            if value > counted:
                counter.inc(value - counted)
                entry[2] = value


def _sessions_gauge(name: str, documentation: str, sessions: Iterable[Mapping[str, Any]]) -> GaugeMetricFamily:
    """Sessions counted by (protocol, state); every protocol's ``live`` is always present
    (0 when idle) so an autoscaler never sees the metric vanish."""
    counts = Tally((str(s.get("protocol")), str(s.get("state") or "live")) for s in sessions)
    for protocol in PROTOCOLS:
        counts.setdefault((protocol, "live"), 0)
    gauge = GaugeMetricFamily(name, documentation, labels=["protocol", "state"])
    for (protocol, state), count in sorted(counts.items()):
        gauge.add_metric([protocol, state], count)
    return gauge


def _batcher_metrics(batchers: Mapping[tuple[str, ...], Mapping[str, Any]], prefix: str = "swapcast_batch",
                     labels: tuple[str, ...] = (), busy: str = "swapcast_device_busy_ratio", kind: str = "") -> Iterable[Metric]:
    """Batchers' numbers (``MicroBatcher.metrics``, counted since each one's last reset), one
    sample per batcher, keyed by its ``labels`` values: the swap's batcher unlabelled, the
    tracking graphs' by model. Nothing for batchers not made yet (none before the first swap)."""
    if not batchers:
        return
    names = list(labels)
    sizes = HistogramMetricFamily(f"{prefix}_size", f"Rows per batch the {kind}runner ran", labels=names)
    delay = GaugeMetricFamily(f"{prefix}_queue_delay_seconds", f"Time rows waited in the {kind}batcher's queue, recent",
                              labels=[*names, "quantile"])
    counters = [
        (CounterMetricFamily(f"{prefix}es", f"Batches the {kind}runner ran", labels=names), "batches"),
        (CounterMetricFamily(f"{prefix}_rows", f"Rows (faces) the {kind}runner ran", labels=names), "rows"),
        (CounterMetricFamily(f"{prefix}_rows_failed", "Rows whose batch failed", labels=names), "rows_failed"),
        (CounterMetricFamily(f"{prefix}_rows_rejected", "Rows refused: their session had too many outstanding",
                             labels=names), "rejected_rows"),
    ]
    gauges = [
        (GaugeMetricFamily(f"{prefix}_queued_rows", f"Rows waiting in the {kind}batcher", labels=names), "queued_rows", 1.0),
        (GaugeMetricFamily(f"{prefix}_in_flight", "Batches running now", labels=names), "in_flight", 1.0),
        (GaugeMetricFamily(busy, "Share of wall time at least one batch was running", labels=names), "device_busy_pct", 0.01),
    ]
    for values, numbers in batchers.items():
        counts = {int(size): count for size, count in numbers["batch_size_histogram"].items()}
        cumulative = [(str(bound), float(sum(c for size, c in counts.items() if size <= bound))) for bound in BATCH_SIZE_BUCKETS]
        sizes.add_metric(list(values), [*cumulative, ("+Inf", float(numbers["batches"]))], sum_value=float(numbers["rows"]))
        for quantile, key in (("0.5", "queue_delay_p50_ms"), ("0.99", "queue_delay_p99_ms")):
            if numbers.get(key) is not None:
                delay.add_metric([*values, quantile], numbers[key] / 1000.0)
        for family, key in counters:
            family.add_metric(list(values), float(numbers[key]))
        for family, key, scale in gauges:
            family.add_metric(list(values), float(numbers[key]) * scale)
    yield sizes
    yield delay
    for family, _ in counters:
        yield family
    for family, _, _ in gauges:
        yield family


def _model_server_metrics(numbers: Mapping[str, Any] | None) -> Iterable[Metric]:
    """A model server's own view of the swap model (Triton's statistics API: every node
    that shares the server counts), labelled by model; nothing without one."""
    if not numbers:
        return
    model = [str(numbers["model"])]
    for name, key, documentation in (
        ("swapcast_model_server_requests", "requests", "Requests the model server answered (all its clients)"),
        ("swapcast_model_server_executions", "executions", "Batches the model server ran (all its clients)"),
    ):
        counter = CounterMetricFamily(name, documentation, labels=["model"])
        counter.add_metric(model, float(numbers[key]))
        yield counter
    for name, key, documentation in (
        ("swapcast_model_server_queue_seconds", "queue_ms_mean", "Mean time a request waited in the server's queue"),
        ("swapcast_model_server_compute_seconds", "compute_ms_mean", "Mean compute time of one server batch"),
    ):
        gauge = GaugeMetricFamily(name, documentation, labels=["model"])
        gauge.add_metric(model, float(numbers[key]) / 1000.0)
        yield gauge
    sizes = {int(size): count for size, count in numbers["batch_sizes"].items()}
    cumulative = [(str(bound), float(sum(c for size, c in sizes.items() if size <= bound))) for bound in BATCH_SIZE_BUCKETS]
    histogram = HistogramMetricFamily("swapcast_model_server_batch_size", "Rows per batch the model server ran",
                                      labels=["model"])
    histogram.add_metric(model, [*cumulative, ("+Inf", float(sum(sizes.values())))],
                         sum_value=float(sum(size * count for size, count in sizes.items())))
    yield histogram


class GatewayMetrics(HttpMetrics):
    """The gateway's own numbers: its requests, how long placing a session takes, and the
    registry's view of nodes and sessions (read once per scrape)."""

    def __init__(self, registry: Registry) -> None:
        super().__init__()
        self._registry = registry
        self._view: tuple[list[dict[str, Any]], list[dict[str, Any]]] | None = None
        self.placement_seconds = Histogram("swapcast_gateway_placement_seconds",
                                           "Request arrival until the new session is placed on a node",
                                           ["protocol"], buckets=HTTP_BUCKETS, registry=self.registry)
        self.registry.register(self)  # collect(): the registry's view

    def placed(self, protocol: str, seconds: float) -> None:
        self.placement_seconds.labels(protocol).observe(seconds)

    async def refresh(self) -> None:
        try:
            nodes, sessions = await self._registry.nodes(), await self._registry.sessions()
        except RegistryUnavailable:
            self._view = None
            return
        self._view = [n.to_dict() for n in nodes], [s.to_dict() for s in sessions]

    def collect(self) -> Iterable[Metric]:
        view = self._view
        yield GaugeMetricFamily("swapcast_gateway_registry_up", "1 when the session registry answered the last scrape",
                                value=0.0 if view is None else 1.0)
        if view is None:
            return
        nodes, sessions = view
        gauge = GaugeMetricFamily("swapcast_gateway_nodes", "Live nodes by state", labels=["state"])
        counts = Tally(str(n["state"]) for n in nodes)
        for state in sorted({"ready", "draining", *counts}):
            gauge.add_metric([state], counts[state])
        yield gauge
        yield _sessions_gauge("swapcast_gateway_sessions", "Sessions of the cluster by protocol and state", sessions)


def add_metrics_routes(app: web.Application, metrics: HttpMetrics) -> None:
    """``GET /metrics`` (no auth: scrapers reach it on the pod network), and the hooks that
    count every response of ``app``. Call before the app starts (middlewares freeze)."""

    @web.middleware
    async def stamp(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        request[_STARTED] = time.perf_counter()
        return await handler(request)

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        metrics.observe_response(request, response)

    async def scrape(request: web.Request) -> web.Response:
        await metrics.refresh()
        body, content_type = metrics.render(request.headers.get("Accept"))
        return web.Response(body=body, headers={"Content-Type": content_type})

    app.middlewares.insert(0, stamp)  # outermost: the time includes the other middlewares
    app.on_response_prepare.append(on_prepare)
    app.router.add_get("/metrics", scrape)
