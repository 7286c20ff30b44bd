"""The converted face models equal mediapipe's own TFLite runs on real frames.

The reference is mediapipe's InferenceCalculator (the TFLite interpreter inside the wheel,
with the XNNPACK delegate its CPU solutions use), driven through a small graph that returns
the raw output tensors: so the comparison is model against model, on the same uint8 crop,
with no crop or decode logic of ours in between. The input scaling in MEDIAPIPE_INPUTS is
checked end to end against mediapipe's own face subgraphs (FaceLandmarkCpu,
FaceDetection*Cpu), which feed the models however mediapipe does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import flatbuffers
import matplotlib.cbook
import matplotlib.image
import mediapipe as mp
import numpy as np
import onnxruntime as ort
import pytest
import skimage.data
import tflite
from google.protobuf import text_format
from mediapipe.framework import calculator_pb2
from mediapipe.framework.formats import rect_pb2
from mediapipe.python import packet_creator, packet_getter
from mediapipe.python._framework_bindings import resource_util

from gpu.errors import ModelFileError
from gpu.models import tflite_onnx
from gpu.models.builtin import BuiltinModels
from gpu.models.tflite_onnx import MEDIAPIPE_INPUTS, UnsupportedTfliteOp, convert_cached, convert_tflite
from gpu.models.tflite_reader import DimensionMetadata, Sparsity, Tensor, densify
from gpu.runners.torch_cuda import TorchRunner

# Landmark pixels at 192 px: "a small fraction of a pixel".
LANDMARK_TOLERANCE_PX = 0.005  # measured: 1.2e-4
# Detector regressors are in input pixels (128/192), scores are logits.
DETECTION_TOLERANCE = 0.005  # measured: 2.8e-4


def _frames() -> dict[str, np.ndarray]:
    grace = np.asarray(matplotlib.image.imread(matplotlib.cbook.get_sample_data("grace_hopper.jpg")))
    return {"astronaut": skimage.data.astronaut(), "grace_hopper": grace[..., :3]}


# Square crops around each frame's face (mediapipe's own detector puts the astronaut's face
# at x 178..273, y 83..178 and Grace Hopper's at x 171..366, y 147..341), enlarged 1.5x the
# way mediapipe's face ROI is.
FACE_CROPS = {"astronaut": (154, 59, 144), "grace_hopper": (122, 98, 292)}
FRAMES = _frames()


def _face_crop(name: str, size: int) -> np.ndarray:
    x, y, side = FACE_CROPS[name]
    return cv2.resize(FRAMES[name][y : y + side, x : x + side], (size, size), interpolation=cv2.INTER_AREA)


def _whole_frame(name: str, size: int) -> np.ndarray:
    frame = FRAMES[name]
    side = min(frame.shape[:2])
    return cv2.resize(frame[:side, :side], (size, size), interpolation=cv2.INTER_AREA)


def _run_mediapipe(config: str, packets: dict[str, object], outputs: list[str], getter) -> dict[str, object]:
    """One timestamp of a mediapipe graph: ``packets`` in, ``getter(packet)`` of each output."""
    resource_util.set_resource_dir(str(Path(mp.__file__).parent.parent))  # subgraphs find their .tflite
    graph = mp.CalculatorGraph(graph_config=text_format.Parse(config, calculator_pb2.CalculatorGraphConfig()))
    results: dict[str, object] = {}
    for name in outputs:
        graph.observe_output_stream(name, lambda stream, packet: results.__setitem__(stream, getter(packet)))
    graph.start_run()
    for name, packet in packets.items():
        graph.add_packet_to_input_stream(name, packet.at(0))
    graph.close()
    return results


def _image_packet(image: np.ndarray):
    return packet_creator.create_image_frame(image_format=mp.ImageFormat.SRGB, data=np.ascontiguousarray(image))


def _mediapipe_outputs(model: Path, image: np.ndarray, outputs: int) -> list[np.ndarray]:
    """Raw output tensors of mediapipe's TFLite run of ``model`` on ``image`` (uint8 RGB at the
    model's size, so ImageToTensorCalculator only rescales values, as it does for a crop)."""
    low, high = MEDIAPIPE_INPUTS[model.name].value_range
    size = image.shape[0]
    names = [f"out{i}" for i in range(outputs)]
    ranges = " ".join(f"ranges {{ begin: {i} end: {i + 1} }}" for i in range(outputs))
    floats = "\n".join(
        f'node {{ calculator: "TensorsToFloatsCalculator" input_stream: "TENSORS:split{i}" output_stream: "FLOATS:out{i}" }}'
        for i in range(outputs)
    )
    config = f"""
        input_stream: "image"
        {" ".join(f'output_stream: "{name}"' for name in names)}
        node {{ calculator: "ImageToTensorCalculator" input_stream: "IMAGE:image" output_stream: "TENSORS:tensor"
          options {{ [mediapipe.ImageToTensorCalculatorOptions.ext] {{
            output_tensor_width: {size} output_tensor_height: {size} keep_aspect_ratio: false
            output_tensor_float_range {{ min: {low} max: {high} }} border_mode: BORDER_ZERO }} }} }}
        node {{ calculator: "InferenceCalculator" input_stream: "TENSORS:tensor" output_stream: "TENSORS:raw"
          options {{ [mediapipe.InferenceCalculatorOptions.ext] {{ model_path: "{model}" delegate {{ xnnpack {{}} }} }} }} }}
        node {{ calculator: "SplitTensorVectorCalculator" input_stream: "raw"
          {" ".join(f'output_stream: "split{i}"' for i in range(outputs))}
          options {{ [mediapipe.SplitVectorCalculatorOptions.ext] {{ {ranges} }} }} }}
        {floats}
    """
    results = _run_mediapipe(config, {"image": _image_packet(image)}, names, packet_getter.get_float_list)
    return [np.array(results[name]) for name in names]


