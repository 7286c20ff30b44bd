"""The per-pixel half of the 3D-aware "mesh3d" swapper, as an ONNX graph built in code.

The host rasterises the target's (shape-transferred) mesh with back faces culled and tells
every crop pixel where it lies in UV space (``grid``) and how the target's light falls
there (``shading``, smooth, so at half resolution); this graph samples the source's albedo
through the grid and multiplies it by the shading (the source face re-lit as the target
is lit) and blends the result into the target crop over a Laplacian pyramid: fine
detail switches at the seam, low frequencies fade over a wide band, so neither a hard
edge nor a ghosted double contour shows. The finest level also gets the target's own
grain back (see ``GRAIN_LIMIT``): as much of the target's finest detail as the re-lit face
lacks, so the face is as fine-grained as the skin around it. It runs through the runner
and micro-batcher like every swap model (on a GPU through Torch or TensorRT). On the CPU,
``Mesh3dGraphOnCpu`` runs the same graph with OpenCV: ONNX Runtime's GridSample and Resize take 8 ms of CPU per face
there, OpenCV's remap and resize ~2.5 ms, and only over the rows the face covers.

Inputs (N = faces, S = crop size, T = albedo size):
  target   [N,3,S,S] float32 RGB in [0,1]   aligned target crop
  albedo   [N,3,T,T] float32 in [0,2]       source albedo in UV space (1 = average skin)
  shading  [N,3,S/2,S/2] float32 >= 0       target irradiance on the crop (x skin colour), half resolution
  grid     [N,S,S,2] float32 in [-1,1]      UV position of each crop pixel (2u-1, 2v-1)
  mask     [N,1,S,S] float32 in [0,1]       feathered face region, 0 where not rendered
  keep     [N,1,S,S] float32 in [0,1]       1 where the target must stay exactly (its eyes and
                                           mouth opening: the pyramid's low frequencies reach there)
  blend    [N,1,1,1] float32 in [0,1]       swap strength
Output:
  swapped  [N,3,S,S] float32 RGB in [0,1]
"""

from __future__ import annotations

from collections.abc import Mapping

import cv2
import numpy as np
import onnx
from onnx import numpy_helper

from gpu.runners.base import TensorSpec
from gpu.threads import usable_cpus
from gpu.swappers.swap_graph import GraphNodes, swap_model, tensor

LEVELS = 4  # Laplacian levels: S must be divisible by 2**LEVELS (crop sizes are multiples of 32)
GRAIN_LIMIT = 1.6  # the target's finest detail is its grain (pores, sensor noise) where its local energy (over
# ``GRAIN_AREA`` pixels) is near the face's grain level, and comes back where the re-lit face lacks it (the albedo's
# anti-aliasing and two bilinear resamplings take most of that band: the face read smoother than its neck and
# forehead, a mask); where the local energy is well above that level (a glasses rim, a lid's or lip's line, a deep
# wrinkle: structure, not grain) it is gated out, x exp(-local / (GRAIN_LIMIT^2 x level)), shoulders and all:
# fading each pixel by its own size (x exp(-(x/limit)^2)) left a rim's soft shoulders as a faint outline
GRAIN_LEVEL_FLOOR = 1e-6  # the grain's level is the geometric mean of the local energy over the face, each floored
# here (~8-bit rounding's energy: a clipped, flat patch counts as that, not as nothing). The arithmetic mean was
# dominated by the structure it should tell grain from: on a heavily wrinkled face in glasses the gate let the
# rims through (their outline showed on the swapped face)
GRAIN_AREA = 7  # pixels a side: the neighbourhood whose energy tells grain from structure


