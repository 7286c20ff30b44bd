"""Small ONNX twins of the user-supplied face models, generated in code.

Each twin has exactly the real file's signature (names, shapes, dtypes, output order, the
``emap`` convention), so loaders, signature checks, decoding and batching are tested for
real without the weights, which may never be downloaded. Keyword arguments build the broken
variants the error tests need.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SCRFD_SIZE = 640
SCRFD_STRIDES = (8, 16, 32)
SCRFD_OUTPUT_DIMS = (1, 1, 1, 4, 4, 4, 10, 10, 10)

# A face to encode: box (x0, y0, x1, y1), kps (5, 2), score, in 640x640 input pixels.
TwinFace = tuple[Sequence[float], Sequence[Sequence[float]], float]


def make_scrfd(
    path: str | Path,
    faces: Sequence[TwinFace] = (),
    *,
    batched: bool = True,
    output_dims: Sequence[int] = SCRFD_OUTPUT_DIMS,
    input_shape: Sequence[int | str] = (1, 3, "?", "?"),
) -> Path:
    """det_10g twin whose outputs encode ``faces`` for any 640x640 input (constants plus
    0 * mean(input), so the input stays wired in). Each face sits on the anchor nearest its
    box centre, at a stride that suits its size; a second face on the same cell takes the
    second anchor."""
    rows = {s: (SCRFD_SIZE // s) ** 2 * 2 for s in SCRFD_STRIDES}
    scores = {s: np.zeros((rows[s], 1), np.float32) for s in SCRFD_STRIDES}
    boxes = {s: np.zeros((rows[s], 4), np.float32) for s in SCRFD_STRIDES}
    kpss = {s: np.zeros((rows[s], 10), np.float32) for s in SCRFD_STRIDES}
    for box, kps, score in faces:
        x0, y0, x1, y1 = box
        stride = 32 if max(x1 - x0, y1 - y0) > 160 else 16 if max(x1 - x0, y1 - y0) > 64 else 8
        side = SCRFD_SIZE // stride
        cell_x = int(np.clip(round((x0 + x1) / 2 / stride), 0, side - 1))
        cell_y = int(np.clip(round((y0 + y1) / 2 / stride), 0, side - 1))
        row = next(r for r in (2 * (cell_y * side + cell_x) + a for a in (0, 1)) if scores[stride][r, 0] == 0)
        cx, cy = cell_x * stride, cell_y * stride
        scores[stride][row] = score
        boxes[stride][row] = np.array([cx - x0, cy - y0, x1 - cx, y1 - cy]) / stride
        kpss[stride][row] = ((np.asarray(kps, np.float64) - [cx, cy]) / stride).reshape(-1)
    values = [*scores.values(), *boxes.values(), *kpss.values()]
    consts = []
    for i, last in enumerate(output_dims):
        value = values[i] if i < len(values) and values[i].shape[1] == last else np.zeros((rows[8], last), np.float32)
        consts.append(value[None] if batched else value)

    nodes = [
        helper.make_node("ReduceMean", ["input.1"], ["mean"], keepdims=0),
        helper.make_node("Mul", ["mean", "zero"], ["nothing"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    outputs = []
    for i, value in enumerate(consts):
        name = f"out{i}"
        inits.append(numpy_helper.from_array(value, f"const{i}"))
        nodes.append(helper.make_node("Add", [f"const{i}", "nothing"], [name]))
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(value.shape)))
    inputs = [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, list(input_shape))]
    return _save(path, helper.make_graph(nodes, "scrfd_twin", inputs, outputs, inits))


def make_arcface(
    path: str | Path, *, batch: int | str = 1, size: int = 112, dim: int = 512, seed: int = 1
) -> Path:
    """w600k_r50 twin: conv + relu + flatten + gemm, [batch,3,size,size] -> [batch,dim]."""
    rng = np.random.default_rng(seed)
    conv = rng.normal(0, 0.2, (16, 3, 8, 8)).astype(np.float32)
    features = 16 * (size // 8) ** 2
    gemm = rng.normal(0, 1 / np.sqrt(features), (dim, features)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["input.1", "conv_w"], ["conv"], strides=[8, 8]),
        helper.make_node("Relu", ["conv"], ["relu"]),
        helper.make_node("Flatten", ["relu"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc_w"], ["683"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "arcface_twin",
        [helper.make_tensor_value_info("input.1", TensorProto.FLOAT, [batch, 3, size, size])],
        [helper.make_tensor_value_info("683", TensorProto.FLOAT, [batch, dim])],
        [numpy_helper.from_array(conv, "conv_w"), numpy_helper.from_array(gemm, "fc_w")],
    )
    return _save(path, graph)


def make_inswapper(
    path: str | Path,
    fp16: bool = False,
    *,
    target_shape: Sequence[int] = (1, 3, 128, 128),
    source_shape: Sequence[int] = (1, 512),
    target_name: str = "target",
    target_dtype: int | None = None,
    emap_last: bool = True,
    extra_output: bool = False,
    seed: int = 2,
) -> Path:
    """inswapper_128 twin: sigmoid(conv(target) + reshape(gemm(source))), so every output
    pixel depends on both inputs. Like the real file it pins batch 1 in a Reshape (both an
    initializer [1,3,1,1] and a Constant node [1,-1]) and in value_info, and stores ``emap``
    (512x512) as the last initializer. ``fp16`` stores weights and I/O as float16."""
    rng = np.random.default_rng(seed)
    io_type = TensorProto.FLOAT16 if fp16 else TensorProto.FLOAT
    weight_dtype = np.float16 if fp16 else np.float32
    weights = {
        "conv_w": rng.normal(0, 0.5, (3, 3, 3, 3)),
        "conv_b": rng.normal(0, 0.1, (3,)),
        "style_w": rng.normal(0, 1.0, (3, source_shape[-1])),
    }
    inits = [numpy_helper.from_array(w.astype(weight_dtype), name) for name, w in weights.items()]
    inits.append(numpy_helper.from_array(np.array([1, 3, 1, 1], np.int64), "style_shape"))
    emap = numpy_helper.from_array(rng.normal(0, 1.0, (512, 512)).astype(weight_dtype), "emap")
    late = numpy_helper.from_array(np.zeros(3, weight_dtype), "late_bias")
    inits += [emap] if emap_last else [emap, late]

    nodes = []

    def as_float(name: str, elem_type: int) -> str:
        if elem_type == TensorProto.FLOAT:
            return name
        nodes.append(helper.make_node("Cast", [name], [f"{name}_f32"], to=TensorProto.FLOAT))
        return f"{name}_f32"

    target = as_float(target_name, target_dtype or io_type)
    source = as_float("source", io_type)
    w = {name: as_float(name, io_type) for name in weights}
    nodes += [
        helper.make_node("Conv", [target, w["conv_w"], w["conv_b"]], ["conv"], pads=[1, 1, 1, 1]),
        helper.make_node("Gemm", [source, w["style_w"]], ["style"], transB=1),
        helper.make_node(
            "Constant", [], ["flat_shape"], value=numpy_helper.from_array(np.array([1, -1], np.int64))
        ),
        helper.make_node("Reshape", ["style", "flat_shape"], ["style_flat"]),
        helper.make_node("Reshape", ["style_flat", "style_shape"], ["style_4d"]),
        helper.make_node("Add", ["conv", "style_4d"], ["mixed"]),
        helper.make_node("Sigmoid", ["mixed"], ["swapped"]),
    ]
    output = "swapped"
    if fp16:
        nodes.append(helper.make_node("Cast", ["swapped"], ["swapped_f16"], to=TensorProto.FLOAT16))
        output = "swapped_f16"
    nodes.append(helper.make_node("Identity", [output], ["output"]))
    outputs = [helper.make_tensor_value_info("output", io_type, list(target_shape))]
    if extra_output:
        nodes.append(helper.make_node("Identity", [output], ["mask"]))
        outputs.append(helper.make_tensor_value_info("mask", io_type, list(target_shape)))
    inputs = [
        helper.make_tensor_value_info(target_name, target_dtype or io_type, list(target_shape)),
        helper.make_tensor_value_info("source", io_type, list(source_shape)),
    ]
    pinned = [helper.make_tensor_value_info("style", TensorProto.FLOAT, [1, 3])]
    graph = helper.make_graph(nodes, "inswapper_twin", inputs, outputs, inits, value_info=pinned)
    return _save(path, graph)


def _save(path: str | Path, graph: onnx.GraphProto) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return Path(path)


# -- FaceFusion processors (gpu/processors): exact I/O signatures, behaviour chosen so tests
# can see them work. Each pins batch 1 in its I/O and in a Reshape, like the real exports.


def _pinned(nodes: list, inits: list, source: str, shape: Sequence[int], name: str) -> None:
    """Reshape ``source`` to ``shape`` (batch 1 pinned in a constant) as ``name``."""
    inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"{name}_shape"))
    nodes.append(helper.make_node("Reshape", [source, f"{name}_shape"], [name]))


def make_xseg(
    path: str | Path, *, input_name: str = "input", input_shape: Sequence[int | str] = (1, 256, 256, 3),
    output_shape: Sequence[int | str] = (1, 256, 256, 1),
) -> Path:
    """xseg_1/2/3 twin: BGR [0,1] NHWC in, face probability out. A pixel is face unless it
    is strongly blue: sigmoid(20 * (R + G - 2B + 0.3)); a blue object over the face is an
    occluder to it."""
    nodes, inits = [], [
        numpy_helper.from_array(np.array([[-2.0], [1.0], [1.0]], np.float32), "w"),
        numpy_helper.from_array(np.array(0.3, np.float32), "bias"),
        numpy_helper.from_array(np.array(20.0, np.float32), "gain"),
    ]
    nodes += [
        helper.make_node("MatMul", [input_name, "w"], ["mix"]),
        helper.make_node("Add", ["mix", "bias"], ["shifted"]),
        helper.make_node("Mul", ["shifted", "gain"], ["logit"]),
        helper.make_node("Sigmoid", ["logit"], ["face"]),
    ]
    _pinned(nodes, inits, "face", (1, 256, 256, 1), "mask")
    graph = helper.make_graph(
        nodes, "xseg_twin", [helper.make_tensor_value_info(input_name, TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("mask", TensorProto.FLOAT, list(output_shape))], inits)
    return _save(path, graph)


# BiSeNet twin classes: skin by default, background where strongly blue, glasses where dark
_BISENET_W = np.zeros((19, 3), np.float32)
_BISENET_B = np.full((19,), -20.0, np.float32)
_BISENET_B[1] = 0.0
_BISENET_W[0], _BISENET_B[0] = (-3.0, -3.0, 4.0), -6.0
_BISENET_W[6], _BISENET_B[6] = (-4.0, -4.0, -4.0), -12.0


def make_bisenet(
    path: str | Path, *, input_shape: Sequence[int | str] = (1, 3, 512, 512),
    classes: int = 19, aux_outputs: int = 0,
) -> Path:
    """bisenet_resnet_18/34 twin: normalised RGB NCHW in, [1, 19, 512, 512] class scores out
    (a 1x1 conv: skin, 'background' where blue, 'glasses' where dark). ``aux_outputs`` adds
    the auxiliary heads some exports keep."""
    weight = np.zeros((classes, 3, 1, 1), np.float32)
    bias = np.full((classes,), -20.0, np.float32)
    rows = min(classes, 19)
    weight[:rows, :, 0, 0], bias[:rows] = _BISENET_W[:rows], _BISENET_B[:rows]
    nodes, inits = [helper.make_node("Conv", ["input", "w", "b"], ["scores"])], [
        numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    _pinned(nodes, inits, "scores", (1, classes, 512, 512), "output")
    outputs = [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, classes, 512, 512])]
    for i in range(aux_outputs):
        nodes.append(helper.make_node("Identity", ["output"], [f"aux{i}"]))
        outputs.append(helper.make_tensor_value_info(f"aux{i}", TensorProto.FLOAT, [1, classes, 512, 512]))
    graph = helper.make_graph(
        nodes, "bisenet_twin", [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
        outputs, inits)
    return _save(path, graph)


def make_enhancer(
    path: str | Path, size: int = 512, *, weight_input: bool = False, weight_type: int = TensorProto.DOUBLE,
    input_shape: Sequence[int | str] | None = None, seed: int = 3,
) -> Path:
    """gfpgan_1.4 / gpen_bfr_256/512 twin (``weight_input``: codeformer): [-1, 1] RGB NCHW in
    and out, tanh(x + 0.2 * conv3x3(x) [+ 0.5 * weight]), so every output pixel depends on its
    own row (and on CodeFormer's fidelity weight)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [
        helper.make_node("Conv", ["input", "k"], ["detail"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["detail", "amount"], ["scaled"]),
        helper.make_node("Add", ["input", "scaled"], ["sharpened"]),
    ], [numpy_helper.from_array(rng.normal(0, 0.3, (3, 3, 3, 3)).astype(np.float32), "k"),
        numpy_helper.from_array(np.array(0.2, np.float32), "amount")]
    last = "sharpened"
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape or (1, 3, size, size)))]
    if weight_input:
        inputs.append(helper.make_tensor_value_info("weight", weight_type, [1]))
        inits.append(numpy_helper.from_array(np.array(0.5, np.float32), "half"))
        nodes += [helper.make_node("Cast", ["weight"], ["weight_f"], to=TensorProto.FLOAT),
                  helper.make_node("Mul", ["weight_f", "half"], ["shift"]),
                  helper.make_node("Add", ["sharpened", "shift"], ["weighted"])]
        last = "weighted"
    nodes.append(helper.make_node("Tanh", [last], ["restored"]))
    _pinned(nodes, inits, "restored", (1, 3, size, size), "output")
    graph = helper.make_graph(nodes, "enhancer_twin", inputs,
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 3, size, size])], inits)
    return _save(path, graph)


def make_open_nsfw(
    path: str | Path, *, input_shape: Sequence[int | str] = (1, 224, 224, 3), classes: int = 2,
) -> Path:
    """open_nsfw twin: [1, 224, 224, 3] BGR minus the Caffe means in, softmax [1, 2] out.
    'Unsafe' is magenta: the mean of R + B - 2G over the image, (f - 200) / 20 as the logit
    (a magenta image scores ~1, a face photo ~0)."""
    weight = np.zeros((3, classes), np.float32)
    weight[:, 1] = np.array([1.0, -2.0, 1.0], np.float32) / 20.0  # rows: B, G, R
    bias = np.zeros((classes,), np.float32)
    bias[1] = -10.0
    nodes, inits = [
        helper.make_node("ReduceMean", ["input"], ["colour"], axes=[1, 2], keepdims=0),
        helper.make_node("MatMul", ["colour", "w"], ["mixed"]),
        helper.make_node("Add", ["mixed", "b"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
    ], [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")]
    _pinned(nodes, inits, "probs", (1, classes), "prob")
    graph = helper.make_graph(
        nodes, "open_nsfw_twin", [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(input_shape))],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, classes])], inits)
    return _save(path, graph)
