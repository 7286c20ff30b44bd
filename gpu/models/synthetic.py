"""A generated model with inswapper_128's signature and cost, for the GPU benchmark.

No real inswapper weights exist on our machines (they may never be downloaded), so the GPU
check measures this instead: same inputs and output (``target`` [N,3,128,128] RGB in
[0,1], ``source`` [N,512], output [N,3,128,128] in [0,1]), ``emap`` (512x512) as the last
initializer, and the same shape of network: a reflect-padded 7x7 stem, two stride-2 downs,
a stack of residual blocks at 32x32 whose instance normalisation is modulated by the
source identity (AdaIN, written out as ReduceMean/Sub/Mul/Sqrt/Div the way the real export
writes it -- the layers that overflow in fp16), two nearest-upsample + conv ups and a 7x7
head. The default configuration costs 180 GFLOP per face (asked: about 175); ``flops_per_face`` counts
them from the graph (2 FLOPs per multiply-accumulate of every Conv and Gemm; the
elementwise and normalisation ops, well under 1%, are not counted).

The weights are random (He-initialised, from ``seed``) and generated when the model is
built, so nothing large is stored: the full model is ~365 MB of float32 in memory and
builds in a few seconds. ``width``/``blocks`` make small variants for CPU tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
SIZE = 128
IDENTITY = 512

# The default (benchmark) configuration: 180.1 GFLOP per face (flops_per_face); channel
# counts 80/320/640 are multiples of 16 so fp16 tensor cores need no padding.
DEFAULT_WIDTH = 80
DEFAULT_BLOCKS = 10


def build_synthetic_inswapper(
    *, width: int = DEFAULT_WIDTH, blocks: int = DEFAULT_BLOCKS, seed: int = 0, name: str = "synthetic_inswapper"
) -> onnx.ModelProto:
    """Channels are ``width`` at 128x128, ``4*width`` at 64x64 and ``8*width`` at 32x32 (the
    residual blocks); batch is symbolic (``N``)."""
    rng = np.random.default_rng(seed)
    nodes: list[onnx.NodeProto] = []
    inits: list[onnx.TensorProto] = []
    counter = iter(range(10**6))

    def uid(prefix: str) -> str:
        return f"{prefix}_{next(counter)}"

    def const(value: np.ndarray, prefix: str) -> str:
        name = uid(prefix)
        inits.append(numpy_helper.from_array(value, name))
        return name

    def op(kind: str, inputs: list[str], prefix: str | None = None, **attrs) -> str:
        out = uid(prefix or kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], name=out, **attrs))
        return out

    def conv(x: str, cin: int, cout: int, k: int, stride: int = 1, reflect: bool = True) -> str:
        std = np.sqrt(2.0 / (cin * k * k))
        w = const((rng.standard_normal((cout, cin, k, k), dtype=np.float32) * std).astype(np.float32), "conv_w")
        b = const(np.zeros(cout, np.float32), "conv_b")
        pad = k // 2
        if reflect and pad:
            pads = const(np.array([0, 0, pad, pad, 0, 0, pad, pad], np.int64), "pads")
            x = op("Pad", [x, pads], "pad", mode="reflect")
            return op("Conv", [x, w, b], "conv", strides=[stride, stride])
        return op("Conv", [x, w, b], "conv", strides=[stride, stride], pads=[pad] * 4)

    eps = const(np.array(1e-5, np.float32), "eps")
    one = const(np.array(1.0, np.float32), "one")

    def instance_norm(x: str) -> str:
        """(x - mean) / sqrt(var + eps) over H, W, in elementary ops (as exported)."""
        mean = op("ReduceMean", [x], "mean", axes=[2, 3], keepdims=1)
        centred = op("Sub", [x, mean], "centred")
        var = op("ReduceMean", [op("Mul", [centred, centred], "square")], "var", axes=[2, 3], keepdims=1)
        return op("Div", [centred, op("Sqrt", [op("Add", [var, eps], "var_eps")], "std")], "normed")

    def adain(x: str, channels: int) -> str:
        """instance_norm(x) * (1 + gamma(source)) + beta(source)."""
        w = const((rng.standard_normal((2 * channels, IDENTITY), dtype=np.float32) * 0.02).astype(np.float32), "style_w")
        b = const(np.zeros(2 * channels, np.float32), "style_b")
        style = op("Gemm", ["source", w, b], "style", transB=1)
        shape = const(np.array([0, 2 * channels, 1, 1], np.int64), "style_shape")
        style = op("Reshape", [style, shape], "style_4d")
        split = const(np.array([channels, channels], np.int64), "split")
        gamma, beta = uid("gamma"), uid("beta")
        nodes.append(helper.make_node("Split", [style, split], [gamma, beta], name=gamma, axis=1))
        scaled = op("Mul", [instance_norm(x), op("Add", [gamma, one], "scale")], "modulated")
        return op("Add", [scaled, beta], "adain")

    def block(x: str, channels: int) -> str:
        h = op("Relu", [adain(conv(x, channels, channels, 3), channels)])
        h = adain(conv(h, channels, channels, 3), channels)
        return op("Add", [x, h], "residual")

    c1, c2, c3 = width, 4 * width, 8 * width
    x = op("Relu", [instance_norm(conv("target", 3, c1, 7))])
    x = op("Relu", [instance_norm(conv(x, c1, c2, 3, stride=2, reflect=False))])
    x = op("Relu", [instance_norm(conv(x, c2, c3, 3, stride=2, reflect=False))])
    for _ in range(blocks):
        x = block(x, c3)
    scales = const(np.array([1, 1, 2, 2], np.float32), "scales")
    x = op("Resize", [x, "", scales], "up", mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    x = op("Relu", [instance_norm(conv(x, c3, c2, 3))])
    x = op("Resize", [x, "", scales], "up", mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    x = op("Relu", [instance_norm(conv(x, c2, c1, 3))])
    x = op("Tanh", [conv(x, c1, 3, 7)])
    half = const(np.array(0.5, np.float32), "half")
    nodes.append(helper.make_node("Mul", [op("Add", [x, one], "shifted"), half], ["output"], name="output"))
    # emap: the real file's last initializer, used by the caller (source = normalize(e) @ emap)
    inits.append(numpy_helper.from_array((rng.standard_normal((IDENTITY, IDENTITY), dtype=np.float32) / np.sqrt(IDENTITY)).astype(np.float32), "emap"))

    graph = helper.make_graph(
        nodes,
        name,
        inputs=[
            helper.make_tensor_value_info("target", TensorProto.FLOAT, ["N", 3, SIZE, SIZE]),
            helper.make_tensor_value_info("source", TensorProto.FLOAT, ["N", IDENTITY]),
        ],
        outputs=[helper.make_tensor_value_info("output", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="swapcast-synthetic")
    model.ir_version = 8
    return model


def flops_per_face(model: onnx.ModelProto) -> int:
    """2 x multiply-accumulates of every Conv and Gemm for one face (N = 1), from ONNX
    shape inference; other ops are not counted."""
    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in list(fixed.graph.input) + list(fixed.graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = 1
    inferred = onnx.shape_inference.infer_shapes(fixed)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(inferred.graph.value_info) + list(inferred.graph.output) + list(inferred.graph.input)
    }
    weights = {t.name: tuple(t.dims) for t in inferred.graph.initializer}
    total = 0
    for node in inferred.graph.node:
        if node.op_type == "Conv":
            cout, cin, kh, kw = weights[node.input[1]]
            out = shapes[node.output[0]]
            total += 2 * cout * cin * kh * kw * out[2] * out[3]
        elif node.op_type == "Gemm":
            rows, cols = weights[node.input[1]]
            total += 2 * rows * cols
    return total


def save_synthetic_inswapper(path: str | Path, **kwargs) -> Path:
    """Write the model to ``path`` (weights inline; ~365 MB at the default size)."""
    onnx.save(build_synthetic_inswapper(**kwargs), str(path))
    return Path(path)
