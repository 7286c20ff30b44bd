"""CPU twins of the device kernels against independent references (OpenCV, swscale via
PyAV, the standards' published coefficients). The device kernels are compared with these
twins in tests/gpu/test_gpu_kernels.py."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.kernels import ops
from gpu.kernels.colour import yuv_coefficients, yuv_to_rgb_i420, yuv_to_rgb_nv12
from gpu.kernels.warp import crop_faces, paste_back, paste_faces, paste_region

H, W = 96, 128


def _buffer(seed: int = 0, legal: bool = False, height: int = H, width: int = W) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if not legal:
        return rng.integers(0, 256, (height * 3 // 2, width), dtype=np.uint8)
    y = rng.integers(16, 236, (height, width), dtype=np.uint8)
    chroma = rng.integers(16, 241, (height // 2, width), dtype=np.uint8)
    return np.concatenate([y, chroma])


def _planes(buffer: np.ndarray, nv12: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Y and nearest-upsampled U, V planes (H, W) of a 4:2:0 buffer."""
    height = buffer.shape[0] * 2 // 3
    y = buffer[:height]
    if nv12:
        u, v = buffer[height:, 0::2], buffer[height:, 1::2]
    else:
        chroma = buffer[height:].reshape(2, height // 2, -1)
        u, v = chroma[0], chroma[1]
    up = lambda plane: plane.repeat(2, 0).repeat(2, 1)  # noqa: E731
    return y, up(u), up(v)


def _max_diff(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


def test_i420_bt601_limited_equals_opencv_on_every_code():
    buffer = _buffer(1)  # every code, illegal ones (Y < 16, > 235) included
    assert _max_diff(yuv_to_rgb_i420(buffer), cv2.cvtColor(buffer, cv2.COLOR_YUV2RGB_I420)) <= 1


def test_nv12_bt601_limited_equals_opencv_on_every_code():
    buffer = _buffer(2)
    assert _max_diff(yuv_to_rgb_nv12(buffer), cv2.cvtColor(buffer, cv2.COLOR_YUV2RGB_NV12)) <= 1


def test_i420_and_nv12_agree_on_the_same_picture():
    i420 = _buffer(3)
    chroma = i420[H:].reshape(2, H // 2, W // 2)
    nv12 = np.concatenate([i420[:H], np.stack([chroma[0], chroma[1]], axis=-1).reshape(H // 2, W)])
    for matrix in ("bt601", "bt709"):
        for full in (False, True):
            np.testing.assert_array_equal(
                yuv_to_rgb_i420(i420, matrix=matrix, full_range=full), yuv_to_rgb_nv12(nv12, matrix=matrix, full_range=full)
            )


@pytest.mark.parametrize("nv12", [False, True])
def test_bt601_full_range_equals_opencv_ycrcb(nv12):
    buffer = _buffer(4)
    y, u, v = _planes(buffer, nv12)
    reference = cv2.cvtColor(np.dstack([y, v, u]), cv2.COLOR_YCrCb2RGB)  # full-range BT.601
    convert = yuv_to_rgb_nv12 if nv12 else yuv_to_rgb_i420
    assert _max_diff(convert(buffer, full_range=True), reference) <= 1


# The standards' published coefficients (BT.601 / BT.709), not derived from Kr, Kb here.
_PUBLISHED = {
    ("bt709", False): (1.164383, 1.792741, -0.213249, -0.532909, 2.112402),
    ("bt709", True): (1.0, 1.5748, -0.187324, -0.468124, 1.8556),
    ("bt601", False): (1.164383, 1.596027, -0.391762, -0.812968, 2.017232),
    ("bt601", True): (1.0, 1.402, -0.344136, -0.714136, 1.772),
}


@pytest.mark.parametrize(("matrix", "full"), list(_PUBLISHED))
def test_every_variant_follows_the_published_coefficients(matrix, full):
    buffer = _buffer(5)
    y, u, v = (plane.astype(np.float64) for plane in _planes(buffer))
    ys, rv, gu, gv, bu = _PUBLISHED[(matrix, full)]
    luma = np.maximum(y - (0 if full else 16), 0) * ys
    u, v = u - 128, v - 128
    reference = np.clip(np.rint(np.dstack([luma + rv * v, luma + gu * u + gv * v, luma + bu * u])), 0, 255)
    assert _max_diff(yuv_to_rgb_i420(buffer, matrix=matrix, full_range=full), reference) <= 1


@pytest.mark.parametrize(("matrix", "full"), list(_PUBLISHED))
def test_every_variant_matches_swscale(matrix, full):
    av = pytest.importorskip("av")  # the media stack; always there in CI
    buffer = _buffer(6, legal=True)
    frame = av.VideoFrame.from_ndarray(buffer, format="yuv420p")
    reference = frame.reformat(
        format="rgb24",
        src_colorspace="ITU709" if matrix == "bt709" else "ITU601",
        src_color_range="JPEG" if full else "MPEG",
        interpolation="POINT",
    ).to_ndarray()
    assert _max_diff(yuv_to_rgb_i420(buffer, matrix=matrix, full_range=full), reference) <= 3  # swscale is fixed-point


def test_bt601_and_bt709_really_differ():
    buffer = _buffer(7)
    assert _max_diff(yuv_to_rgb_i420(buffer, matrix="bt601"), yuv_to_rgb_i420(buffer, matrix="bt709")) > 10
    assert yuv_coefficients("bt709")["rv"] == pytest.approx(1.5748)


def test_yuv_batch_equals_each_frame():
    batch = np.stack([_buffer(8), _buffer(9)])
    out = yuv_to_rgb_nv12(batch, matrix="bt709")
    assert out.shape == (2, H, W, 3)
    for i in range(2):
        np.testing.assert_array_equal(out[i], yuv_to_rgb_nv12(batch[i], matrix="bt709"))


def test_yuv_rejects_odd_and_wrong_buffers():
    with pytest.raises(ValueError, match="even"):
        yuv_to_rgb_i420(np.zeros((9, 5), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        yuv_to_rgb_i420(np.zeros((96, 64), np.float32))
    with pytest.raises(ValueError, match="i420 or nv12"):
        ops.yuv_to_rgb(_buffer(), "yuy2")


def _bilinear_replicate(image: np.ndarray, matrix: np.ndarray, size: int) -> np.ndarray:
    """Independent float64 reference for warpAffine INTER_LINEAR + BORDER_REPLICATE."""
    inverse = cv2.invertAffineTransform(matrix.astype(np.float64))
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float64)
    sx = inverse[0, 0] * xs + inverse[0, 1] * ys + inverse[0, 2]
    sy = inverse[1, 0] * xs + inverse[1, 1] * ys + inverse[1, 2]
    x0, y0 = np.floor(sx), np.floor(sy)
    ax, ay = (sx - x0)[..., None], (sy - y0)[..., None]
    x0, y0 = x0.astype(int), y0.astype(int)
    h, w = image.shape[:2]
    tap = lambda yy, xx: image[np.clip(yy, 0, h - 1), np.clip(xx, 0, w - 1)].astype(np.float64)  # noqa: E731
    value = (tap(y0, x0) * (1 - ax) + tap(y0, x0 + 1) * ax) * (1 - ay) + (tap(y0 + 1, x0) * (1 - ax) + tap(y0 + 1, x0 + 1) * ax) * ay
    return np.clip(np.rint(value), 0, 255).astype(np.uint8)


def test_crop_twin_is_float_bilinear_with_replicated_border():
    """The convention the CUDA crop kernel implements: float bilinear, pixel centres on
    integers, edge replicated (the rotated crop runs off the frame on two sides)."""
    rng = np.random.default_rng(10)
    frames = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8), rng.integers(0, 256, (90, 70, 3), dtype=np.uint8)]
    matrices = np.array(
        [[[0.83, 0.21, -7.3], [-0.17, 0.91, 11.2]], [[1.4, -0.3, 5.0], [0.3, 1.4, -20.0]], [[0.5, 0, 0], [0, 0.5, 0]]],
        np.float32,
    )
    crops = crop_faces([frames[0], frames[1], frames[0]], matrices, 100)
    for crop, frame, matrix in zip(crops, [frames[0], frames[1], frames[0]], matrices, strict=True):
        diff = np.abs(crop.astype(int) - _bilinear_replicate(frame, matrix, 100))
        assert diff.max() <= 1 and (diff > 0).mean() < 0.01


def test_ops_dispatch_numpy_to_the_twins():
    rng = np.random.default_rng(11)
    frame = rng.integers(0, 256, (80, 80, 3), dtype=np.uint8)
    matrix = np.array([[[1, 0, -8], [0, 1, -8]]], np.float32)
    np.testing.assert_array_equal(ops.crop_faces([frame], matrix, 32), crop_faces([frame], matrix, 32))
    buffer = _buffer(12)
    np.testing.assert_array_equal(ops.yuv_to_rgb(buffer, "nv12", matrix="bt709"), yuv_to_rgb_nv12(buffer, matrix="bt709"))


def test_paste_region_bounds_the_touched_pixels():
    mask = np.zeros((64, 64), np.float32)
    mask[10:20, 30:40] = 1
    matrix = np.array([[2.0, 0, -50], [0, 2.0, -30]], np.float32)  # frame -> crop, scale 2
    (x0, y0, x1, y1), roi_to_crop = paste_region(mask, matrix, (200, 200))
    assert (x0, y0, x1, y1) == (39, 19, 47, 27)
    np.testing.assert_allclose(roi_to_crop @ [0, 0, 1], matrix @ [x0, y0, 1])
    assert paste_region(np.zeros((8, 8), np.float32), matrix, (200, 200)) is None
    assert paste_region(mask, np.array([[1.0, 0, 500], [0, 1, 500]]), (100, 100)) is None  # off the frame


def test_paste_faces_blends_in_order_into_each_frame():
    rng = np.random.default_rng(13)
    frames = [rng.integers(0, 256, (100, 100, 3), dtype=np.uint8) for _ in range(2)]
    expected = [f.copy() for f in frames]
    crops = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    masks = np.zeros((3, 32, 32), np.float32)
    masks[:, 4:28, 4:28] = rng.uniform(0.2, 1.0, (3, 24, 24)).astype(np.float32)
    matrices = np.array([[[1, 0, -20], [0, 1, -20]], [[1, 0, -30], [0, 1, -25]], [[1, 0, -50], [0, 1, -40]]], np.float32)
    index = [0, 0, 1]  # two overlapping faces in frame 0, one in frame 1
    for i, frame in enumerate(index):
        paste_back(expected[frame], crops[i], masks[i], matrices[i])
    paste_faces(frames, index, crops, masks, matrices)
    for got, want in zip(frames, expected, strict=True):
        np.testing.assert_array_equal(got, want)
