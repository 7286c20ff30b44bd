"""The per-pixel half of the built-in mesh swapper, as an ONNX graph built in code.

Keeping it a graph (not OpenCV calls) lets the weight-free swapper run through the same
runner and batcher as the neural models, so batching, the Torch/TensorRT runners and the
GPU check are exercised by a model every machine has.

Inputs (N = faces, S = crop size, T = source texture size):
  target  [N,3,S,S] float32 RGB in [0,1]   aligned target crop
  source  [N,3,T,T] float32 RGB in [0,1]   aligned source texture
  grid    [N,S,S,2] float32 in [-1,1]      where each target pixel samples the source
  mask    [N,1,S,S] float32 in [0,1]       feathered face region: weights the colour
                                           statistics; outside it (mask = 0) target passes
  blend   [N,1,1,1] float32 in [0,1]       swap strength
  colour  [N,1,1,1] float32 0 or 1         colour match on/off
Output:
  swapped [N,3,S,S] float32 RGB in [0,1]
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from gpu.swappers.swap_graph import GraphNodes, swap_model, tensor

# RGB -> YCbCr (BT.601, full range, offsets dropped): colour statistics are matched per
# luma/chroma channel so skin tone follows the target without mixing in its texture.
_RGB_TO_YCC = np.array(
    [[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]], dtype=np.float32
)
# Luma contrast is matched only partly: the source's own shading carries its identity.
_STD_GAIN_LIMITS = (0.75, 1.33)


def build_mesh_swap_graph(name: str = "mesh_swap") -> onnx.ModelProto:
    """Build the graph; batch and spatial sizes are symbolic.

    Colour statistics are taken on 4x-pooled images (means and spreads barely change, the
    cost drops 16x); the match itself is one 3x3 colour matrix + offset per row, so only
    the sampling, one small MatMul and the blend touch every pixel."""
    nodes = GraphNodes()
    node = nodes.add
    inverse = np.linalg.inv(_RGB_TO_YCC).astype(np.float32)
    inits = [
        numpy_helper.from_array(_RGB_TO_YCC.reshape(3, 3, 1, 1), "rgb_to_ycc_kernel"),
        numpy_helper.from_array(_RGB_TO_YCC, "rgb_to_ycc"),
        numpy_helper.from_array(inverse, "ycc_to_rgb"),
        numpy_helper.from_array(np.eye(3, dtype=np.float32), "identity3"),
        numpy_helper.from_array(np.array([2, 3], dtype=np.int64), "spatial_axes"),
        numpy_helper.from_array(np.array([0, 3, -1], dtype=np.int64), "flat_shape"),
        numpy_helper.from_array(np.array([0, 3, 1], dtype=np.int64), "column_shape"),
        numpy_helper.from_array(np.array([0, 1, 1], dtype=np.int64), "switch_shape"),
        numpy_helper.from_array(np.array(1e-6, dtype=np.float32), "eps"),
        numpy_helper.from_array(np.array(_STD_GAIN_LIMITS[0], dtype=np.float32), "gain_min"),
        numpy_helper.from_array(np.array(_STD_GAIN_LIMITS[1], dtype=np.float32), "gain_max"),
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
    ]

    def pooled(image: str) -> str:
        return node("AveragePool", [image], f"{image}_small", kernel_shape=[4, 4], strides=[4, 4])

    warped = node("GridSample", ["source", "grid"], "warped", mode="bilinear", padding_mode="border", align_corners=0)

    # Masked mean and spread of each YCbCr channel, for the warped source and the target.
    weight = pooled("mask")
    area = node("Add", [node("ReduceSum", [weight, "spatial_axes"], "weight_sum", keepdims=1), "eps"], "area")

    def masked_stats(image: str) -> tuple[str, str]:
        ycc = node("Conv", [pooled(image), "rgb_to_ycc_kernel"], f"{image}_ycc")
        total = node("ReduceSum", [node("Mul", [ycc, weight], f"{image}_weighted"), "spatial_axes"], f"{image}_sum", keepdims=1)
        mean = node("Div", [total, area], f"{image}_mean")
        centred = node("Sub", [ycc, mean], f"{image}_centred")
        square = node("Mul", [node("Mul", [centred, centred], f"{image}_sq"), weight], f"{image}_wsq")
        var = node("Div", [node("ReduceSum", [square, "spatial_axes"], f"{image}_sqsum", keepdims=1), area], f"{image}_var")
        return mean, node("Sqrt", [node("Add", [var, "eps"], f"{image}_var_eps")], f"{image}_std")

    src_mean, src_std = masked_stats(warped)
    dst_mean, dst_std = masked_stats("target")
    gain = node("Clip", [node("Div", [dst_std, src_std], "gain_raw"), "gain_min", "gain_max"], "gain")

    # matched = ycc_to_rgb(gain * (rgb_to_ycc(w) - src_mean) + dst_mean) = A @ w + b per row
    gain_col = node("Reshape", [gain, "column_shape"], "gain_col")
    matrix = node("MatMul", ["ycc_to_rgb", node("Mul", [gain_col, "rgb_to_ycc"], "scaled_ycc")], "colour_matrix")
    shift = node("Sub", [dst_mean, node("Mul", [gain, src_mean], "scaled_mean")], "shift_ycc")
    offset = node("MatMul", ["ycc_to_rgb", node("Reshape", [shift, "column_shape"], "shift_col")], "colour_offset")
    # colour switch c: A' = I + c (A - I), b' = c b
    switch = node("Reshape", ["colour", "switch_shape"], "switch")
    matrix_on = node("Add", ["identity3", node("Mul", [node("Sub", [matrix, "identity3"], "matrix_delta"), switch], "matrix_step")], "matrix_on")
    offset_on = node("Mul", [offset, switch], "offset_on")
    flat = node("Reshape", [warped, "flat_shape"], "warped_flat")
    face_flat = node("Add", [node("MatMul", [matrix_on, flat], "recoloured"), offset_on], "face_flat")
    face = node("Reshape", [face_flat, node("Shape", ["target"], "target_shape")], "face")

    # swapped = target + blend * (face - target) inside the face region (mask > 0); the
    # feathered edge is applied once, by the paste-back, so blend stays linear.
    alpha = node("Mul", [node("Ceil", ["mask"], "region"), "blend"], "alpha")
    swapped_raw = node("Add", ["target", node("Mul", [node("Sub", [face, "target"], "face_delta"), alpha], "blend_step")], "swapped_raw")
    node("Clip", [swapped_raw, "zero", "one"], "swapped")

    return swap_model(
        name,
        nodes,
        inputs=[
            tensor("target", "N", 3, "S", "S"),
            tensor("source", "N", 3, "T", "T"),
            tensor("grid", "N", "S", "S", 2),
            tensor("mask", "N", 1, "S", "S"),
            tensor("blend", "N", 1, 1, 1),
            tensor("colour", "N", 1, 1, 1),
        ],
        outputs=[tensor("swapped", "N", 3, "S", "S")],
        initializer=inits,
    )