def _onnx_outputs(session: ort.InferenceSession, model: Path, images: list[np.ndarray]) -> list[np.ndarray]:
    low, high = MEDIAPIPE_INPUTS[model.name].value_range
    batch = np.stack(images).astype(np.float32).transpose(0, 3, 1, 2) / 255.0 * (high - low) + low
    return session.run(None, {tflite_onnx.INPUT_NAME: batch})


@pytest.fixture(scope="module")
def models() -> BuiltinModels:
    return BuiltinModels.locate()


@pytest.fixture(scope="module")
def sessions(models: BuiltinModels) -> dict[str, ort.InferenceSession]:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return {
        path.name: ort.InferenceSession(convert_tflite(path).SerializeToString(), options, providers=["CPUExecutionProvider"])
        for path in (models.face_mesh, models.blazeface_short, models.blazeface_full)
    }


@pytest.mark.parametrize("frame", sorted(FACE_CROPS))
def test_face_landmarks_equal_mediapipe_tflite(frame: str, models: BuiltinModels, sessions) -> None:
    crop = _face_crop(frame, 192)
    expected_mesh, expected_flag = _mediapipe_outputs(models.face_mesh, crop, 2)
    mesh, flag = _onnx_outputs(sessions[models.face_mesh.name], models.face_mesh, [crop])
    assert mesh.shape == (1, 1, 1, 1404) and flag.shape == (1, 1, 1, 1)
    assert expected_flag[0] > 0, "the crop must show a face (mediapipe's presence logit)"
    landmarks, expected = mesh.reshape(468, 3), expected_mesh.reshape(468, 3)
    assert np.abs(landmarks[:, :2] - expected[:, :2]).max() < LANDMARK_TOLERANCE_PX
    assert np.abs(landmarks[:, 2] - expected[:, 2]).max() < LANDMARK_TOLERANCE_PX
    assert abs(float(flag.ravel()[0]) - float(expected_flag[0])) < DETECTION_TOLERANCE
    # The face spans the crop: landmarks are in crop pixels, not normalised.
    assert 40 < np.ptp(expected[:, 0]) < 192


@pytest.mark.parametrize("frame", sorted(FACE_CROPS))
@pytest.mark.parametrize("detector", ["blazeface_short", "blazeface_full"])
def test_detector_raw_outputs_equal_mediapipe_tflite(frame: str, detector: str, models: BuiltinModels, sessions) -> None:
    path: Path = getattr(models, detector)
    image = _whole_frame(frame, MEDIAPIPE_INPUTS[path.name].size)
    expected_boxes, expected_scores = _mediapipe_outputs(path, image, 2)
    boxes, scores = _onnx_outputs(sessions[path.name], path, [image])
    anchors = boxes.shape[1]
    assert boxes.shape == (1, anchors, 16) and scores.shape == (1, anchors, 1)
    assert expected_scores.max() > 0, "some anchor must see the face (mediapipe's score logit)"
    np.testing.assert_allclose(boxes.ravel(), expected_boxes, atol=DETECTION_TOLERANCE, rtol=0)
    np.testing.assert_allclose(scores.ravel(), expected_scores, atol=DETECTION_TOLERANCE, rtol=0)


