"""Convert the mediapipe wheel's TFLite face and hand models to ONNX, in code, cached by file hash.

Detection and the 468-point mesh only batch across sessions and run on a GPU if they are
graphs our runners can execute; the GPU image has no mediapipe or TFLite runtime, and
nothing may be downloaded. So the models that already ship inside the mediapipe wheel are
rewritten op by op with ``onnx.helper``: fp16 weights (DEQUANTIZE) and sparse weights
(DENSIFY) are decoded at conversion time into dense fp32 initializers, and the graph is
emitted in NCHW (the layout every ONNX runtime and onnx2torch prefer), with a symbolic
batch dimension ``N``.

Contract of a converted model:

- one input ``input``: float32 ``[N, 3, H, W]`` RGB (NCHW, unlike the TFLite ``[1, H, W, 3]``),
  scaled as in ``MEDIAPIPE_INPUTS`` (what mediapipe's own graphs feed each model);
- the TFLite model's outputs, same names, same NHWC/row-major semantics and shapes with the
  batch as ``N`` (e.g. face_landmark ``conv2d_21`` ``[N, 1, 1, 1404]``: 468 x (x, y, z) in
  input pixels; ``conv2d_31`` ``[N, 1, 1, 1]``: face-presence logit).

A converted folder carries a manifest (``gpu.models.converted_tracking``): a node without the
wheel (or this converter's ``tflite`` schema package) loads the graphs from it.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import tflite
from onnx import TensorProto, helper, numpy_helper

from gpu.errors import ModelFileError
from gpu.models.builtin import MediapipeFaceModels
from gpu.models.converted_tracking import CONVERTER_VERSION, INPUT_NAME, ConvertedModel, TrackingManifest, sha256_of
from gpu.models.tflite_reader import Operator, Tensor, TfliteGraph, densify, read_tflite

OPSET = 17
BATCH = "N"


@dataclass(frozen=True)
class InputSpec:
    """What mediapipe feeds a model: a ``size`` x ``size`` RGB crop scaled to ``value_range``."""

    size: int
    value_range: tuple[float, float]


# What mediapipe's own subgraphs feed each model (FaceDetection*Cpu: [-1, 1]; FaceLandmarkCpu:
# [0, 1]): tests/test_tflite_onnx.py checks it end to end against those subgraphs on real
# faces (the other range moves landmarks by up to 1.5 px and detection scores by up to 3e-2).
MEDIAPIPE_INPUTS: dict[str, InputSpec] = {
    "face_detection_short_range.tflite": InputSpec(128, (-1.0, 1.0)),
    "face_detection_full_range_sparse.tflite": InputSpec(192, (-1.0, 1.0)),
    "face_landmark.tflite": InputSpec(192, (0.0, 1.0)),
    # PalmDetectionCpu and HandLandmarkCpu: [0, 1] (tests/test_hands.py, against those subgraphs)
    "palm_detection_full.tflite": InputSpec(192, (0.0, 1.0)),
    "hand_landmark_lite.tflite": InputSpec(224, (0.0, 1.0)),
}


class UnsupportedTfliteOp(ModelFileError):
    """The model uses a TFLite op (or op variant) the converter does not emit."""

    def __init__(self, path: Path, op: str, detail: str = "") -> None:
        supported = ", ".join(sorted(_Emitter.HANDLERS))
        reason = f"TFLite op {op} is not supported by the ONNX converter{detail} (supported: {supported})"
        super().__init__(path, reason)
        self.op = op


def convert_tflite(path: Path) -> onnx.ModelProto:
    """The ONNX equivalent of the TFLite model at ``path`` (checked by onnx.checker)."""
    graph = read_tflite(path)
    model = _Emitter(graph).emit()
    onnx.checker.check_model(model)
    return model


def convert_cached(model_path: Path, cache_dir: Path) -> Path:
    """Path of the converted model in ``cache_dir``, converting only on a cache miss.

    Keyed by the TFLite file's SHA-256 and ``CONVERTER_VERSION``, so a new wheel or a new
    converter converts again; written to a temporary file and renamed, so a process that
    dies mid-write (or two nodes converting at once) never leaves a half-written model.
    """
    return _convert_cached(model_path, cache_dir)[0]


def _convert_cached(model_path: Path, cache_dir: Path) -> tuple[Path, str]:
    """(converted model, TFLite SHA-256): see ``convert_cached``."""
    digest = hashlib.sha256(_read(model_path)).hexdigest()
    target = cache_dir / f"{model_path.stem}-{digest[:16]}-c{CONVERTER_VERSION}.onnx"
    if target.is_file():
        return target, digest
    model = convert_tflite(model_path)
    model.metadata_props.append(onnx.StringStringEntryProto(key="tflite_sha256", value=digest))
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(model.SerializeToString())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from a node running as another user (the image's)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target, digest


def convert_builtin(cache_dir: Path) -> dict[str, Path]:
    """The wheel's tracking models (face and hands) converted (or found) in ``cache_dir``, by file name,
    with their manifest (``gpu.models.converted_tracking``), so a node without mediapipe
    can load the folder: what a node calls at first start, ``swapcast models convert``
    and the image's build stage."""
    wheel = MediapipeFaceModels.locate()
    converted = {path.name: _convert_cached(path, cache_dir) for path in wheel.files}
    models = {name: ConvertedModel(onnx=path.name, tflite_sha256=digest, onnx_sha256=sha256_of(path))
              for name, (path, digest) in converted.items()}
    TrackingManifest(converter_version=CONVERTER_VERSION, models=models).write(cache_dir)
    return {name: path for name, (path, _) in converted.items()}


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise ModelFileError(path, f"cannot read TFLite model: {exc.strerror or exc}") from exc


