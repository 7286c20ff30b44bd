"""The ONNX Runtime runner's ``run_device`` (IO binding) against its ``run``, on the CPU
execution provider. The CUDA branch (CuPy pointers bound to the CUDA EP) is not exercised
anywhere: onnxruntime-gpu is installed on none of our machines (ARCHITECTURE.md "The GPU
check"); ``output_shape``, which decides what it preallocates, is tested here."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from gpu.errors import SwapcastError
from gpu.runners.base import TensorSpec
from gpu.runners.onnxruntime import OnnxRuntimeRunner, output_shape
from gpu.swappers.mesh_graph import build_mesh_swap_graph


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.fixture(scope="module")
def conv_relu() -> OnnxRuntimeRunner:
    """Conv 3->4 (3x3, padded) + Relu on ``[N, 3, 8, 8]``: every output dim but N is fixed."""
    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    model = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, 8, 8])],
        [weights, bias],
    )
    return OnnxRuntimeRunner(model, threads=1)


@pytest.fixture(scope="module")
def ragged() -> OnnxRuntimeRunner:
    """``x [N, 2, L]`` -> ``relu(x) * 2 [N, 2, L]`` (a symbolic dim besides the batch: ORT
    allocates it) and its mean over L ``[N, 2]`` (fixed: preallocated on CUDA)."""
    two = numpy_helper.from_array(np.array(2.0, np.float32), "two")
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["r"]),
            helper.make_node("Mul", ["r", "two"], ["doubled"]),
            helper.make_node("ReduceMean", ["x"], ["mean"], axes=[2], keepdims=0),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, "L"])],
        [
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, ["N", 2, "L"]),
            helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["N", 2]),
        ],
        [two],
    )
    return OnnxRuntimeRunner(model, threads=1)


def _assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert isinstance(a, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("count", [1, 3])
def test_run_device_equals_run_on_a_conv(conv_relu, count):
    x = np.random.default_rng(count).standard_normal((count, 3, 8, 8)).astype(np.float32)
    _assert_same(conv_relu.run_device({"x": x}), conv_relu.run({"x": x}))


@pytest.mark.parametrize("count", [1, 3, 0])
def test_run_device_equals_run_with_a_symbolic_non_batch_dim(ragged, count):
    x = np.random.default_rng(count).standard_normal((count, 2, 7)).astype(np.float32)
    got = ragged.run_device({"x": x})
    _assert_same(got, ragged.run({"x": x}))
    assert [out.shape for out in got] == [(count, 2, 7), (count, 2)]


def test_an_empty_batch_gives_empty_outputs(conv_relu):
    """Batch 0 is valid: fixed-shape outputs come back as ``(0, ...)`` (the model is not run);
    with a data-dependent dim ORT runs the empty batch (the test above, count 0)."""
    [out] = conv_relu.run_device({"x": np.zeros((0, 3, 8, 8), np.float32)})
    assert out.shape == (0, 4, 8, 8) and out.dtype == np.float32
    _assert_same([out], conv_relu.run({"x": np.zeros((0, 3, 8, 8), np.float32)}))


def test_run_device_converts_dtype_and_layout(conv_relu):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 8, 3))  # float64, and a transposed (non-contiguous) view below
    feed = x.transpose(0, 3, 1, 2)
    assert feed.dtype == np.float64 and not feed.flags.c_contiguous
    _assert_same(conv_relu.run_device({"x": feed}), conv_relu.run({"x": np.ascontiguousarray(feed, np.float32)}))
    ints = rng.integers(-3, 4, (2, 3, 8, 8))
    _assert_same(conv_relu.run_device({"x": ints}), conv_relu.run({"x": ints.astype(np.float32)}))


def test_run_device_equals_run_on_the_mesh_graph():
    """A real model: six inputs, symbolic batch and spatial sizes."""
    runner = OnnxRuntimeRunner(build_mesh_swap_graph(), threads=2)
    rng = np.random.default_rng(5)
    count, size = 2, 32
    feeds = {
        "target": rng.random((count, 3, size, size), np.float32),
        "source": rng.random((count, 3, 40, 40), np.float32),
        "grid": rng.uniform(-1.1, 1.1, (count, size, size, 2)).astype(np.float32),
        "mask": rng.random((count, 1, size, size), np.float32),
        "blend": rng.random((count, 1, 1, 1), np.float32),
        "colour": np.ones((count, 1, 1, 1), np.float32),
    }
    assert {spec.name for spec in runner.inputs} == set(feeds)
    _assert_same(runner.run_device(feeds), runner.run(feeds))


def test_run_device_names_a_missing_input_and_a_batch_mismatch(ragged):
    with pytest.raises(SwapcastError, match="missing input.*'x'"):
        ragged.run_device({"y": np.zeros((1, 2, 3), np.float32)})
    runner = OnnxRuntimeRunner(build_mesh_swap_graph(), threads=1)
    feeds = {spec.name: np.zeros((2, 1, 1, 1), np.float32) for spec in runner.inputs}
    feeds["mask"] = np.zeros((3, 1, 1, 1), np.float32)
    with pytest.raises(SwapcastError, match="disagree on the batch size"):
        runner.run_device(feeds)


def test_output_shape_preallocates_only_what_the_model_fixes():
    f32 = np.dtype(np.float32)
    batch_dim = ("N",)
    assert output_shape(TensorSpec("y", ("N", 4, 8, 8), f32), 5, batch_dim) == (5, 4, 8, 8)
    assert output_shape(TensorSpec("y", (1, 512), f32), 5, batch_dim) == (1, 512)  # a fixed first axis stays
    assert output_shape(TensorSpec("y", ("N", 2, "L"), f32), 5, batch_dim) is None  # data-dependent
    assert output_shape(TensorSpec("y", ("M", 4), f32), 5, batch_dim) is None  # not the inputs' batch axis
    assert output_shape(TensorSpec("y", (None, 4), f32), 5, (None,)) is None  # unnamed: unknown
    assert output_shape(TensorSpec("y", (), f32), 5, batch_dim) is None  # a scalar


def test_session_options_take_the_thread_budget():
    """Spin-waiting off and the budget's intra-op threads unless a count is given; one
    inter-op thread either way (``gpu.threads``; tests/test_threads.py applies profiles)."""
    from gpu import threads
    from gpu.runners.onnxruntime import session_options

    options = session_options()
    assert options.intra_op_num_threads == threads.current().runner_threads
    assert options.inter_op_num_threads == 1
    spin = "1" if threads.current().runner_spinning else "0"
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == spin
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == spin
    assert session_options(3).intra_op_num_threads == 3
