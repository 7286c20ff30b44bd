"""The Triton runner against a real tritonserver: results equal ONNX Runtime in-process
per row, Triton merges two node processes' requests, missing or mismatched models are
named in one line, and a dead server is reported, then recovered from."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from gpu.models.triton_repository import swap_model
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.runners.select import make_runner
from gpu.runners.triton import TritonModelError, TritonRunner, TritonSettings, TritonUnavailable

ROOT = Path(__file__).resolve().parents[2]


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


NODE_CLIENT = """
import sys, time
import numpy as np
from gpu.models.triton_repository import swap_model
from gpu.runners.triton import TritonRunner, TritonSettings
url, models, seed, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
name, model = swap_model("inswapper", models)
runner = TritonRunner(model, name=name, settings=TritonSettings(url=url, timeout_s=20))
rng = np.random.default_rng(seed)
time.sleep(max(0.0, start_at - time.time()))
for step in range(6):
    sources = rng.normal(size=(2, 512)).astype(np.float32)
    (out,) = runner.run({"target": rng.random((2, 3, 128, 128), np.float32),
                         "source": sources / np.linalg.norm(sources, axis=1, keepdims=True)})
    assert out.shape == (2, 3, 128, 128)
runner.close()
"""


@pytest.mark.slow
def test_two_node_processes_are_batched_together_by_triton(triton_server, triton_models: Path) -> None:
    """Two processes, each a node's runner sending 2 rows at a time, load one Triton at
    once; its dynamic batcher runs batches larger than either sends."""
    name, model = swap_model("inswapper", triton_models)
    observer = TritonRunner(model, name=name, settings=TritonSettings(url=triton_server.url, timeout_s=20))
    before = observer.statistics()
    start_at = time.time() + 4.0  # both processes imported and connected by then
    nodes = [subprocess.Popen([sys.executable, "-c", NODE_CLIENT, triton_server.url, str(triton_models), str(k),
                               str(start_at)], cwd=ROOT) for k in range(2)]
    assert [node.wait(60) for node in nodes] == [0, 0]
    after = observer.statistics()
    observer.close()
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


@pytest.mark.slow
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


def test_slow_answer_is_unavailable_and_the_next_call_recovers(triton_server, triton_models: Path) -> None:
    """A request past ``timeout_s`` fails at once; the server still holds the shared-memory
    regions, and the next call registers them again without a conflict."""
    name, model = swap_model("inswapper", triton_models)
    patient = TritonSettings(url=triton_server.url, timeout_s=20)
    runner = TritonRunner(model, name=name, settings=patient)
    feeds = _inswapper_feeds(3, seed=7)
    try:
        (expected,) = runner.run(feeds)
        runner.settings = replace(patient, timeout_s=1e-4)
        with pytest.raises(TritonUnavailable, match="did not answer"):
            runner.run(feeds)
        runner.settings = patient
        (again,) = runner.run(feeds)
        np.testing.assert_allclose(again, expected, atol=1e-6)
    finally:
        runner.close()