# NHWC axis -> NCHW axis, and the permutations between the two layouts.
_NHWC_TO_NCHW_AXIS = (0, 2, 3, 1)
_TO_NCHW = (0, 3, 1, 2)
_TO_NHWC = (0, 2, 3, 1)


class _Emitter:
    """Walks the TFLite operators in order and emits the equivalent ONNX nodes.

    Constants (weights, paddings, shapes) stay numpy arrays in TFLite layout until an op
    consumes them, so DEQUANTIZE and DENSIFY fold away. Every 4-D activation is kept in
    NCHW; an op whose meaning depends on the layout (RESHAPE) transposes back to NHWC first.
    """

    HANDLERS: dict[str, Callable[[_Emitter, Operator], None]] = {}

    def __init__(self, graph: TfliteGraph) -> None:
        self.graph = graph
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.constants: dict[int, np.ndarray] = {
            t.index: t.data for t in graph.tensors if t.data is not None and t.sparsity is None
        }
        self.names: dict[int, str] = {}  # runtime tensors already emitted
        self.sparse = {t.index: t for t in graph.tensors if t.sparsity is not None}
        self.counter = 0

    # -- plumbing ---------------------------------------------------------------------------

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}_{self.counter}"

    def node(self, kind: str, inputs: list[str], output: str | None = None, **attrs: object) -> str:
        output = output or self.fresh(kind.lower())
        self.nodes.append(helper.make_node(kind, inputs, [output], name=output, **attrs))
        return output

    def initializer(self, value: np.ndarray, prefix: str) -> str:
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def tensor(self, index: int) -> Tensor:
        return self.graph.tensors[index]

    def constant(self, op: Operator, index: int) -> np.ndarray:
        if index not in self.constants:
            raise UnsupportedTfliteOp(self.graph.path, op.kind, f" with a non-constant input {self.tensor(index).name!r}")
        return self.constants[index]

    def value(self, index: int, rank: int | None = None) -> str:
        """ONNX name of tensor ``index``; a constant becomes an initializer in NCHW layout
        (broadcast to ``rank`` first, the way TFLite broadcasts NHWC from the last axis)."""
        if index in self.names:
            return self.names[index]
        if index not in self.constants:
            raise ModelFileError(self.graph.path, f"tensor {self.tensor(index).name!r} is used before it is computed")
        array = self.constants[index].astype(np.float32) if self.constants[index].dtype == np.float16 else self.constants[index]
        if rank is not None and array.ndim < rank:
            array = array.reshape((1,) * (rank - array.ndim) + array.shape)
        if array.ndim == 4:
            array = array.transpose(_TO_NCHW)
        return self.initializer(array, "const")

    def output_name(self, index: int) -> str:
        name = f"t{index}"
        self.names[index] = name
        return name

    def activation(self, op: Operator, x: str, fused: int, index: int) -> None:
        """Apply the op's fused activation to ``x``, writing tensor ``index``."""
        kinds = tflite.ActivationFunctionType
        if fused == kinds.NONE:
            self.names[index] = x
            return
        out = self.output_name(index)
        if fused == kinds.RELU:
            self.node("Relu", [x], out)
        elif fused in (kinds.RELU6, kinds.RELU_N1_TO_1):
            low, high = (0.0, 6.0) if fused == kinds.RELU6 else (-1.0, 1.0)
            bounds = [self.initializer(np.array(v, np.float32), "clip") for v in (low, high)]
            self.node("Clip", [x, *bounds], out)
        elif fused == kinds.TANH:
            self.node("Tanh", [x], out)
        else:
            raise UnsupportedTfliteOp(self.graph.path, op.kind, f" with fused activation {fused}")

    def spatial_pads(self, op: Operator, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int]) -> list[int]:
        """ONNX pads [top, left, bottom, right] for TFLite's SAME/VALID (SAME puts the odd
        pixel at the end, like auto_pad SAME_UPPER, but explicit pads every runtime takes)."""
        if op.options.Padding() == tflite.Padding.VALID:
            return [0, 0, 0, 0]
        height, width = self.tensor(op.inputs[0]).shape[1:3]
        begin, end = [], []
        for size, k, s, d in zip((height, width), kernel, strides, dilations, strict=True):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            begin.append(total // 2)
            end.append(total - total // 2)
        return begin + end

    # -- ops --------------------------------------------------------------------------------

    def conv_2d(self, op: Operator) -> None:
        opts = op.options
        weight = self.constant(op, op.inputs[1]).astype(np.float32)  # OHWI
        kernel = weight.shape[1:3]
        strides, dilations = (opts.StrideH(), opts.StrideW()), (opts.DilationHFactor(), opts.DilationWFactor())
        inputs = [self.names[op.inputs[0]], self.initializer(weight.transpose(_TO_NCHW), "weight")]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            inputs.append(self.initializer(self.constant(op, op.inputs[2]).astype(np.float32), "bias"))
        y = self.node(
            "Conv", inputs, kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations),
            pads=self.spatial_pads(op, kernel, strides, dilations),
        )
        self.activation(op, y, opts.FusedActivationFunction(), op.outputs[0])

    def depthwise_conv_2d(self, op: Operator) -> None:
        opts = op.options
        weight = self.constant(op, op.inputs[1]).astype(np.float32)  # [1, KH, KW, C * multiplier]
        channels = self.tensor(op.inputs[0]).shape[3]
        kernel = weight.shape[1:3]
        strides, dilations = (opts.StrideH(), opts.StrideW()), (opts.DilationHFactor(), opts.DilationWFactor())
        inputs = [self.names[op.inputs[0]], self.initializer(weight.transpose(3, 0, 1, 2), "weight")]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            inputs.append(self.initializer(self.constant(op, op.inputs[2]).astype(np.float32), "bias"))
        y = self.node(
            "Conv", inputs, kernel_shape=list(kernel), strides=list(strides), dilations=list(dilations),
            pads=self.spatial_pads(op, kernel, strides, dilations), group=channels,
        )
        self.activation(op, y, opts.FusedActivationFunction(), op.outputs[0])

    def max_pool_2d(self, op: Operator) -> None:
        opts = op.options
        kernel, strides = (opts.FilterHeight(), opts.FilterWidth()), (opts.StrideH(), opts.StrideW())
        y = self.node(
            "MaxPool", [self.names[op.inputs[0]]], kernel_shape=list(kernel), strides=list(strides),
            pads=self.spatial_pads(op, kernel, strides, (1, 1)),
        )
        self.activation(op, y, opts.FusedActivationFunction(), op.outputs[0])

    def pad(self, op: Operator) -> None:
        paddings = self.constant(op, op.inputs[1]).astype(np.int64)  # [rank, 2] in TFLite order
        if len(paddings) == 4:
            paddings = paddings[list(_TO_NCHW)]
        pads = self.initializer(np.concatenate([paddings[:, 0], paddings[:, 1]]), "pads")
        self.node("Pad", [self.names[op.inputs[0]], pads], self.output_name(op.outputs[0]), mode="constant")

    def prelu(self, op: Operator) -> None:
        # Written as x + (1 - alpha) * relu(-x), the two per-channel scalings as depthwise 1x1
        # convolutions: ONNX Runtime's CPU PRelu with a per-channel slope took over half of
        # the landmark model's time (5.1 ms of CPU per frame), and elementwise Min/Mul made it
        # reorder out of its blocked conv layout around every one (2.3 ms); as convolutions,
        # with the Relu and the Add fused into them, it is 1.9 ms.
        shape = self.tensor(op.inputs[0]).shape
        alpha = self.constant(op, op.inputs[1]).astype(np.float32)
        x = self.names[op.inputs[0]]
        channels = shape[-1]
        if len(shape) != 4 or alpha.size not in (1, channels):
            raise UnsupportedTfliteOp(self.graph.path, op.kind, f" with slope {alpha.shape} on {shape} (only per-channel)")
        alpha = np.broadcast_to(alpha.reshape(-1), (channels,))
        negate = self.initializer(np.full((channels, 1, 1, 1), -1.0, np.float32), "negate")
        scale = self.initializer((1.0 - alpha).reshape(channels, 1, 1, 1), "one_minus_alpha")
        negative = self.node("Relu", [self.node("Conv", [x, negate], kernel_shape=[1, 1], group=channels)])
        scaled = self.node("Conv", [negative, scale], kernel_shape=[1, 1], group=channels)
        self.node("Add", [x, scaled], self.output_name(op.outputs[0]))

    def relu(self, op: Operator) -> None:
        self.node("Relu", [self.names[op.inputs[0]]], self.output_name(op.outputs[0]))

    def add(self, op: Operator) -> None:
        # Constants broadcast NHWC-style via value(); two activations of different ranks would
        # broadcast differently in NCHW, so they are refused rather than silently mis-added.
        rank = len(self.tensor(op.outputs[0]).shape)
        if any(len(self.tensor(i).shape) != rank for i in op.inputs if i in self.names):
            raise UnsupportedTfliteOp(self.graph.path, op.kind, " broadcasting tensors of different ranks")
        y = self.node("Add", [self.value(i, rank) for i in op.inputs])
        self.activation(op, y, op.options.FusedActivationFunction() if op.options else 0, op.outputs[0])

    def concatenation(self, op: Operator) -> None:
        rank = len(self.tensor(op.outputs[0]).shape)
        axis = op.options.Axis() % rank
        if rank == 4:
            axis = _NHWC_TO_NCHW_AXIS[axis]
        y = self.node("Concat", [self.value(i, rank) for i in op.inputs], axis=axis)
        self.activation(op, y, op.options.FusedActivationFunction(), op.outputs[0])

    def reshape(self, op: Operator) -> None:
        source, target = self.tensor(op.inputs[0]).shape, self.tensor(op.outputs[0]).shape
        if not source or not target or source[0] != 1 or target[0] != 1:
            raise UnsupportedTfliteOp(self.graph.path, op.kind, f" that mixes the batch axis ({source} -> {target})")
        x = self.names[op.inputs[0]]
        if len(source) == 4:
            x = self.node("Transpose", [x], perm=list(_TO_NHWC))
        shape = self.initializer(np.array((-1, *target[1:]), np.int64), "shape")
        if len(target) == 4:
            y = self.node("Reshape", [x, shape])
            self.node("Transpose", [y], self.output_name(op.outputs[0]), perm=list(_TO_NCHW))
        else:
            self.node("Reshape", [x, shape], self.output_name(op.outputs[0]))

    def resize_bilinear(self, op: Operator) -> None:
        opts = op.options
        height, width = self.tensor(op.inputs[0]).shape[1:3]
        out_h, out_w = (int(v) for v in self.constant(op, op.inputs[1]))
        if opts.AlignCorners():
            mode = "align_corners"
        elif opts.HalfPixelCenters():
            mode = "half_pixel"
        else:
            mode = "asymmetric"
        scales = self.initializer(np.array([1, 1, out_h / height, out_w / width], np.float32), "scales")
        self.node(
            "Resize", [self.names[op.inputs[0]], "", scales], self.output_name(op.outputs[0]),
            mode="linear", coordinate_transformation_mode=mode,
        )

    def depth_to_space(self, op: Operator) -> None:
        # TFLite's NHWC depth order (row in block, column in block, channel) is ONNX's DCR
        # mode, written out as Reshape/Transpose/Reshape: onnx2torch converts only CRD.
        block = op.options.BlockSize()
        _, height, width, depth = self.tensor(op.inputs[0]).shape
        channels = depth // (block * block)
        split = self.initializer(np.array([-1, block, block, channels, height, width], np.int64), "shape")
        merged = self.initializer(np.array([-1, channels, height * block, width * block], np.int64), "shape")
        x = self.node("Reshape", [self.names[op.inputs[0]], split])
        x = self.node("Transpose", [x], perm=[0, 3, 4, 1, 5, 2])
        self.node("Reshape", [x, merged], self.output_name(op.outputs[0]))

    def mean(self, op: Operator) -> None:
        # the hand landmark model's global average pool: a mean over NHWC's spatial axes
        rank = len(self.tensor(op.inputs[0]).shape)
        axes = [int(a) % rank for a in self.constant(op, op.inputs[1]).reshape(-1)]
        if rank == 4:
            axes = [_NHWC_TO_NCHW_AXIS[a] for a in axes]
        if 0 in axes:
            raise UnsupportedTfliteOp(self.graph.path, op.kind, " over the batch axis")
        keep = bool(op.options.KeepDims()) if op.options else False
        self.node("ReduceMean", [self.names[op.inputs[0]]], self.output_name(op.outputs[0]), axes=sorted(axes),
                  keepdims=int(keep))

    def fully_connected(self, op: Operator) -> None:
        # [N, in] x weights [out, in] (+ bias): Gemm with the weights transposed
        shape = self.tensor(op.inputs[0]).shape
        if len(shape) != 2 or op.inputs[0] not in self.names:
            raise UnsupportedTfliteOp(self.graph.path, op.kind, f" on a {shape} input (only [N, features] activations)")
        weight = self.constant(op, op.inputs[1]).astype(np.float32)
        inputs = [self.names[op.inputs[0]], self.initializer(weight, "weight")]
        if len(op.inputs) > 2 and op.inputs[2] >= 0:
            inputs.append(self.initializer(self.constant(op, op.inputs[2]).astype(np.float32), "bias"))
        y = self.node("Gemm", inputs, transB=1)
        self.activation(op, y, op.options.FusedActivationFunction() if op.options else 0, op.outputs[0])

    def logistic(self, op: Operator) -> None:
        self.node("Sigmoid", [self.names[op.inputs[0]]], self.output_name(op.outputs[0]))

    def dequantize(self, op: Operator) -> None:
        source = op.inputs[0]
        if source in self.constants and self.constants[source].dtype == np.float16:
            self.constants[op.outputs[0]] = self.constants[source].astype(np.float32)
            return
        raise UnsupportedTfliteOp(self.graph.path, op.kind, f" of {self.tensor(source).dtype} {'weights' if source in self.constants else 'activations'} (only float16 weights)")

    def densify(self, op: Operator) -> None:
        source = self.sparse.get(op.inputs[0])
        if source is None:
            raise UnsupportedTfliteOp(self.graph.path, op.kind, " of a tensor that is not a sparse constant")
        self.constants[op.outputs[0]] = densify(source)

    # -- graph ------------------------------------------------------------------------------

    def emit(self) -> onnx.ModelProto:
        path = self.graph.path
        if len(self.graph.inputs) != 1:
            raise ModelFileError(path, f"has {len(self.graph.inputs)} inputs; only single-input image models convert")
        source = self.tensor(self.graph.inputs[0])
        if len(source.shape) != 4 or source.shape[0] != 1 or source.dtype != np.float32:
            raise ModelFileError(path, f"input {source.name!r} is {source.dtype} {source.shape}, not a float32 [1, H, W, C] image")
        self.names[source.index] = INPUT_NAME
        for op in self.graph.operators:
            handler = self.HANDLERS.get(op.kind)
            if handler is None:
                raise UnsupportedTfliteOp(path, op.kind)
            handler(self, op)
        outputs = []
        for index in self.graph.outputs:
            tensor = self.tensor(index)
            if index not in self.names:
                raise ModelFileError(path, f"output {tensor.name!r} is never computed")
            perm = {"perm": list(_TO_NHWC)} if len(tensor.shape) == 4 else {}
            self.node("Transpose" if perm else "Identity", [self.names[index]], tensor.name, **perm)
            outputs.append(helper.make_tensor_value_info(tensor.name, TensorProto.FLOAT, [BATCH, *tensor.shape[1:]]))
        _, height, width, channels = source.shape
        graph = helper.make_graph(
            self.nodes,
            path.stem,
            [helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, [BATCH, channels, height, width])],
            outputs,
            self.initializers,
        )
        model = helper.make_model(
            graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="swapcast.tflite_onnx",
            producer_version=str(CONVERTER_VERSION),
        )
        model.ir_version = 8  # ONNX Runtime and onnx2torch both read IR 8 (opset 17)
        spec = MEDIAPIPE_INPUTS.get(path.name)
        if spec is not None:
            low, high = spec.value_range
            model.metadata_props.append(onnx.StringStringEntryProto(key="input_range", value=f"{low},{high}"))
        model.metadata_props.append(onnx.StringStringEntryProto(key="tflite_source", value=path.name))
        return model


_Emitter.HANDLERS = {
    "CONV_2D": _Emitter.conv_2d,
    "DEPTHWISE_CONV_2D": _Emitter.depthwise_conv_2d,
    "MAX_POOL_2D": _Emitter.max_pool_2d,
    "PAD": _Emitter.pad,
    "PRELU": _Emitter.prelu,
    "RELU": _Emitter.relu,
    "ADD": _Emitter.add,
    "CONCATENATION": _Emitter.concatenation,
    "RESHAPE": _Emitter.reshape,
    "RESIZE_BILINEAR": _Emitter.resize_bilinear,
    "DEPTH_TO_SPACE": _Emitter.depth_to_space,
    "DEQUANTIZE": _Emitter.dequantize,
    "DENSIFY": _Emitter.densify,
    "MEAN": _Emitter.mean,
    "FULLY_CONNECTED": _Emitter.fully_connected,
    "LOGISTIC": _Emitter.logistic,
}
