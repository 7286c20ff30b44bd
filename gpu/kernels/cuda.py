"""CuPy ``RawKernel`` versions of the crop, paste-back and YUV <-> RGB kernels.

Each function has the signature of its CPU twin (``gpu.kernels.warp``,
``gpu.kernels.colour``) with CuPy arrays in place of NumPy ones, and keeps its
conventions, so ``tests/gpu/test_gpu_kernels.py`` compares the two:

- bilinear sampling is ``cv2.warpAffine`` INTER_LINEAR's: the destination pixel ``(x, y)``
  samples the source at ``M^-1 (x, y)`` (pixel centres on integers, no half-pixel shift),
  taps outside the image replicate the edge (BORDER_REPLICATE) or read 0 (the paste mask,
  BORDER_CONSTANT 0); float32 arithmetic, round to nearest even, saturate;
- paste-back touches the region ``gpu.kernels.warp.paste_region`` computes, quantises the
  warped crop to uint8 before blending and blends as ``cv2.blendLinear`` does
  (``(face*a + frame*(1-a)) / (a + (1-a) + 1e-5)``);
- YUV: see ``gpu.kernels.colour``.

Batching: ``crop_faces`` is one launch for every face of every frame (frames of any size:
the kernel gets a table of frame pointers); ``paste_faces`` is one launch per "layer" (the
k-th face of every frame), so faces of one frame never race and are blended in order;
``yuv_to_rgb_*`` take a ``(B, H*3/2, W)`` batch and ``rgb_to_yuv_*`` a ``(B, H, W, 3)`` batch
in one launch.

CuPy is imported inside the functions: importing this module needs only NumPy.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu.kernels.colour import YuvMatrix, check_rgb, rgb_coefficients, yuv_coefficients
from gpu.kernels.warp import paste_region

_BLOCK = 256

_SOURCE = r"""
extern "C" {

__device__ __forceinline__ unsigned char sat_u8(float v) {
    int i = __float2int_rn(v);
    return (unsigned char)(i < 0 ? 0 : (i > 255 ? 255 : i));
}

__device__ __forceinline__ int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// Replicate-border bilinear sample of channel c of an HxWx3 uint8 image (row pitch in bytes).
__device__ __forceinline__ float sample_u8(const unsigned char* img, int h, int w, long long pitch,
                                           float sx, float sy, int c) {
    float fx0 = floorf(sx), fy0 = floorf(sy);
    float ax = sx - fx0, ay = sy - fy0;
    int x0 = (int)fx0, y0 = (int)fy0;
    int xa = clampi(x0, 0, w - 1), xb = clampi(x0 + 1, 0, w - 1);
    int ya = clampi(y0, 0, h - 1), yb = clampi(y0 + 1, 0, h - 1);
    float p00 = img[ya * pitch + xa * 3 + c], p01 = img[ya * pitch + xb * 3 + c];
    float p10 = img[yb * pitch + xa * 3 + c], p11 = img[yb * pitch + xb * 3 + c];
    return (p00 * (1.f - ax) + p01 * ax) * (1.f - ay) + (p10 * (1.f - ax) + p11 * ax) * ay;
}

// Constant-0-border bilinear sample of an SxS float mask.
__device__ __forceinline__ float sample_mask(const float* m, int s, float sx, float sy) {
    float fx0 = floorf(sx), fy0 = floorf(sy);
    float ax = sx - fx0, ay = sy - fy0;
    int x0 = (int)fx0, y0 = (int)fy0;
    float p[4];
    for (int k = 0; k < 4; ++k) {
        int x = x0 + (k & 1), y = y0 + (k >> 1);
        p[k] = (x >= 0 && x < s && y >= 0 && y < s) ? m[y * s + x] : 0.f;
    }
    return (p[0] * (1.f - ax) + p[1] * ax) * (1.f - ay) + (p[2] * (1.f - ax) + p[3] * ax) * ay;
}

// One thread per crop pixel; blockIdx.y = face. inv[f] maps crop pixels -> frame pixels.
__global__ void crop_faces(const unsigned long long* frames, const int* dims, const float* inv,
                           unsigned char* out, int size) {
    int face = blockIdx.y;
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= size * size) return;
    int x = p % size, y = p / size;
    const unsigned char* img = (const unsigned char*)frames[face];
    int h = dims[face * 3], w = dims[face * 3 + 1];
    long long pitch = dims[face * 3 + 2];
    const float* m = inv + face * 6;
    float sx = m[0] * x + m[1] * y + m[2];
    float sy = m[3] * x + m[4] * y + m[5];
    unsigned char* o = out + ((long long)face * size * size + p) * 3;
    for (int c = 0; c < 3; ++c) o[c] = sat_u8(sample_u8(img, h, w, pitch, sx, sy, c));
}

