"""The per-pixel half of the 3D-aware "mesh3d" swapper, as an ONNX graph built in code.

The host rasterises the target's (shape-transferred) mesh with back faces culled and tells
every crop pixel where it lies in UV space (``grid``) and how the target's light falls
there (``shading``, smooth, so at half resolution); this graph samples the source's albedo
through the grid and multiplies it by the shading (the source face re-lit as the target
is lit) and blends the result into the target crop over a Laplacian pyramid: fine
detail switches at the seam, low frequencies fade over a wide band, so neither a hard
edge nor a ghosted double contour shows. It runs through the runner and micro-batcher like
every swap model (on the CPU through ONNX Runtime, on a GPU through Torch).

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

import numpy as np
import onnx
from onnx import numpy_helper

from gpu.swappers.swap_graph import GraphNodes, swap_model, tensor

LEVELS = 4  # Laplacian levels: S must be divisible by 2**LEVELS (crop sizes are multiples of 32)


def build_mesh3d_swap_graph(name: str = "mesh3d_swap", levels: int = LEVELS) -> onnx.ModelProto:
    """Build the graph; batch and spatial sizes are symbolic."""
    nodes = GraphNodes()
    node = nodes.add
    inits = [
        numpy_helper.from_array(np.array(0.0, dtype=np.float32), "zero"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        numpy_helper.from_array(np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32), "double"),
        numpy_helper.from_array(np.zeros(0, dtype=np.float32), "no_roi"),
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

    change = node("Mul", [collapsed, node("Sub", ["one", "keep"], "replace")], "change")
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
