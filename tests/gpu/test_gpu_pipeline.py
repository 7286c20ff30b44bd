"""The device-resident swap path on CUDA (run by scripts/gpu-check.sh; deselected in CI with
-m "not gpu"): a CuPy frame is cropped, run and pasted on the device and ends up as the frame
the host path makes from the same NumPy frame.

Needs gpu/ only (no mediapipe, no scipy): the inswapper adapter on generated twins, with a
face given by its box and five keypoints. Tolerance: the crop kernel may differ from OpenCV
by 1 code value on a few pixels, which moves the model's output a little; so at most 3 code
values anywhere and a mean difference under 0.05 over the frame."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
from model_twins import make_arcface, make_inswapper

from gpu.analysis.arcface import ArcFaceEmbedder
from gpu.device import is_device_array
from gpu.options import SwapOptions
from gpu.runners.torch_cuda import TorchRunner
from gpu.swappers.base import run_jobs
from gpu.swappers.inswapper import InswapperSwapper
from gpu.types import Face

pytestmark = pytest.mark.gpu

FACE = Face(
    box=np.array([250.0, 140.0, 370.0, 270.0], dtype=np.float32),
    kps=np.array([[283.0, 183.0], [336.0, 185.0], [310.0, 215.0], [287.0, 240.0], [333.0, 242.0]], np.float32),
)


@pytest.fixture(scope="module")
def cp():
    import cupy
    import torch

    assert cupy.cuda.runtime.getDeviceCount() > 0 and torch.cuda.is_available(), "the gpu tests need a CUDA device"
    # an fp32 comparison: no TF32 in the torch runner's convolutions
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield cupy
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("models")
    make_arcface(directory / "w600k_r50.onnx")
    make_inswapper(directory / "inswapper_128.onnx")
    return directory


def _frame() -> np.ndarray:
    noise = np.random.default_rng(7).integers(0, 256, (480, 640, 3), dtype=np.uint8)
    return cv2.GaussianBlur(noise, (0, 0), 3)


def _swap(swapper: InswapperSwapper, frame, latent: np.ndarray) -> list:
    faces = [FACE, Face(box=FACE.box + 140, kps=FACE.kps + 140)]
    options = SwapOptions(blend=0.9, feather=0.08)
    jobs = [swapper.prepare(frame, face, latent, options) for face in faces]
    rows = run_jobs(swapper.runner, jobs)
    for job, row in zip(jobs, rows, strict=True):
        swapper.finish(frame, job, row)
    return [job.feeds for job in jobs] + [row[0] for row in rows]


def _assert_close(got: np.ndarray, want: np.ndarray) -> None:
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 3 and diff.mean() < 0.05, f"max {diff.max()}, mean {diff.mean():.4f}"
    assert diff.mean() < np.abs(_frame().astype(np.int32) - want.astype(np.int32)).mean() / 20  # the swap happened


def test_device_frame_stays_on_device_and_equals_the_host_path(cp, models: Path) -> None:
    embedder = ArcFaceEmbedder(models / "w600k_r50.onnx")
    host = InswapperSwapper(models / "inswapper_128.onnx", embedder)
    device = InswapperSwapper(
        models / "inswapper_128.onnx",
        embedder,
        make_runner=lambda model, name: TorchRunner(model, name=name, device="cuda", fp16=False, cuda_graphs=False),
    )
    latent = host.register(_frame(), FACE)
    host_frame = _frame()
    _swap(host, host_frame, latent)

    device_frame = cp.asarray(_frame())
    pointer = device_frame.data.ptr
    arrays = _swap(device, device_frame, latent)

    assert all(is_device_array(a) for feeds in arrays[:2] for a in feeds.values()), "feeds were made on the host"
    assert all(is_device_array(row) for row in arrays[2:]), "the runner answered on the host"
    assert device_frame.data.ptr == pointer  # pasted in place
    _assert_close(cp.asnumpy(device_frame), host_frame)


def test_device_frame_with_a_host_runner(cp, models: Path) -> None:
    """A CUDA node whose swap model runs on the CPU (ONNX Runtime's CPU provider): the
    feeds go to the host for the runner and the rows come back to the device frame."""
    embedder = ArcFaceEmbedder(models / "w600k_r50.onnx")
    swapper = InswapperSwapper(models / "inswapper_128.onnx", embedder)
    latent = swapper.register(_frame(), FACE)
    host_frame = _frame()
    _swap(swapper, host_frame, latent)

    device_frame = cp.asarray(_frame())
    _swap(swapper, device_frame, latent)
    _assert_close(cp.asnumpy(device_frame), host_frame)
