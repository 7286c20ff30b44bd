"""CPU twins of the device kernels against independent references (OpenCV, swscale via
PyAV, the standards' published coefficients). The device kernels are compared with these
twins in tests/gpu/test_gpu_kernels.py."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from gpu.kernels import ops
from gpu.kernels.colour import (
    rgb_to_yuv_i420,
    rgb_to_yuv_nv12,
    yuv_coefficients,
    yuv_to_rgb_i420,
    yuv_to_rgb_nv12,
)
from gpu.kernels.warp import crop_faces, mask_bounds, paste_back, paste_faces, paste_region

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


# ------------------------------------------------------------------ RGB -> YUV 4:2:0


def _rgb(seed: int = 0, height: int = H, width: int = W) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _smooth_rgb(seed: int) -> np.ndarray:
    """Slow sinusoids: neighbouring pixels differ by at most 3 codes per channel."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float64)
    channels = [
        127.5 + 110 * np.sin(2 * np.pi * (xx * rng.uniform(-1, 1) + yy * rng.uniform(-1, 1)) / 256 + rng.uniform(0, 6))
        for _ in range(3)
    ]
    return np.clip(np.rint(np.dstack(channels)), 0, 255).astype(np.uint8)


def _yuv_planes(buffer: np.ndarray, nv12: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Y (H, W), U and V (H/2, W/2) of a 4:2:0 buffer, not upsampled."""
    height = buffer.shape[0] * 2 // 3
    if nv12:
        return buffer[:height], buffer[height:, 0::2], buffer[height:, 1::2]
    chroma = buffer[height:].reshape(2, height // 2, -1)
    return buffer[:height], chroma[0], chroma[1]


def _plane_diffs(got: np.ndarray, want: np.ndarray, nv12: bool = False) -> list[int]:
    return [_max_diff(a, b) for a, b in zip(_yuv_planes(got, nv12), _yuv_planes(want, nv12), strict=True)]


# The standards' published RGB -> Y, Cb, Cr rows (R, G, B in 0..1 for limited range, as
# BT.601 / BT.709 print them; 0..255 for full range), not derived from Kr, Kb here.
_PUBLISHED_FORWARD = {
    ("bt601", False): ((65.481, 128.553, 24.966), (-37.797, -74.203, 112.0), (112.0, -93.786, -18.214)),
    ("bt709", False): ((46.559, 156.629, 15.812), (-25.664, -86.336, 112.0), (112.0, -101.730, -10.270)),
    ("bt601", True): ((0.299, 0.587, 0.114), (-0.168736, -0.331264, 0.5), (0.5, -0.418688, -0.081312)),
    ("bt709", True): ((0.2126, 0.7152, 0.0722), (-0.114572, -0.385428, 0.5), (0.5, -0.454153, -0.045847)),
}


@pytest.mark.parametrize(("matrix", "full"), list(_PUBLISHED_FORWARD))
def test_rgb_to_i420_is_the_published_matrix_with_a_2x2_box(matrix, full):
    """float64 reference: the published rows, chroma of the mean of each 2x2 block. The
    twin is float32, so a value that lands within ~1e-5 of .5 may round the other way."""
    rgb = _rgb(20).astype(np.float64)
    rows = [np.array(row) / (1.0 if full else 255.0) for row in _PUBLISHED_FORWARD[(matrix, full)]]
    block = rgb.reshape(H // 2, 2, W // 2, 2, 3).mean(axis=(1, 3))
    planes = [(0 if full else 16) + rgb @ rows[0], 128 + block @ rows[1], 128 + block @ rows[2]]
    want = np.concatenate([np.clip(np.rint(p), 0, 255).ravel() for p in planes]).reshape(H * 3 // 2, W)
    got = rgb_to_yuv_i420(rgb.astype(np.uint8), matrix=matrix, full_range=full)
    diff = np.abs(got.astype(int) - want)
    assert diff.max() <= 1 and (diff > 0).mean() < 1e-3


def test_rgb_to_i420_equals_opencv_where_its_chroma_rule_agrees():
    """``cv2.COLOR_RGB2YUV_I420`` is BT.601 limited range in fixed point, and takes each 2x2
    block's chroma from its top-left pixel (no averaging; measured on OpenCV 5.1). So: Y on
    noise and chroma on images constant over each 2x2 block, within 1 code (fixed-point vs
    float rounding; ~3% of values), while on noise the two chroma rules really differ."""
    noise = _rgb(21)
    assert _max_diff(rgb_to_yuv_i420(noise)[:H], cv2.cvtColor(noise, cv2.COLOR_RGB2YUV_I420)[:H]) <= 1
    blocks = noise[0::2, 0::2].repeat(2, axis=0).repeat(2, axis=1)
    assert _plane_diffs(rgb_to_yuv_i420(blocks), cv2.cvtColor(blocks, cv2.COLOR_RGB2YUV_I420)) <= [1, 1, 1]
    assert _max_diff(rgb_to_yuv_i420(noise)[H:], cv2.cvtColor(noise, cv2.COLOR_RGB2YUV_I420)[H:]) > 50


_COLORSPACES = {"bt601": "ITU601", "bt709": "ITU709"}


@pytest.mark.parametrize("nv12", [False, True], ids=["i420", "nv12"])
@pytest.mark.parametrize(("matrix", "full"), list(_PUBLISHED_FORWARD))
def test_rgb_to_yuv_equals_swscale_area_on_noise(matrix, full, nv12):
    """swscale with ``interpolation="AREA"`` uses the same rule (a 2x2 box) and layouts, so
    every plane agrees within 1 code on noise. The 1 is swscale's fixed point: about 1% of
    limited-range values, and in full range swscale floors chroma (about half the values are
    1 lower than ours, never higher)."""
    av = pytest.importorskip("av")  # the media stack; always there in CI
    rgb = _rgb(22)
    want = (
        av.VideoFrame.from_ndarray(rgb, format="rgb24")
        .reformat(
            format="nv12" if nv12 else "yuv420p",
            dst_colorspace=_COLORSPACES[matrix],
            dst_color_range="JPEG" if full else "MPEG",
            interpolation="AREA",
        )
        .to_ndarray()
    )
    convert = rgb_to_yuv_nv12 if nv12 else rgb_to_yuv_i420
    assert _plane_diffs(convert(rgb, matrix=matrix, full_range=full), want, nv12) <= [1, 1, 1]


@pytest.mark.parametrize(("matrix", "full"), list(_PUBLISHED_FORWARD))
def test_rgb_to_i420_equals_pyav_default_where_its_chroma_rule_agrees(matrix, full):
    """PyAV's default ``reformat(format="yuv420p")`` (swscale BILINEAR) averages column pairs
    like the box but filters rows [1,3,3,1]/8 (a vertical tent, so it differs from the box
    by up to ~30 codes on noise). Y is per pixel (within 1 on noise); chroma agrees within 1
    on vertical stripes two columns wide, where both filters see one colour per block."""
    av = pytest.importorskip("av")

    def pyav(rgb: np.ndarray) -> np.ndarray:
        frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
        space, colour_range = _COLORSPACES[matrix], "JPEG" if full else "MPEG"
        return frame.reformat(format="yuv420p", dst_colorspace=space, dst_color_range=colour_range).to_ndarray()

    noise = _rgb(23)
    assert _max_diff(rgb_to_yuv_i420(noise, matrix=matrix, full_range=full)[:H], pyav(noise)[:H]) <= 1
    stripes = _rgb(24, height=1, width=W // 2).repeat(2, axis=1).repeat(H, axis=0)
    assert _plane_diffs(rgb_to_yuv_i420(stripes, matrix=matrix, full_range=full), pyav(stripes)) <= [1, 1, 1]


@pytest.mark.parametrize("nv12", [False, True], ids=["i420", "nv12"])
@pytest.mark.parametrize(("matrix", "full"), list(_PUBLISHED_FORWARD))
def test_rgb_yuv_rgb_round_trip(matrix, full, nv12):
    """Images constant over each 2x2 block lose only quantisation: half a Y code (x1.16 in
    limited range) plus half a chroma code (x up to 2.02 x 1.14 for B) -> at most 2. Smooth
    images (neighbours within 3 codes) add the subsampling error: a pixel sits half a pixel
    from its block's chroma in each axis -> at most 5, under 1 on average (measured 4-5 and
    0.78)."""
    encode, decode = (rgb_to_yuv_nv12, yuv_to_rgb_nv12) if nv12 else (rgb_to_yuv_i420, yuv_to_rgb_i420)

    def round_trip(rgb: np.ndarray) -> np.ndarray:
        return decode(encode(rgb, matrix=matrix, full_range=full), matrix=matrix, full_range=full)

    for seed in range(4):
        blocks = _rgb(25 + seed, H // 2, W // 2).repeat(2, axis=0).repeat(2, axis=1)
        assert _max_diff(round_trip(blocks), blocks) <= 2
        smooth = _smooth_rgb(seed)
        diff = np.abs(round_trip(smooth).astype(int) - smooth)
        assert diff.max() <= 5 and diff.mean() < 1


def test_rgb_to_yuv_limited_range_stays_legal():
    corners = np.array([[r, g, b] for r in (0, 255) for g in (0, 255) for b in (0, 255)], np.uint8)
    blocks = corners[None].repeat(2, axis=0).repeat(2, axis=1)  # each corner of the cube fills a 2x2 block
    rgb = np.concatenate([blocks, _rgb(29, 2, 16)])
    for matrix in ("bt601", "bt709"):
        y, u, v = _yuv_planes(rgb_to_yuv_i420(rgb, matrix=matrix))
        assert (y.min(), y.max()) == (16, 235)
        assert min(u.min(), v.min()) == 16 and max(u.max(), v.max()) == 240


def test_i420_and_nv12_encode_the_same_planes():
    rgb = _rgb(30)
    for matrix in ("bt601", "bt709"):
        for full in (False, True):
            i420 = _yuv_planes(rgb_to_yuv_i420(rgb, matrix=matrix, full_range=full))
            nv12 = _yuv_planes(rgb_to_yuv_nv12(rgb, matrix=matrix, full_range=full), nv12=True)
            for a, b in zip(i420, nv12, strict=True):
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("convert", [rgb_to_yuv_i420, rgb_to_yuv_nv12])
def test_rgb_to_yuv_batch_equals_each_frame(convert):
    batch = np.stack([_rgb(31), _rgb(32), _rgb(33)])
    out = convert(batch, matrix="bt709", full_range=True)
    assert out.shape == (3, H * 3 // 2, W) and out.dtype == np.uint8
    for i in range(3):
        np.testing.assert_array_equal(out[i], convert(batch[i], matrix="bt709", full_range=True))
    assert convert(batch[:0]).shape == (0, H * 3 // 2, W)
    np.testing.assert_array_equal(convert(batch[:, ::-1]), convert(np.ascontiguousarray(batch[:, ::-1])))


def test_rgb_to_yuv_rejects_odd_and_wrong_frames():
    with pytest.raises(ValueError, match="even height and width"):
        rgb_to_yuv_i420(np.zeros((9, 6, 3), np.uint8))
    with pytest.raises(ValueError, match="even height and width"):
        rgb_to_yuv_nv12(np.zeros((2, 8, 7, 3), np.uint8))
    with pytest.raises(ValueError, match="uint8 RGB"):
        rgb_to_yuv_i420(np.zeros((8, 8, 3), np.float32))
    with pytest.raises(ValueError, match="uint8 RGB"):
        rgb_to_yuv_i420(np.zeros((8, 8, 4), np.uint8))
    with pytest.raises(ValueError, match="uint8 RGB"):
        rgb_to_yuv_nv12(np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match="bt601 or bt709"):
        rgb_to_yuv_i420(_rgb(), matrix="bt2020")
    with pytest.raises(ValueError, match="i420 or nv12"):
        ops.rgb_to_yuv(_rgb(), "yuy2")


def test_ops_rgb_to_yuv_dispatches_numpy_to_the_twins():
    rgb = _rgb(34)
    np.testing.assert_array_equal(ops.rgb_to_yuv(rgb), rgb_to_yuv_i420(rgb))
    np.testing.assert_array_equal(
        ops.rgb_to_yuv(rgb, "nv12", matrix="bt709", full_range=True), rgb_to_yuv_nv12(rgb, matrix="bt709", full_range=True)
    )


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


def test_mask_bounds_enclose_exactly_the_pixels_above_the_threshold():
    mask = np.zeros((64, 48), np.float32)
    assert mask_bounds(mask) is None
    mask[5, 40] = 1e-3  # not above it
    assert mask_bounds(mask) is None
    mask[7, 3], mask[50, 20], mask[30, 44] = 0.2, 1.0, 0.01  # scattered: no pixel at (3, 50) itself
    assert mask_bounds(mask) == (3, 7, 45, 51)


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


def test_paste_keeping_detail_gives_back_what_the_crops_round_trip_lost():
    """Frame -> crop -> frame softens twice (bilinear both ways): where the crop is the
    target's own, the frame comes back as it was; where the face was replaced, the face is
    the crop's, none of the frame's own detail (a dark line) showing through."""
    from gpu.kernels.warp import paste_back_keeping_detail

    rng = np.random.default_rng(5)
    frame = np.clip(128 + 12 * rng.standard_normal((120, 160, 3)), 0, 255).astype(np.uint8)
    frame[60:62, 40:120] = 30  # a dark line through the middle
    matrix = np.array([[0.8, 0.1, -20.0], [-0.1, 0.8, -10.0]], np.float32)  # the frame shrunk into a 64 crop
    target_crop = crop_faces([frame], matrix[None], 64)[0]
    mask = np.zeros((64, 64), np.float32)
    mask[4:60, 4:60] = 1.0
    untouched = frame.copy()
    paste_back(untouched, target_crop, mask, matrix)  # the plain paste of the target's own crop
    kept = frame.copy()
    paste_back_keeping_detail(kept, target_crop, target_crop, mask, np.zeros_like(mask), matrix)
    (rx0, ry0, rx1, ry1), _ = paste_region(mask, matrix, frame.shape[:2])
    softened = np.abs(untouched.astype(int) - frame)[ry0 + 4 : ry1 - 4, rx0 + 4 : rx1 - 4]
    assert softened.mean() > 3.0  # the plain round trip softened the frame
    assert np.abs(kept.astype(int) - frame).max() <= 1  # ... this one gives it back

    face = np.full((64, 64, 3), 90, np.uint8)  # a flat face in the middle of the crop
    replaced = np.zeros((64, 64), np.float32)
    replaced[12:52, 12:52] = 1.0
    swapped = frame.copy()
    paste_back_keeping_detail(swapped, face, target_crop, mask, replaced, matrix)
    inverse = cv2.invertAffineTransform(matrix)
    x0, y0 = np.round(inverse @ np.array([16, 16, 1.0])).astype(int)
    x1, y1 = np.round(inverse @ np.array([48, 48, 1.0])).astype(int)
    assert np.abs(swapped[y0:y1, x0:x1].astype(int) - 90).max() <= 1  # the face as the crop has it
    outside = np.ones(frame.shape[:2], bool)
    outside[ry0:ry1, rx0:rx1] = False
    assert np.array_equal(swapped[outside], frame[outside])