// One thread per ROI pixel; blockIdx.y = face of this layer (distinct frames).
// roi[f] = x0, y0, x1, y1, frame h, w, pitch; map[f] = ROI pixel -> crop pixel (2x3).
__global__ void paste_faces(const unsigned long long* frames, const int* roi, const float* map,
                            const unsigned char* crops, const float* masks, const int* crop_index,
                            int size) {
    int face = blockIdx.y;
    const int* r = roi + face * 7;
    int rw = r[2] - r[0], rh = r[3] - r[1];
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= rw * rh) return;
    int x = p % rw, y = p / rw;
    const float* m = map + face * 6;
    float sx = m[0] * x + m[1] * y + m[2];
    float sy = m[3] * x + m[4] * y + m[5];
    int ci = crop_index[face];
    const unsigned char* crop = crops + (long long)ci * size * size * 3;
    float a = sample_mask(masks + (long long)ci * size * size, size, sx, sy);
    float b = 1.f - a;
    float norm = 1.f / (a + b + 1e-5f);
    unsigned char* px = (unsigned char*)frames[face] + (long long)(r[1] + y) * r[6] + (long long)(r[0] + x) * 3;
    for (int c = 0; c < 3; ++c) {
        float f = (float)sat_u8(sample_u8(crop, size, size, (long long)size * 3, sx, sy, c));
        px[c] = sat_u8((f * a + (float)px[c] * b) * norm);
    }
}

// k = y_offset, y_scale, c_scale, rv, gu, gv, bu. One thread per output pixel, blockIdx.y = frame.
// nv12 != 0: one interleaved UV plane; else I420 (U plane then V plane).
__global__ void yuv420_to_rgb(const unsigned char* src, unsigned char* dst, int h, int w, int nv12,
                              float y_offset, float y_scale, float c_scale,
                              float rv, float gu, float gv, float bu) {
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= h * w) return;
    int x = p % w, y = p / w;
    const unsigned char* f = src + (long long)blockIdx.y * (h * 3 / 2) * w;
    const unsigned char* chroma = f + (long long)h * w;
    float U, V;
    if (nv12) {
        const unsigned char* uv = chroma + (long long)(y >> 1) * w + (x >> 1) * 2;
        U = uv[0]; V = uv[1];
    } else {
        int cw = w >> 1;
        long long off = (long long)(y >> 1) * cw + (x >> 1);
        U = chroma[off]; V = chroma[(long long)(h >> 1) * cw + off];
    }
    float luma = fmaxf((float)f[(long long)y * w + x] - y_offset, 0.f) * y_scale;
    float cu = (U - 128.f) * c_scale, cv = (V - 128.f) * c_scale;
    unsigned char* o = dst + ((long long)blockIdx.y * h * w + p) * 3;
    o[0] = sat_u8(luma + rv * cv);
    o[1] = sat_u8(luma + gu * cu + gv * cv);
    o[2] = sat_u8(luma + bu * cu);
}

