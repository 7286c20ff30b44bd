"""The whole-pipeline benchmark's node tick on CUDA (run by scripts/gpu-check.sh; deselected
in CI): what it measures is the CPU tick's work, on the device. Needs the carried
.gpu-carry (scripts/fetch-gpu-wheels.sh) -- the GPU image cannot convert the models.

Tolerances: the crop kernel may differ from OpenCV by 1 code value, which moves the models'
inputs a little; in fp32 (no TF32) the meshes agree within half a pixel on average and the
frames within a few code values. fp16 + CUDA graphs (what the benchmark runs): batched and
one session at a time give the same meshes within a pixel and nearly the same frames."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from gpu.models.synthetic import build_synthetic_inswapper
from gpu.options import SwapOptions
from gpu.pipeline_bench.pipeline import NodeTick, host_rings
from gpu.pipeline_bench.scene import load_heads, render_rings
from gpu.pipeline_bench.stages import InswapperStage, make_tracking
from gpu.runners.select import make_runner

pytestmark = pytest.mark.gpu

SESSIONS = 3
CARRY = Path(os.environ.get("GPU_CHECK_CARRY", Path(__file__).resolve().parents[2] / ".gpu-carry"))


@pytest.fixture(scope="module")
def cuda():
    import cupy
    import torch

    assert cupy.cuda.runtime.getDeviceCount() > 0 and torch.cuda.is_available(), "the gpu tests need a CUDA device"
    assert (CARRY / "faces.npz").is_file(), f"{CARRY} is missing: run scripts/fetch-gpu-wheels.sh and carry .gpu-carry"
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def _node(make, cuda: bool) -> NodeTick:
    rings = render_rings(load_heads(CARRY / "faces.npz"), variants=SESSIONS, frames=8)
    tracking = make_tracking(CARRY / "models", make, detect_every=4)
    swap = InswapperStage(make(build_synthetic_inswapper(width=8, blocks=2), "synthetic"), SESSIONS, SwapOptions())
    return NodeTick(host_rings(rings, cuda), [r.boxes for r in rings], SESSIONS, tracking, swap, cuda=cuda, layout="nv12")


def test_device_tick_equals_the_cpu_tick(cuda) -> None:
    from gpu.runners.torch_cuda import TorchRunner

    host = _node(lambda model, name: make_runner(model, device="cpu", name=name), cuda=False)
    device = _node(lambda model, name: TorchRunner(model, name=name, device="cuda", fp16=False, cuda_graphs=False), cuda=True)
    for tick in range(2):  # a detection tick, then a tracked one
        host.run(tick, batched=True)
        device.run(tick, batched=True)
    assert host.faces_swapped == device.faces_swapped == 2 * SESSIONS
    for ours, theirs in zip(device.tracks, host.tracks, strict=True):
        assert np.abs(ours.mesh[:, :2] - theirs.mesh[:, :2]).mean() < 0.5
    difference = np.abs(np.asarray(device.host_out).astype(int) - host.host_out.astype(int))
    assert difference.max() <= 10 and difference.mean() < 0.05, (difference.max(), difference.mean())


def test_batched_equals_one_session_at_a_time_in_fp16_with_graphs(cuda) -> None:
    make = lambda model, name: make_runner(model, device="cuda", name=name)  # noqa: E731
    batched, single = _node(make, cuda=True), _node(make, cuda=True)
    for tick in range(2):
        batched.run(tick, batched=True)
        single.run(tick, batched=False)
    assert batched.faces_swapped == single.faces_swapped == 2 * SESSIONS
    assert batched.tracking_iou(1) > 0.7
    for ours, theirs in zip(batched.tracks, single.tracks, strict=True):
        assert np.abs(ours.mesh[:, :2] - theirs.mesh[:, :2]).mean() < 1.0
    # fp16 kernels differ by batch size (cuDNN picks per shape): small changes inside the
    # faces; a face pasted into the wrong session would move the mean by about 1
    difference = np.abs(np.asarray(batched.host_out).astype(int) - np.asarray(single.host_out).astype(int))
    assert difference.mean() < 0.3, (difference.max(), difference.mean())
    assert batched.clock.device()["swap_model"] > 0  # the stage clock read the device's events
