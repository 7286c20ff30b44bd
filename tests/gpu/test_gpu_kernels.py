"""CuPy kernels against their CPU twins (run by scripts/gpu-check.sh on a CUDA machine;
deselected in CI with -m "not gpu").

Tolerances: uint8 outputs may differ by 1 code value where float32 rounding lands on the
other side of .5 (GPU vs OpenCV's SIMD order of operations), on a small share of pixels."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.kernels import colour, ops, warp

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    assert cupy.cuda.runtime.getDeviceCount() > 0, "the gpu tests need a CUDA device"
    return cupy


def _close(got, want, share: float = 0.01) -> None:
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1, f"max difference {diff.max()}"
    assert (diff > 0).mean() <= share, f"{(diff > 0).mean():.4f} of values differ"


def test_crop_kernel_equals_twin_many_faces_many_frames(cp):
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, shape, dtype=np.uint8) for shape in [(480, 640, 3), (720, 1280, 3), (97, 131, 3)]]
    faces = 40
    which = rng.integers(0, len(frames), faces)
    angle = rng.uniform(-0.6, 0.6, faces)
    scale = rng.uniform(0.3, 2.5, faces)
    matrices = np.zeros((faces, 2, 3), np.float32)
    matrices[:, 0, 0] = scale * np.cos(angle)
    matrices[:, 0, 1] = -scale * np.sin(angle)
    matrices[:, 1, 0] = scale * np.sin(angle)
    matrices[:, 1, 1] = scale * np.cos(angle)
    matrices[:, :, 2] = rng.uniform(-300, 100, (faces, 2))  # many crops run off the frame: replicate
    want = warp.crop_faces([frames[i] for i in which], matrices, 128)
    device = [cp.asarray(f) for f in frames]
    got = ops.crop_faces([device[i] for i in which], matrices, 128)
    assert isinstance(got, cp.ndarray) and got.shape == want.shape
    _close(got.get(), want)


def test_paste_kernel_equals_twin_with_overlapping_faces(cp):
    rng = np.random.default_rng(1)
    frames = [rng.integers(0, 256, (360, 480, 3), dtype=np.uint8) for _ in range(3)]
    faces, size = 9, 128
    crops = rng.integers(0, 256, (faces, size, size, 3), dtype=np.uint8)
    yy, xx = np.mgrid[0:size, 0:size]
    radius = np.hypot(yy - size / 2, xx - size / 2)
    mask = np.clip((50 - radius) / 10, 0, 1).astype(np.float32)  # feathered disc
    masks = np.stack([mask] * faces)
    masks[4] = 0  # an empty mask touches nothing
    index = [0, 0, 0, 1, 1, 2, 2, 2, 1]
    matrices = np.zeros((faces, 2, 3), np.float32)
    for i in range(faces):
        s, a = rng.uniform(0.6, 1.6), rng.uniform(-0.5, 0.5)
        matrices[i, :, :2] = s * np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
        matrices[i, :, 2] = rng.uniform(-300, 0, 2)  # some faces partly off the frame
    device = [cp.asarray(f) for f in frames]
    warp.paste_faces(frames, index, crops, masks, matrices)
    ops.paste_faces(device, index, cp.asarray(crops), cp.asarray(masks), matrices)
    for got, want in zip(device, frames, strict=True):
        _close(got.get(), want)


@pytest.mark.parametrize("layout", ["i420", "nv12"])
@pytest.mark.parametrize(("matrix", "full"), [("bt601", False), ("bt601", True), ("bt709", False), ("bt709", True)])
def test_yuv_kernel_equals_twin(cp, layout, matrix, full):
    rng = np.random.default_rng(2)
    batch = rng.integers(0, 256, (3, 720 * 3 // 2, 1280), dtype=np.uint8)
    twin = colour.yuv_to_rgb_i420 if layout == "i420" else colour.yuv_to_rgb_nv12
    want = twin(batch, matrix=matrix, full_range=full)
    got = ops.yuv_to_rgb(cp.asarray(batch), layout, matrix=matrix, full_range=full)
    _close(got.get(), want, share=0.001)
    single = ops.yuv_to_rgb(cp.asarray(batch[1]), layout, matrix=matrix, full_range=full)
    np.testing.assert_array_equal(single.get(), got[1].get())


@pytest.mark.parametrize("layout", ["i420", "nv12"])
@pytest.mark.parametrize(("matrix", "full"), [("bt601", False), ("bt601", True), ("bt709", False), ("bt709", True)])
def test_rgb_to_yuv_kernel_equals_twin(cp, layout, matrix, full):
    """The kernel does the twin's float32 operations in the same order (``--fmad=false``), so
    the two should be identical; the tolerance is the file's (1 code on a tiny share)."""
    rng = np.random.default_rng(3)
    batch = rng.integers(0, 256, (3, 720, 1280, 3), dtype=np.uint8)
    twin = colour.rgb_to_yuv_i420 if layout == "i420" else colour.rgb_to_yuv_nv12
    want = twin(batch, matrix=matrix, full_range=full)
    got = ops.rgb_to_yuv(cp.asarray(batch), layout, matrix=matrix, full_range=full)
    assert isinstance(got, cp.ndarray) and got.shape == want.shape == (3, 1080, 1280)
    _close(got.get(), want, share=1e-4)
    single = ops.rgb_to_yuv(cp.asarray(batch[1]), layout, matrix=matrix, full_range=full)
    np.testing.assert_array_equal(single.get(), got[1].get())
    odd = rng.integers(0, 256, (2, 98, 130, 3), dtype=np.uint8)  # 49 x 65 chroma blocks, a view with a row pitch
    device = cp.asarray(np.pad(odd, ((0, 0), (0, 0), (0, 6), (0, 0))))[:, :, :130]
    got = ops.rgb_to_yuv(device, layout, matrix=matrix, full_range=full)
    _close(got.get(), twin(odd, matrix=matrix, full_range=full), share=1e-4)
    assert ops.rgb_to_yuv(cp.asarray(odd[:0]), layout).shape == (0, 147, 130)


def test_device_layer_on_cuda(cp):
    from gpu import device

    info = device.select_device("cuda")
    try:
        assert info.is_cuda and info.memory_gb > 1
        assert device.xp() is cp
        array = device.to_device(np.arange(6, dtype=np.float32))
        assert isinstance(array, cp.ndarray)
        np.testing.assert_array_equal(device.to_host(array * 2), np.arange(6) * 2)
    finally:
        device.select_device("auto")