// k = y_offset, yr, yg, yb, ur, ug, ub, vr, vg, vb. One thread per 2x2 block (4 Y, 1 U, 1 V),
// blockIdx.y = frame. The float operations are in the CPU twin's order (colour._to_yuv):
// Y per pixel, then U, V from the block's mean RGB (the sum of four codes and * 0.25 are exact).
__global__ void rgb_to_yuv420(const unsigned char* src, unsigned char* dst, int h, int w, int nv12,
                              float y_offset, float yr, float yg, float yb,
                              float ur, float ug, float ub, float vr, float vg, float vb) {
    int cw = w >> 1, ch = h >> 1;
    int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= ch * cw) return;
    int bx = p % cw, by = p / cw;
    const unsigned char* f = src + (long long)blockIdx.y * h * w * 3;
    unsigned char* o = dst + (long long)blockIdx.y * (h * 3 / 2) * w;
    float r = 0.f, g = 0.f, b = 0.f;
    for (int k = 0; k < 4; ++k) {
        int x = 2 * bx + (k & 1), y = 2 * by + (k >> 1);
        const unsigned char* px = f + ((long long)y * w + x) * 3;
        float pr = px[0], pg = px[1], pb = px[2];
        o[(long long)y * w + x] = sat_u8(yr * pr + yg * pg + yb * pb + y_offset);
        r += pr; g += pg; b += pb;
    }
    r *= 0.25f; g *= 0.25f; b *= 0.25f;
    unsigned char u = sat_u8(ur * r + ug * g + ub * b + 128.f);
    unsigned char v = sat_u8(vr * r + vg * g + vb * b + 128.f);
    unsigned char* chroma = o + (long long)h * w;
    if (nv12) {
        unsigned char* uv = chroma + (long long)by * w + bx * 2;
        uv[0] = u; uv[1] = v;
    } else {
        long long off = (long long)by * cw + bx;
        chroma[off] = u;
        chroma[(long long)ch * cw + off] = v;
    }
}

}
"""


@functools.cache
def _module():
    import cupy

    # -fmad=false: no fused multiply-adds, so the float32 arithmetic rounds like NumPy's.
    return cupy.RawModule(code=_SOURCE, options=("--fmad=false",))


def _kernel(name: str):
    return _module().get_function(name)


def _frame_table(frames: Sequence[Any]) -> tuple[Any, Any]:
    import cupy

    pointers, dims = [], []
    for frame in frames:
        if not isinstance(frame, cupy.ndarray) or frame.dtype != cupy.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError("frames must be (H, W, 3) uint8 CuPy arrays")
        if frame.strides[1:] != (3, 1):
            raise ValueError("frames must be contiguous within rows (a row pitch is allowed)")
        pointers.append(frame.data.ptr)
        dims.append((frame.shape[0], frame.shape[1], frame.strides[0]))
    return cupy.asarray(np.array(pointers, dtype=np.uint64)), cupy.asarray(np.array(dims, dtype=np.int32))


def crop_faces(frames: Sequence[Any], matrices: np.ndarray, size: int) -> Any:
    """Device twin of ``gpu.kernels.warp.crop_faces``: one launch for all faces.

    ``frames[i]`` (H_i, W_i, 3) uint8 CuPy arrays (repeats allowed), ``matrices`` (N, 2, 3)
    frame -> crop, on the host or the device. Returns (N, S, S, 3) uint8 CuPy."""
    import cupy

    matrices = np.asarray(matrices.get() if hasattr(matrices, "get") else matrices, dtype=np.float64)
    count = len(matrices)
    out = cupy.empty((count, size, size, 3), dtype=cupy.uint8)
    if count == 0:
        return out
    if len(frames) != count:
        raise ValueError(f"{len(frames)} frames for {count} matrices")
    inverse = np.stack([_invert(m) for m in matrices]).astype(np.float32)
    pointers, dims = _frame_table(frames)
    grid = ((size * size + _BLOCK - 1) // _BLOCK, count)
    _kernel("crop_faces")(grid, (_BLOCK,), (pointers, dims, cupy.asarray(inverse), out, np.int32(size)))
    return out


def paste_back(frame: Any, crop: Any, mask: Any, matrix: np.ndarray) -> None:
    """Device twin of ``gpu.kernels.warp.paste_back`` (one face, in place)."""
    paste_faces([frame], [0], crop[None], mask[None], np.asarray(matrix)[None])


def paste_faces(frames: Sequence[Any], frame_index: Sequence[int], crops: Any, masks: Any, matrices: np.ndarray) -> None:
    """Device twin of ``gpu.kernels.warp.paste_faces``: face ``i`` (crop (S,S,3) uint8, mask
    (S,S) float32 in [0,1]) is blended into ``frames[frame_index[i]]`` in place. One launch
    per layer (the k-th face of each frame); the mask bounds come back in one transfer."""
    import cupy

    # keep the caller's dtype: the region is computed exactly as the CPU twin computes it
    matrices = np.asarray(matrices.get() if hasattr(matrices, "get") else matrices)
    count = len(matrices)
    if count == 0:
        return
    crops = cupy.ascontiguousarray(crops, dtype=cupy.uint8)
    masks = cupy.ascontiguousarray(masks, dtype=cupy.float32)
    size = crops.shape[1]
    bounds = _mask_bounds(masks)
    layers: list[list[tuple[int, tuple[int, int, int, int], np.ndarray]]] = []
    seen: dict[int, int] = {}
    for i, index in enumerate(frame_index):
        frame = frames[index]
        region = paste_region(bounds[i], matrices[i], frame.shape[:2])
        if region is None:
            continue
        layer = seen.get(index, 0)
        seen[index] = layer + 1
        while len(layers) <= layer:
            layers.append([])
        layers[layer].append((i, *region))
    for layer in layers:
        pointers, roi, maps, crop_index, largest = [], [], [], [], 0
        for i, (x0, y0, x1, y1), roi_to_crop in layer:
            frame = frames[frame_index[i]]
            pointers.append(frame.data.ptr)
            roi.append((x0, y0, x1, y1, frame.shape[0], frame.shape[1], frame.strides[0]))
            maps.append(roi_to_crop.reshape(6))
            crop_index.append(i)
            largest = max(largest, (x1 - x0) * (y1 - y0))
        grid = ((largest + _BLOCK - 1) // _BLOCK, len(layer))
        _kernel("paste_faces")(
            grid,
            (_BLOCK,),
            (
                cupy.asarray(np.array(pointers, dtype=np.uint64)),
                cupy.asarray(np.array(roi, dtype=np.int32)),
                cupy.asarray(np.array(maps, dtype=np.float32)),
                crops,
                masks,
                cupy.asarray(np.array(crop_index, dtype=np.int32)),
                np.int32(size),
            ),
        )


def yuv_to_rgb_i420(buffer: Any, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> Any:
    """Device twin of ``gpu.kernels.colour.yuv_to_rgb_i420`` (CuPy in and out)."""
    return _yuv(buffer, False, matrix, full_range)


def yuv_to_rgb_nv12(buffer: Any, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> Any:
    """Device twin of ``gpu.kernels.colour.yuv_to_rgb_nv12`` (CuPy in and out)."""
    return _yuv(buffer, True, matrix, full_range)


def _yuv(buffer: Any, nv12: bool, matrix: YuvMatrix, full_range: bool) -> Any:
    import cupy

    buffer = cupy.ascontiguousarray(buffer)
    if buffer.dtype != cupy.uint8 or buffer.ndim not in (2, 3):
        raise ValueError(f"expected a (H*3/2, W) or (B, H*3/2, W) uint8 buffer, got {buffer.dtype} {buffer.shape}")
    rows, width = buffer.shape[-2:]
    height = rows * 2 // 3
    if rows % 3 or width % 2 or height % 2:
        raise ValueError(f"a 4:2:0 buffer has H*3/2 rows with H and W even (got {rows}x{width})")
    batch = 1 if buffer.ndim == 2 else buffer.shape[0]
    out = cupy.empty((*buffer.shape[:-2], height, width, 3), dtype=cupy.uint8)
    k = yuv_coefficients(matrix, full_range)
    constants = [np.float32(k[name]) for name in ("y_offset", "y_scale", "c_scale", "rv", "gu", "gv", "bu")]
    grid = ((height * width + _BLOCK - 1) // _BLOCK, batch)
    if batch:
        _kernel("yuv420_to_rgb")(
            grid, (_BLOCK,), (buffer, out, np.int32(height), np.int32(width), np.int32(nv12), *constants)
        )
    return out


def rgb_to_yuv_i420(rgb: Any, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> Any:
    """Device twin of ``gpu.kernels.colour.rgb_to_yuv_i420`` (CuPy in and out)."""
    return _rgb(rgb, False, matrix, full_range)


def rgb_to_yuv_nv12(rgb: Any, *, matrix: YuvMatrix = "bt601", full_range: bool = False) -> Any:
    """Device twin of ``gpu.kernels.colour.rgb_to_yuv_nv12`` (CuPy in and out)."""
    return _rgb(rgb, True, matrix, full_range)


def _rgb(rgb: Any, nv12: bool, matrix: YuvMatrix, full_range: bool) -> Any:
    import cupy

    height, width = check_rgb(rgb)
    rgb = cupy.ascontiguousarray(rgb)
    batch = 1 if rgb.ndim == 3 else rgb.shape[0]
    out = cupy.empty((*rgb.shape[:-3], height * 3 // 2, width), dtype=cupy.uint8)
    k = rgb_coefficients(matrix, full_range)
    constants = [np.float32(k[name]) for name in ("y_offset", "yr", "yg", "yb", "ur", "ug", "ub", "vr", "vg", "vb")]
    blocks = (height // 2) * (width // 2)
    if batch and blocks:
        grid = ((blocks + _BLOCK - 1) // _BLOCK, batch)
        args = (rgb, out, np.int32(height), np.int32(width), np.int32(nv12), *constants)
        _kernel("rgb_to_yuv420")(grid, (_BLOCK,), args)
    return out


def _invert(matrix: np.ndarray) -> np.ndarray:
    """``cv2.invertAffineTransform`` in float64 (crop pixel -> frame pixel)."""
    a, b, c = matrix[0]
    d, e, f = matrix[1]
    det = a * e - b * d
    det = 1.0 / det if det != 0 else 0.0
    ia, ib, id_, ie = e * det, -b * det, -d * det, a * det
    return np.array([ia, ib, -ia * c - ib * f, id_, ie, -id_ * c - ie * f])


def _mask_bounds(masks: Any) -> list[tuple[int, int, int, int] | None]:
    """Per mask, ``gpu.kernels.warp.mask_bounds`` computed on the device, one transfer."""
    import cupy

    inside = masks > 1e-3
    rows = inside.any(axis=2)  # (N, S): which rows have mask pixels
    cols = inside.any(axis=1)
    size_y, size_x = masks.shape[1], masks.shape[2]
    first_x = cols.argmax(axis=1)
    last_x = size_x - cols[:, ::-1].argmax(axis=1)
    first_y = rows.argmax(axis=1)
    last_y = size_y - rows[:, ::-1].argmax(axis=1)
    table = cupy.stack([first_x, first_y, last_x, last_y, rows.any(axis=1)], axis=1).get()
    return [tuple(int(v) for v in row[:4]) if row[4] else None for row in table]