@pytest.mark.parametrize("frame", sorted(FACE_CROPS))
def test_landmark_input_scaling_is_what_mediapipe_face_mesh_feeds(frame: str, models: BuiltinModels, sessions) -> None:
    # FaceLandmarkCpu (FaceMesh's landmark subgraph) on the crop with the whole crop as ROI:
    # it scales the pixels itself; our MEDIAPIPE_INPUTS scaling must give its landmarks.
    crop = _face_crop(frame, 192)
    roi = rect_pb2.NormalizedRect(x_center=0.5, y_center=0.5, width=1.0, height=1.0, rotation=0.0)
    config = """
        input_stream: "image" input_stream: "roi" output_stream: "landmarks"
        node { calculator: "FaceLandmarkCpu" input_stream: "IMAGE:image" input_stream: "ROI:roi"
               output_stream: "LANDMARKS:landmarks" }
    """
    packets = {"image": _image_packet(crop), "roi": packet_creator.create_proto(roi)}
    result = _run_mediapipe(config, packets, ["landmarks"], packet_getter.get_proto)["landmarks"]
    expected = np.array([[p.x, p.y, p.z] for p in result.landmark]) * 192  # normalised -> crop pixels
    mesh, _ = _onnx_outputs(sessions[models.face_mesh.name], models.face_mesh, [crop])
    assert np.abs(mesh.reshape(468, 3) - expected).max() < LANDMARK_TOLERANCE_PX


@pytest.mark.parametrize("frame", sorted(FACE_CROPS))
@pytest.mark.parametrize(
    ("detector", "subgraph"), [("blazeface_short", "FaceDetectionShortRangeCpu"), ("blazeface_full", "FaceDetectionFullRangeCpu")]
)
def test_detector_input_scaling_is_what_mediapipe_face_detection_feeds(
    frame: str, detector: str, subgraph: str, models: BuiltinModels, sessions
) -> None:
    # The best detection's score after mediapipe's decode and NMS is the sigmoid of the best
    # anchor's logit, so it pins the input scaling (the other range moves it by 1e-3..3e-2).
    path: Path = getattr(models, detector)
    image = _whole_frame(frame, MEDIAPIPE_INPUTS[path.name].size)
    config = f"""
        input_stream: "image" output_stream: "detections"
        node {{ calculator: "{subgraph}" input_stream: "IMAGE:image" output_stream: "DETECTIONS:detections" }}
    """
    detections = _run_mediapipe(config, {"image": _image_packet(image)}, ["detections"], packet_getter.get_proto_list)["detections"]
    best = max(d.score[0] for d in detections)
    _, scores = _onnx_outputs(sessions[path.name], path, [image])
    assert abs(1.0 / (1.0 + np.exp(-scores.max())) - best) < 1e-4


