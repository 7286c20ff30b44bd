"""Shared fixtures: real sample faces, one face engine per test session.

Under CI=true a skipped test is a failure: every test must run in CI."""

from __future__ import annotations

import os

import numpy as np
import pytest

from streamer.samples import astronaut, grace_hopper


def _fail_skips_in_ci(report) -> None:
    if os.environ.get("CI") == "true" and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (not allowed): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _fail_skips_in_ci(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A whole module skipped at import (importorskip) is a failure in CI too."""
    outcome = yield
    _fail_skips_in_ci(outcome.get_result())


@pytest.fixture(scope="session")
def redis_server():
    """One real redis-server for the test session."""
    from redis_server import RedisServer

    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def redis_url(redis_server) -> str:
    """The shared redis-server, emptied for this test."""
    redis_server.flush()
    return redis_server.url


@pytest.fixture(scope="session")
def redis_cluster():
    """One real 3-master Redis Cluster for the test session."""
    from redis_server import RedisClusterServer

    cluster = RedisClusterServer()
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture
def redis_cluster_url(redis_cluster) -> str:
    """The shared Redis Cluster (``redis+cluster://`` URL), emptied for this test."""
    redis_cluster.flush()
    return redis_cluster.url


@pytest.fixture(scope="session")
def astronaut_image() -> np.ndarray:
    return astronaut()


@pytest.fixture(scope="session")
def grace_image() -> np.ndarray:
    return grace_hopper()


@pytest.fixture(scope="session")
def engine():
    from gpu.engine import FaceEngine

    return FaceEngine()


@pytest.fixture(scope="session")
def two_faces(astronaut_image, grace_image) -> np.ndarray:
    """Both sample faces side by side in one picture (astronaut left, Grace Hopper right)."""
    height = min(astronaut_image.shape[0], grace_image.shape[0])
    return np.ascontiguousarray(np.hstack([astronaut_image[:height], grace_image[:height]]))


@pytest.fixture(scope="session")
def identity_of(engine):
    """Identity (dlib) of the largest face in an image."""

    def identity(image: np.ndarray) -> np.ndarray:
        faces = engine.analyse_image(image)
        assert faces, "no face found where one was expected"
        return engine.identity(image, faces[0])

    return identity


@pytest.fixture(scope="session")
def tracking_graphs():
    """The converted tracking models on ONNX Runtime (CPU, 1 thread), as a CPU node runs them."""
    from gpu.runners.select import make_runner
    from gpu.tracking.graphs import TrackingGraphs

    graphs = TrackingGraphs(lambda model, name: make_runner(model, device="cpu", runner="onnxruntime", name=name, threads=1))
    yield graphs
    graphs.close()