def build_mesh3d_swap_graph(name: str = "mesh3d_swap", levels: int = LEVELS) -> onnx.ModelProto:
    """Build the graph; batch and spatial sizes are symbolic."""
    nodes = GraphNodes()
    node = nodes.add
    inits = [
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32), "double"),
        numpy_helper.from_array(np.zeros(0, dtype=np.float32), "no_roi"),
        numpy_helper.from_array(np.array([1, 2, 3], dtype=np.int64), "per_face"),
        numpy_helper.from_array(np.array(GRAIN_LIMIT**2, dtype=np.float32), "limit_squared"),
        numpy_helper.from_array(np.array(1e-12, dtype=np.float32), "tiny"),
        numpy_helper.from_array(np.array(GRAIN_LEVEL_FLOOR, dtype=np.float32), "level_floor"),
    ]

    def sample(texture: str) -> str:
        return node("GridSample", [texture, "grid"], f"{texture}_sampled", mode="bilinear", padding_mode="border", align_corners=0)

    def down(image: str, level: int) -> str:
        return node("AveragePool", [image], f"{image}_down{level}", kernel_shape=[2, 2], strides=[2, 2])

    def up(image: str, like: str) -> str:
        return node("Resize", [image, "no_roi", "double"], f"{image}_up_{like}", mode="linear")

    face = node("Mul", [sample("albedo"), up("shading", "crop")], "face")
    region = node("Ceil", ["mask"], "region")  # the face was rendered here: elsewhere the target passes
    delta = node("Mul", [node("Sub", [face, "target"], "face_minus_target"), region], "delta0")

    # Gaussian-ish pyramids of the change and of the mask; Laplacian levels of the change
    gauss, masks = [delta], ["mask"]
    for level in range(1, levels + 1):
        gauss.append(down(gauss[-1], level))
        masks.append(down(masks[-1], level))
    collapsed = node("Mul", [gauss[levels], masks[levels]], f"blended{levels}")
    for level in range(levels - 1, -1, -1):
        detail = node("Sub", [gauss[level], up(gauss[level + 1], f"l{level}")], f"detail{level}")
        weighted = node("Mul", [detail, masks[level]], f"weighted{level}")
        collapsed = node("Add", [weighted, up(collapsed, f"c{level}")], f"blended{level}")

    grain = _grain_nodes(node, up, down, "detail0")
    with_grain = node("Add", [collapsed, node("Mul", [grain, "mask"], "grain_in_face")], "with_grain")
    change = node("Mul", [with_grain, node("Sub", ["one", "keep"], "replace")], "change")
    swapped_raw = node("Add", ["target", node("Mul", [change, "blend"], "blend_step")], "swapped_raw")
    node("Clip", [swapped_raw, "zero", "one"], "swapped")

    return swap_model(
        name,
        nodes,
        inputs=[
            tensor("target", "N", 3, "S", "S"),
            tensor("albedo", "N", 3, "T", "T"),
            tensor("shading", "N", 3, "H", "H"),
            tensor("grid", "N", "S", "S", 2),
            tensor("mask", "N", 1, "S", "S"),
            tensor("keep", "N", 1, "S", "S"),
            tensor("blend", "N", 1, 1, 1),
        ],
        outputs=[tensor("swapped", "N", 3, "S", "S")],
        initializer=inits,
    )


def _grain_nodes(node, up, down, face_detail: str) -> str:
    """The target's grain the face lacks, [N,1,S,S] (luma; see ``GRAIN_LIMIT``): the target's
    finest detail gated to its grain, times sqrt(1 - the share of that grain's energy the
    face already has in its own finest detail, clipped at the gate's bound), energies as
    mask-weighted means over the face, per face."""
    luma = node("ReduceMean", ["target"], "target_luma", axes=[1], keepdims=1)
    target_fine = node("Sub", [luma, up(down(luma, 0), "luma")], "target_fine")
    face_fine = node("Add", [target_fine, node("ReduceMean", [face_detail], "face_detail_luma", axes=[1], keepdims=1)], "face_fine")
    weight = node("Add", [node("ReduceSum", ["mask", "per_face"], "mask_sum", keepdims=1), "tiny"], "mask_weight")

    def mean_square(image: str) -> str:
        squared = node("Mul", [image, image], f"{image}_sq")
        weighted = node("Mul", [squared, "mask"], f"{image}_sq_masked")
        return node("Div", [node("ReduceSum", [weighted, "per_face"], f"{image}_sq_sum", keepdims=1), weight], f"{image}_ms")

    target_squared = node("Mul", [target_fine, target_fine], "target_fine_sq")
    pad = GRAIN_AREA // 2
    local = node("AveragePool", [target_squared], "target_fine_local", kernel_shape=[GRAIN_AREA] * 2, strides=[1, 1],
                 pads=[pad] * 4, count_include_pad=1)
    # the grain's level: the geometric mean of the local energy over the face (see GRAIN_LEVEL_FLOOR)
    log_local = node("Log", [node("Add", [local, "level_floor"], "local_floored")], "local_log")
    mean_log = node("Div", [node("ReduceSum", [node("Mul", [log_local, "mask"], "local_log_masked"), "per_face"],
                                 "local_log_sum", keepdims=1), weight], "local_log_mean")
    level = node("Exp", [mean_log], "grain_level")
    scale = node("Add", [node("Mul", [level, "limit_squared"], "gate_scale_raw"), "tiny"], "gate_scale")
    # x exp(-local energy / scale): grain kept, structure out
    gate = node("Exp", [node("Neg", [node("Div", [local, scale], "target_fine_ratio")], "target_fine_neg")], "target_fine_gate")
    target_grain = node("Mul", [target_fine, gate], "target_fine_gated")
    # the face's own grain: its finest detail clipped where the target's grain ends (a sharper source's pores
    # count in full, its features' edges hardly: they cover little of the face)
    bound = node("Sqrt", [scale], "grain_bound")
    face_grain = node("Max", [node("Min", [face_fine, bound], "face_fine_low"), node("Neg", [bound], "grain_floor")], "face_grain")
    target_energy = node("Add", [mean_square(target_grain), "tiny"], "target_energy")
    lacking = node("Sub", ["one", node("Div", [mean_square(face_grain), target_energy], "face_share")], "lacking")
    amount = node("Sqrt", [node("Clip", [lacking, "zero", "one"], "lacking_clipped")], "grain_amount")
    return node("Mul", [target_grain, amount], "grain")