@pytest.mark.parametrize("model", ["face_mesh", "blazeface_short", "blazeface_full"])
def test_a_batch_equals_frames_run_one_by_one(model: str, models: BuiltinModels, sessions) -> None:
    path: Path = getattr(models, model)
    size = MEDIAPIPE_INPUTS[path.name].size
    images = [_face_crop(name, size) for name in sorted(FACE_CROPS)]
    session = sessions[path.name]
    batched = _onnx_outputs(session, path, images)
    for i, image in enumerate(images):
        for together, alone in zip(batched, _onnx_outputs(session, path, [image]), strict=True):
            np.testing.assert_allclose(together[i], alone[0], atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("model", ["face_mesh", "blazeface_short", "blazeface_full"])
def test_the_torch_runner_runs_the_converted_graphs_like_onnx_runtime(model: str, models: BuiltinModels, sessions) -> None:
    # The GPU path runs these graphs through onnx2torch: on the CPU (fp32) it must agree.
    path: Path = getattr(models, model)
    size = MEDIAPIPE_INPUTS[path.name].size
    images = [_face_crop(name, size) for name in sorted(FACE_CROPS)] + [_whole_frame("astronaut", size)]
    low, high = MEDIAPIPE_INPUTS[path.name].value_range
    batch = np.stack(images).astype(np.float32).transpose(0, 3, 1, 2) / 255.0 * (high - low) + low
    expected = sessions[path.name].run(None, {tflite_onnx.INPUT_NAME: batch})
    got = TorchRunner(convert_tflite(path), device="cpu").run({tflite_onnx.INPUT_NAME: batch})
    for mine, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(mine, theirs, atol=2e-3, rtol=0)


def _sparse(shape: tuple[int, ...], values: list[float], sparsity: Sparsity) -> Tensor:
    return Tensor(index=0, name="w", shape=shape, dtype=np.dtype(np.float32), data=np.array(values, np.float32), sparsity=sparsity)


def test_densify_decodes_csr_rows() -> None:
    # TFLite's sparsity example: a dense row level, then CSR column indices per row.
    sparsity = Sparsity(
        traversal_order=(0, 1),
        block_map=(),
        levels=(
            DimensionMetadata(dense_size=4),
            DimensionMetadata(None, segments=np.array([0, 2, 2, 3, 5]), indices=np.array([0, 3, 1, 0, 2])),
        ),
    )
    dense = densify(_sparse((4, 4), [1, 2, 3, 4, 5], sparsity))
    np.testing.assert_array_equal(dense, [[1, 0, 0, 2], [0, 0, 0, 0], [0, 3, 0, 0], [4, 0, 5, 0]])


def test_densify_decodes_blocks() -> None:
    # A 4x4 matrix in 2x2 blocks: block rows dense, block columns CSR, then each block dense.
    sparsity = Sparsity(
        traversal_order=(0, 1, 2, 3),
        block_map=(0, 1),
        levels=(
            DimensionMetadata(dense_size=2),
            DimensionMetadata(None, segments=np.array([0, 1, 2]), indices=np.array([1, 0])),
            DimensionMetadata(dense_size=2),
            DimensionMetadata(dense_size=2),
        ),
    )
    dense = densify(_sparse((4, 4), [1, 2, 3, 4, 5, 6, 7, 8], sparsity))
    np.testing.assert_array_equal(dense, [[0, 0, 1, 2], [0, 0, 3, 4], [5, 6, 0, 0], [7, 8, 0, 0]])


@dataclass
class _Op:
    code: int
    inputs: list[int]
    outputs: list[int]
    options: tuple[int, Callable[[flatbuffers.Builder], int]] | None = None  # (union type, table writer)


def _tflite_model(tensors: list[tuple[str, tuple[int, ...], np.ndarray | None]], ops: list[_Op], inputs: list[int], outputs: list[int]) -> bytes:
    """A small TFLite model written with the schema package: ``tensors`` are (name, shape,
    constant contents or None), ``ops`` reference them by index."""
    builder = flatbuffers.Builder(4096)

    def vector(start, values: list[int], prepend) -> int:
        start(builder, len(values))
        for value in reversed(values):
            prepend(value)
        return builder.EndVector()

    buffers = []
    for _, _, data in [("", (), None), *tensors]:
        contents = None if data is None else builder.CreateNumpyVector(np.frombuffer(data.tobytes(), np.uint8))
        tflite.BufferStart(builder)
        if contents is not None:
            tflite.BufferAddData(builder, contents)
        buffers.append(tflite.BufferEnd(builder))
    tensor_tables = []
    for index, (name, shape, data) in enumerate(tensors):
        label = builder.CreateString(name)
        dims = vector(tflite.TensorStartShapeVector, list(shape), builder.PrependInt32)
        tflite.TensorStart(builder)
        tflite.TensorAddShape(builder, dims)
        kind = tflite.TensorType.FLOAT32 if data is None or data.dtype == np.float32 else tflite.TensorType.INT32
        tflite.TensorAddType(builder, kind)
        tflite.TensorAddBuffer(builder, 0 if data is None else index + 1)
        tflite.TensorAddName(builder, label)
        tensor_tables.append(tflite.TensorEnd(builder))
    codes, operators = [], []
    for op in ops:
        tflite.OperatorCodeStart(builder)
        tflite.OperatorCodeAddBuiltinCode(builder, op.code)
        tflite.OperatorCodeAddDeprecatedBuiltinCode(builder, min(op.code, 127))
        codes.append(tflite.OperatorCodeEnd(builder))
        options = op.options[1](builder) if op.options else None
        op_inputs = vector(tflite.OperatorStartInputsVector, op.inputs, builder.PrependInt32)
        op_outputs = vector(tflite.OperatorStartOutputsVector, op.outputs, builder.PrependInt32)
        tflite.OperatorStart(builder)
        tflite.OperatorAddOpcodeIndex(builder, len(operators))
        tflite.OperatorAddInputs(builder, op_inputs)
        tflite.OperatorAddOutputs(builder, op_outputs)
        if op.options:
            tflite.OperatorAddBuiltinOptionsType(builder, op.options[0])
            tflite.OperatorAddBuiltinOptions(builder, options)
        operators.append(tflite.OperatorEnd(builder))
    tensor_vector = vector(tflite.SubGraphStartTensorsVector, tensor_tables, builder.PrependUOffsetTRelative)
    operator_vector = vector(tflite.SubGraphStartOperatorsVector, operators, builder.PrependUOffsetTRelative)
    graph_inputs = vector(tflite.SubGraphStartInputsVector, inputs, builder.PrependInt32)
    graph_outputs = vector(tflite.SubGraphStartOutputsVector, outputs, builder.PrependInt32)
    tflite.SubGraphStart(builder)
    tflite.SubGraphAddTensors(builder, tensor_vector)
    tflite.SubGraphAddOperators(builder, operator_vector)
    tflite.SubGraphAddInputs(builder, graph_inputs)
    tflite.SubGraphAddOutputs(builder, graph_outputs)
    subgraph = tflite.SubGraphEnd(builder)
    code_vector = vector(tflite.ModelStartOperatorCodesVector, codes, builder.PrependUOffsetTRelative)
    subgraphs = vector(tflite.ModelStartSubgraphsVector, [subgraph], builder.PrependUOffsetTRelative)
    buffer_vector = vector(tflite.ModelStartBuffersVector, buffers, builder.PrependUOffsetTRelative)
    tflite.ModelStart(builder)
    tflite.ModelAddVersion(builder, 3)
    tflite.ModelAddOperatorCodes(builder, code_vector)
    tflite.ModelAddSubgraphs(builder, subgraphs)
    tflite.ModelAddBuffers(builder, buffer_vector)
    builder.Finish(tflite.ModelEnd(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _one_op_model(code: int) -> bytes:
    return _tflite_model([("x", (1, 4, 4, 3), None), ("y", (1, 4, 4, 3), None)], [_Op(code, [0], [1])], [0], [1])


def _activation_options(start, add_activation, end, activation: int, *more) -> Callable[[flatbuffers.Builder], int]:
    def write(builder: flatbuffers.Builder) -> int:
        start(builder)
        add_activation(builder, activation)
        for add, value in more:
            add(builder, value)
        return end(builder)

    return write


def test_fused_activations_layouts_and_valid_padding_match_tflite_semantics(tmp_path: Path) -> None:
    # ADD (+RELU_N1_TO_1) -> CONCATENATION on the channel axis (+TANH) -> VALID CONV_2D
    # (+RELU6) -> RESHAPE 4-D to 4-D: each result is defined on NHWC, computed here in numpy.
    rng = np.random.default_rng(1)
    offset = rng.normal(size=3).astype(np.float32)
    weight = rng.normal(size=(4, 3, 3, 6)).astype(np.float32)  # OHWI
    bias = rng.normal(size=4).astype(np.float32)
    tensors = [
        ("x", (1, 4, 4, 3), None), ("offset", (3,), offset), ("added", (1, 4, 4, 3), None),
        ("joined", (1, 4, 4, 6), None), ("weight", (4, 3, 3, 6), weight), ("bias", (4,), bias),
        ("conv", (1, 2, 2, 4), None), ("shape", (4,), np.array([1, 1, 4, 4], np.int32)), ("y", (1, 1, 4, 4), None),
    ]
    kinds, options = tflite.ActivationFunctionType, tflite.BuiltinOptions
    ops = [
        _Op(tflite.BuiltinOperator.ADD, [0, 1], [2], (options.AddOptions, _activation_options(
            tflite.AddOptionsStart, tflite.AddOptionsAddFusedActivationFunction, tflite.AddOptionsEnd, kinds.RELU_N1_TO_1))),
        _Op(tflite.BuiltinOperator.CONCATENATION, [2, 0], [3], (options.ConcatenationOptions, _activation_options(
            tflite.ConcatenationOptionsStart, tflite.ConcatenationOptionsAddFusedActivationFunction,
            tflite.ConcatenationOptionsEnd, kinds.TANH, (tflite.ConcatenationOptionsAddAxis, -1)))),
        _Op(tflite.BuiltinOperator.CONV_2D, [3, 4, 5], [6], (options.Conv2DOptions, _activation_options(
            tflite.Conv2DOptionsStart, tflite.Conv2DOptionsAddFusedActivationFunction, tflite.Conv2DOptionsEnd, kinds.RELU6,
            (tflite.Conv2DOptionsAddPadding, tflite.Padding.VALID), (tflite.Conv2DOptionsAddStrideW, 1),
            (tflite.Conv2DOptionsAddStrideH, 1)))),
        _Op(tflite.BuiltinOperator.RESHAPE, [6, 7], [8]),
    ]
    path = tmp_path / "layers.tflite"
    path.write_bytes(_tflite_model(tensors, ops, [0], [8]))
    session = ort.InferenceSession(convert_tflite(path).SerializeToString(), providers=["CPUExecutionProvider"])
    x = rng.normal(scale=2.0, size=(2, 4, 4, 3)).astype(np.float32)  # NHWC, a batch of two
    (y,) = session.run(None, {tflite_onnx.INPUT_NAME: x.transpose(0, 3, 1, 2)})

    joined = np.tanh(np.concatenate([np.clip(x + offset, -1, 1), x], axis=-1))
    windows = np.lib.stride_tricks.sliding_window_view(joined, (3, 3), axis=(1, 2))  # [N, 2, 2, 6, 3, 3]
    conv = np.clip(np.einsum("nhwcij,oijc->nhwo", windows, weight) + bias, 0, 6)
    np.testing.assert_allclose(y, conv.reshape(2, 1, 4, 4), atol=1e-5)


def test_a_supported_one_op_model_converts_and_runs(tmp_path: Path) -> None:
    path = tmp_path / "relu.tflite"
    path.write_bytes(_one_op_model(tflite.BuiltinOperator.RELU))
    session = ort.InferenceSession(convert_tflite(path).SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 3, 4, 4)
    (y,) = session.run(None, {tflite_onnx.INPUT_NAME: x})
    np.testing.assert_array_equal(y, np.maximum(x, 0).transpose(0, 2, 3, 1))


def test_an_unsupported_op_is_named_with_the_model_file(tmp_path: Path) -> None:
    path = tmp_path / "tanh.tflite"  # (LOGISTIC converts since the hand landmark model uses it)
    path.write_bytes(_one_op_model(tflite.BuiltinOperator.TANH))
    with pytest.raises(UnsupportedTfliteOp) as error:
        convert_tflite(path)
    assert error.value.op == "TANH"
    assert str(path) in str(error.value) and "TANH" in str(error.value)
    assert isinstance(error.value, ModelFileError)


def test_a_file_that_is_not_tflite_is_a_model_file_error(tmp_path: Path) -> None:
    path = tmp_path / "face_landmark.tflite"
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(ModelFileError, match="not a TFLite flatbuffer"):
        convert_tflite(path)
    with pytest.raises(ModelFileError, match="cannot read"):
        convert_cached(tmp_path / "missing.tflite", tmp_path / "cache")


def test_cache_converts_once_per_model_content(tmp_path: Path, models: BuiltinModels, monkeypatch) -> None:
    cache = tmp_path / "cache"
    model = tmp_path / "face_detection_short_range.tflite"
    model.write_bytes(models.blazeface_short.read_bytes())
    first = convert_cached(model, cache)
    assert first.is_file() and first.parent == cache
    assert [p.name for p in cache.iterdir()] == [first.name], "no temporary file is left behind"
    written = first.stat().st_mtime_ns

    def no_conversion(path: Path):
        raise AssertionError(f"cache hit converted {path} again")

    monkeypatch.setattr(tflite_onnx, "convert_tflite", no_conversion)
    assert convert_cached(model, cache) == first
    assert first.stat().st_mtime_ns == written
    monkeypatch.undo()

    # A different file under the same name (a new wheel) is a miss: converted to a new entry.
    model.write_bytes(models.blazeface_full.read_bytes())
    second = convert_cached(model, cache)
    assert second != first and second.is_file()
    session = ort.InferenceSession(str(second), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == [tflite_onnx.BATCH, 3, 192, 192]
