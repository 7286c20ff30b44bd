"""The Triton runner against a real tritonserver: results equal ONNX Runtime in-process
per row, Triton merges concurrent clients' requests, missing or mismatched models are
named in one line, and a dead server is reported, then recovered from."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest

from gpu.models.triton_repository import swap_model
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.runners.select import make_runner
from gpu.runners.triton import TritonModelError, TritonRunner, TritonSettings, TritonUnavailable


def _mesh3d_feeds(rows: int, seed: int = 0, crop: int = 64) -> dict[str, np.ndarray]:
    """Shape-consistent mesh3d inputs; every row its own source (albedo) and target."""
    rng = np.random.default_rng(seed)
    return {
        "target": rng.random((rows, 3, crop, crop), np.float32),
        "albedo": rng.random((rows, 3, crop, crop), np.float32) * 2,
        "shading": rng.random((rows, 3, crop // 2, crop // 2), np.float32),
        "grid": rng.random((rows, crop, crop, 2), np.float32) * 2 - 1,
        "mask": rng.random((rows, 1, crop, crop), np.float32),
        "keep": (rng.random((rows, 1, crop, crop)) > 0.9).astype(np.float32),
        "blend": np.linspace(0.5, 1.0, rows, dtype=np.float32).reshape(rows, 1, 1, 1),
    }


def _inswapper_feeds(rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    sources = rng.normal(size=(rows, 512)).astype(np.float32)
    return {"target": rng.random((rows, 3, 128, 128), np.float32),
            "source": sources / np.linalg.norm(sources, axis=1, keepdims=True)}


@pytest.mark.parametrize("shared_memory", ["auto", "off"])
@pytest.mark.parametrize("swapper", ["mesh3d", "inswapper"])
def test_rows_equal_onnxruntime_in_process(triton_server, triton_models: Path, swapper: str, shared_memory: str) -> None:
    name, model = swap_model(swapper, triton_models)
    feeds = _mesh3d_feeds(4) if swapper == "mesh3d" else _inswapper_feeds(4)
    runner = make_runner(model, runner="triton", name=name,
                         triton=TritonSettings(url=triton_server.url, timeout_s=20, shared_memory=shared_memory))
    local = OnnxRuntimeRunner(model, threads=1)
    try:
        assert runner.choice.runner == "triton"
        (batched,) = runner.run(feeds)
        assert batched.shape[0] == 4
        for row in range(4):
            (alone,) = local.run({key: value[row:row + 1] for key, value in feeds.items()})
            np.testing.assert_allclose(batched[row:row + 1], alone, atol=1e-5)
        assert np.abs(batched[0] - batched[1]).max() > 1e-3  # the rows' sources differ, so do the results
    finally:
        runner.close()


def test_concurrent_clients_are_batched_together_by_triton(triton_server, triton_models: Path) -> None:
    """Two node-like clients (each its own connection and request stream) send 2 rows at a
    time; Triton's dynamic batcher runs batches larger than either sends."""
    name, model = swap_model("inswapper", triton_models)
    settings = TritonSettings(url=triton_server.url, timeout_s=20)
    clients = [TritonRunner(model, name=name, settings=settings) for _ in range(2)]
    before = clients[0].statistics()
    start = threading.Barrier(2)

    def load(client: TritonRunner, seed: int) -> None:
        start.wait()
        for step in range(6):
            client.run(_inswapper_feeds(2, seed * 100 + step))

    threads = [threading.Thread(target=load, args=(client, i)) for i, client in enumerate(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    after = clients[0].statistics()
    for client in clients:
        client.close()
    grown = {size: count - before["batch_sizes"].get(size, 0) for size, count in after["batch_sizes"].items()}
    assert after["requests"] - before["requests"] == 12
    assert any(size > 2 and count > 0 for size, count in grown.items()), grown
    assert after["queue_ms_mean"] >= 0 and after["compute_ms_mean"] > 0


def test_missing_model_is_named_in_one_line(triton_server, triton_models: Path) -> None:
    _, model = swap_model("inswapper", triton_models)
    with pytest.raises(TritonModelError) as raised:
        TritonRunner(model, name="hyperswap_256", settings=TritonSettings(url=triton_server.url))
    message = str(raised.value)
    assert "'hyperswap_256'" in message and "does not serve" in message and "\n" not in message


def test_wrong_signature_names_the_model_and_the_mismatch(triton_server) -> None:
    _, model = swap_model("mesh3d", None)
    renamed = onnx.ModelProto()
    renamed.CopyFrom(model)
    renamed.graph.input[0].name = "crop"
    with pytest.raises(TritonModelError) as raised:
        TritonRunner(renamed, name="mesh3d_swap", settings=TritonSettings(url=triton_server.url))
    message = str(raised.value)
    assert "'mesh3d_swap'" in message and "input 'crop' missing" in message and "\n" not in message


def test_unreachable_server_is_refused_at_start_with_the_reason() -> None:
    from swapcast.local_cluster import free_port

    _, model = swap_model("mesh3d", None)
    with pytest.raises(TritonUnavailable, match="unreachable"):
        TritonRunner(model, name="mesh3d_swap", settings=TritonSettings(url=f"http://127.0.0.1:{free_port()}"))


def test_killed_server_fails_fast_and_recovers_after_restart(triton_server, triton_models: Path) -> None:
    name, model = swap_model("inswapper", triton_models)
    runner = TritonRunner(model, name=name, settings=TritonSettings(url=triton_server.url, timeout_s=5))
    feeds = _inswapper_feeds(2)
    try:
        (expected,) = runner.run(feeds)
        triton_server.kill()
        started = time.monotonic()
        with pytest.raises(TritonUnavailable, match="did not answer"):
            runner.run(feeds)
        assert time.monotonic() - started < 5
        ready, why = runner.health()
        assert not ready and "unreachable" in why
        assert runner.failures == 1 and runner.last_error
        triton_server.start()
        (again,) = runner.run(feeds)  # shared memory registered again with the new server
        np.testing.assert_allclose(again, expected, atol=1e-6)
        assert runner.health()[0] and runner.last_error is None
    finally:
        runner.close()
