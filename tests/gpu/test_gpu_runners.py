"""The PyTorch runner on CUDA (run by scripts/gpu-check.sh; deselected in CI with
-m "not gpu"): fp16 against the fp32 reference, CUDA-graph buckets against eager, DLPack
zero copy.

Tolerances (outputs in [0, 1]): the native mesh module runs fp32 even in an fp16 runner
(its grid coordinates need it) -- max 1e-4 / mean 1e-5 against the CPU reference; the
synthetic inswapper (10 fp16 residual blocks, normalisation in fp32) max 5e-2 / mean 5e-3. Graph replay vs eager in the same precision: 1e-3 (cuDNN may pick
other algorithms per batch size)."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.models.synthetic import build_synthetic_inswapper
from gpu.runners.torch_cuda import TorchRunner, as_cupy, as_torch
from gpu.swappers.mesh_graph import build_mesh_swap_graph

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    import torch

    assert torch.cuda.is_available(), "the gpu tests need torch with CUDA"
    # a true fp32 reference: no TF32 (whose 10-bit mantissa equals fp16's) in convs / matmuls
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield torch
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _mesh_feeds(count: int, size: int = 256, texture: int = 256, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1) * 2 - 1
    grid = np.stack([xx, yy], -1)[None] * rng.uniform(0.8, 1.1, (count, 1, 1, 1)) + rng.normal(0, 0.02, (count, size, size, 2))
    mask = np.clip(1.2 - np.hypot(xx, yy), 0, 1)[None, None].repeat(count, 0)
    return {
        "target": rng.random((count, 3, size, size), np.float32),
        "source": rng.random((count, 3, texture, texture), np.float32),
        "grid": grid.astype(np.float32),
        "mask": mask.astype(np.float32),
        "blend": np.full((count, 1, 1, 1), 0.9, np.float32),
        "colour": np.ones((count, 1, 1, 1), np.float32),
    }


def _synthetic_feeds(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    source = rng.standard_normal((count, 512)).astype(np.float32)
    return {"target": rng.random((count, 3, 128, 128), np.float32), "source": source / np.linalg.norm(source, axis=1, keepdims=True)}


def _compare(got, want, max_err, mean_err):
    err = np.abs(got.astype(np.float64) - want)
    assert np.isfinite(got).all()
    assert err.max() <= max_err and err.mean() <= mean_err, f"max {err.max():.4g}, mean {err.mean():.4g}"


def test_mesh_fp16_graphs_vs_fp32_reference(torch):
    model = build_mesh_swap_graph()
    feeds = _mesh_feeds(5)
    reference = TorchRunner(model, device="cpu").run(feeds)[0]
    fp32 = TorchRunner(model, device="cuda", fp16=False, cuda_graphs=False).run(feeds)[0]
    _compare(fp32, reference, 1e-4, 1e-5)
    fast = TorchRunner(model, device="cuda")
    assert fast.fp16 and fast.cuda_graphs
    _compare(fast.run(feeds)[0], reference, 1e-4, 1e-5)


def test_synthetic_inswapper_fp16_with_fp32_normalisation_vs_fp32(torch):
    model = build_synthetic_inswapper(seed=1)
    feeds = _synthetic_feeds(4)
    reference = TorchRunner(model, device="cuda", fp16=False, cuda_graphs=False).run(feeds)[0]
    fast = TorchRunner(model, device="cuda")
    assert fast.kind == "onnx2torch" and fast.fp32_islands > 0
    _compare(fast.run(feeds)[0], reference, 5e-2, 5e-3)
    assert fast.graph_error is None and fast.captured_buckets == [4]  # captured, not fallen back to eager


@pytest.mark.parametrize("count", [1, 3, 8, 13, 32, 37])
def test_cuda_graph_buckets_equal_eager(torch, count):
    model = build_mesh_swap_graph()
    feeds = _mesh_feeds(count, size=128, texture=128, seed=count)
    eager = TorchRunner(model, device="cuda", fp16=True, cuda_graphs=False).run(feeds)[0]
    graphs = TorchRunner(model, device="cuda", fp16=True, cuda_graphs=True)
    got = graphs.run(feeds)[0]
    assert got.shape == eager.shape == (count, 3, 128, 128)
    _compare(got, eager, 1e-3, 1e-5)
    expected = {1: [1], 3: [4], 8: [8], 13: [16], 32: [32], 37: [8, 32]}[count]
    assert graphs.captured_buckets == expected
    again = graphs.run(feeds)[0]  # a replay of the captured graph
    np.testing.assert_array_equal(again, got)


def test_dlpack_is_zero_copy_both_ways(torch):
    import cupy

    array = cupy.arange(12, dtype=cupy.float32).reshape(3, 4)
    tensor = as_torch(array)
    assert tensor.is_cuda and tensor.data_ptr() == array.data.ptr
    back = as_cupy(tensor)
    assert back.data.ptr == array.data.ptr


def test_run_device_takes_and_returns_cupy(torch):
    import cupy

    model = build_mesh_swap_graph()
    feeds = _mesh_feeds(2, size=128, texture=128)
    runner = TorchRunner(model, device="cuda")
    [host] = runner.run(feeds)
    [device] = runner.run_device({k: cupy.asarray(v) for k, v in feeds.items()})
    assert isinstance(device, cupy.ndarray)
    np.testing.assert_allclose(device.get(), host, atol=1e-6)