_FLOAT = np.dtype(np.float32)


class Mesh3dGraphOnCpu:
    """The graph's CPU twin: the same inputs, output and arithmetic (within float rounding),
    computed with OpenCV, row by row, in the calling thread (the node's thread budget gives
    OpenCV one thread per call). The albedo is sampled and re-lit only inside the bounding
    box of the face region, and the pyramid runs only over ``_window``'s part of the crop
    around it: outside that the graph's change is zero, and inside it every value is the
    whole crop's (a webcam face's window is ~60 % of the crop)."""

    name = "mesh3d_swap (OpenCV)"
    inputs = tuple(TensorSpec(name, shape, _FLOAT) for name, shape in (
        ("target", ("N", 3, "S", "S")), ("albedo", ("N", 3, "T", "T")), ("shading", ("N", 3, "H", "H")),
        ("grid", ("N", "S", "S", 2)), ("mask", ("N", 1, "S", "S")), ("keep", ("N", 1, "S", "S")), ("blend", ("N", 1, 1, 1)),
    ))
    outputs = (TensorSpec("swapped", ("N", 3, "S", "S"), _FLOAT),)
    gains_from_batching = False  # rows run one after the other: the batcher need not wait for company

    def __init__(self, levels: int = LEVELS) -> None:
        self.levels = levels
        self.max_concurrency = usable_cpus()  # stateless: calls may run side by side, one per core

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        rows = {spec.name: np.ascontiguousarray(feeds[spec.name], dtype=np.float32) for spec in self.inputs}
        target = rows["target"]
        size = target.shape[-1]
        if size % (2**self.levels) or target.shape[-2] != size:
            raise ValueError(f"mesh3d crops must be square with sides divisible by {2**self.levels}, not {target.shape[2:]}")
        swapped = np.empty_like(target)
        for i in range(target.shape[0]):
            row = {name: value[i] for name, value in rows.items()}
            np.clip(row["target"], 0.0, 1.0, out=swapped[i])  # the graph's output where its change is zero
            window = _window(row["mask"][0], self.levels)
            if window is None:
                continue
            y0, y1, x0, x1 = window
            inside = (slice(None), slice(y0, y1), slice(x0, x1))
            mask = row["mask"][inside]
            change, face_detail = self._collapse(_face_minus_target(row, window), mask)
            change += _grain(row["target"][inside], face_detail, mask) * mask
            change *= (1.0 - row["keep"][inside]) * row["blend"]
            change += row["target"][inside]
            np.clip(change, 0.0, 1.0, out=swapped[i][inside])
        return [swapped]

    def _collapse(self, delta: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The Laplacian pyramid blend of ``delta`` (3, S, S) under ``mask`` (1, S, S), and
        the finest level of ``delta``'s luma (1, S, S) before the mask (what the face
        changes of the target's finest detail: the grain's measure)."""
        gauss, masks = [delta], [mask]
        for _ in range(self.levels):
            gauss.append(_down(gauss[-1]))
            masks.append(_down(masks[-1]))
        collapsed = gauss[-1] * masks[-1]
        finest = None
        for level in range(self.levels - 1, -1, -1):
            detail = gauss[level] - _up(gauss[level + 1])
            if level == 0:
                finest = detail.mean(0, keepdims=True)
            detail *= masks[level]
            detail += _up(collapsed)
            collapsed = detail
        return collapsed, finest


def _window(mask: np.ndarray, levels: int) -> tuple[int, int, int, int] | None:
    """(y0, y1, x0, x1): the part of the (S, S) crop the pyramid blend can change, or None
    when the mask is empty. The mask's bounding box, out to multiples of ``2**levels`` (so
    every level's 2x2 pooling sees the blocks the whole crop's does) and ``2**levels``
    further: each upsampling reaches one pixel beyond its input at its own level, so the
    change spreads ``2**levels - 1`` pixels past the box, and what each level upsamples is
    zero on the window's edge and one cell beyond it, where clamping to the window reads
    what the whole crop holds there (zero). Clipped to the crop, whose own edge clamps alike."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    if not len(rows):
        return None
    step = 2**levels
    height, width = mask.shape
    y0, x0 = max(0, (rows[0] // step - 1) * step), max(0, (cols[0] // step - 1) * step)
    y1, x1 = min(height, (rows[-1] // step + 2) * step), min(width, (cols[-1] // step + 2) * step)
    return int(y0), int(y1), int(x0), int(x1)


def _face_minus_target(row: Mapping[str, np.ndarray], window: tuple[int, int, int, int]) -> np.ndarray:
    """(3, h, w) over ``window`` (y0, y1, x0, x1) of the crop: (albedo sampled through the
    grid x the shading, upsampled) - target, times ceil(mask): the graph's ``delta0``."""
    target, albedo, shading, grid = row["target"], row["albedo"], row["shading"], row["grid"]
    size, texels = target.shape[-1], albedo.shape[-1]
    wy0, wy1, wx0, wx1 = window
    region = np.ceil(row["mask"][0, wy0:wy1, wx0:wx1])
    delta = np.zeros((target.shape[0], wy1 - wy0, wx1 - wx0), target.dtype)
    rows, cols = np.flatnonzero(region.any(axis=1)), np.flatnonzero(region.any(axis=0))
    if not len(rows):
        return delta
    y0, y1, x0, x1 = rows[0] + wy0, rows[-1] + 1 + wy0, cols[0] + wx0, cols[-1] + 1 + wx0
    # GridSample, bilinear, align_corners=0: texel x = ((g + 1) * T - 1) / 2; border padding
    # clamps to the edge texel, as BORDER_REPLICATE does
    at = grid[y0:y1, x0:x1] * np.float32(texels / 2) + np.float32((texels - 1) / 2)
    inside = region[y0 - wy0:y1 - wy0, x0 - wx0:x1 - wx0]
    for channel in range(3):
        light = cv2.resize(shading[channel], (size, size), interpolation=cv2.INTER_LINEAR)[y0:y1, x0:x1]
        face = cv2.remap(albedo[channel], at, None, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        face *= light
        face -= target[channel, y0:y1, x0:x1]
        face *= inside
        delta[channel, y0 - wy0:y1 - wy0, x0 - wx0:x1 - wx0] = face
    return delta


def _grain(target: np.ndarray, face_detail: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The graph's ``grain`` over a window: (1, h, w) from the target (3, h, w), the finest
    level of the face's change (1, h, w) and the mask (1, h, w); the window holds every
    pixel the mask weighs (and ``GRAIN_AREA`` around them), so its sums are the whole crop's."""
    luma = target.mean(0, keepdims=True)
    target_fine = luma - _up(_down(luma))
    face_fine = target_fine + face_detail
    weight = np.float32(mask.sum() + 1e-12)

    def mean_square(image: np.ndarray) -> np.float32:
        return np.float32((image * image * mask).sum() / weight)

    local = cv2.boxFilter(target_fine[0] * target_fine[0], -1, (GRAIN_AREA, GRAIN_AREA), normalize=True,
                          borderType=cv2.BORDER_CONSTANT)  # zero past the edges, as the graph's AveragePool counts its padding
    level = np.exp(np.float32((np.log(local + np.float32(GRAIN_LEVEL_FLOOR)) * mask[0]).sum() / weight))
    scale = np.float32(level * np.float32(GRAIN_LIMIT**2) + np.float32(1e-12))
    target_grain = (target_fine[0] * np.exp(-local / scale))[None]
    bound = np.sqrt(np.float32(scale))
    face_grain = np.clip(face_fine, -bound, bound)
    lacking = 1.0 - mean_square(face_grain) / (mean_square(target_grain) + np.float32(1e-12))
    return target_grain * np.float32(np.sqrt(np.clip(lacking, 0.0, 1.0)))


def _down(image: np.ndarray) -> np.ndarray:
    """AveragePool 2x2, stride 2, of (C, H, W) with H, W even: the planes stacked as one
    (C*H, W) image, since no 2x2 block straddles two planes."""
    planes, height, width = image.shape
    flat = cv2.resize(image.reshape(planes * height, width), (width // 2, planes * height // 2), interpolation=cv2.INTER_AREA)
    return flat.reshape(planes, height // 2, width // 2)


def _up(image: np.ndarray) -> np.ndarray:
    """Resize x2, linear, half-pixel centres with the edge clamped (ONNX Resize's default
    and OpenCV's INTER_LINEAR), plane by plane."""
    planes, height, width = image.shape
    out = np.empty((planes, 2 * height, 2 * width), np.float32)
    for plane in range(planes):
        cv2.resize(image[plane], (2 * width, 2 * height), dst=out[plane], interpolation=cv2.INTER_LINEAR)
    return out
