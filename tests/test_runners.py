"""Runners on the CPU: the PyTorch runner (the one measured on the GPU) equals ONNX Runtime,
runner choice and its errors, and the TensorRT runner without TensorRT."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest

from gpu.device import DeviceInfo, DeviceUnavailableError
from gpu.errors import SwapcastError
from gpu.models.synthetic import build_synthetic_inswapper, flops_per_face
from gpu.runners import select
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.runners.torch_cuda import (
    TorchRunner,
    TorchUnavailableError,
    as_torch,
    import_onnx2torch,
    keep_normalisation_fp32,
    mesh_swap_torch,
)
from gpu.swappers.inswapper import make_batch_dynamic
from gpu.swappers.mesh_graph import build_mesh_swap_graph
from model_twins import make_inswapper

torch = pytest.importorskip("torch")  # installed by the test extra; a skip fails under CI=true

TOLERANCE = 1e-4


def _mesh_feeds(count: int, size: int = 64, texture: int = 80, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = np.clip(rng.uniform(-0.5, 1.5, (count, 1, size, size)), 0, 1).astype(np.float32)
    return {
        "target": rng.random((count, 3, size, size), np.float32),
        "source": rng.random((count, 3, texture, texture), np.float32),
        "grid": rng.uniform(-1.1, 1.1, (count, size, size, 2)).astype(np.float32),
        "mask": mask,
        "blend": rng.random((count, 1, 1, 1), np.float32),
        "colour": (np.arange(count) % 2).astype(np.float32).reshape(count, 1, 1, 1),
    }


@pytest.fixture(scope="module")
def mesh_graph() -> onnx.ModelProto:
    return build_mesh_swap_graph()


@pytest.fixture(scope="module")
def mesh_reference(mesh_graph):
    return OnnxRuntimeRunner(mesh_graph, threads=2)


@pytest.mark.parametrize("native", [True, False], ids=["native", "onnx2torch"])
@pytest.mark.parametrize(("count", "size"), [(1, 64), (3, 64), (5, 32)])
def test_torch_runner_on_cpu_equals_onnxruntime_on_the_mesh_graph(mesh_graph, mesh_reference, native, count, size):
    runner = TorchRunner(mesh_graph, device="cpu", native=native)
    assert runner.kind == ("native mesh" if native else "onnx2torch")
    feeds = _mesh_feeds(count, size, seed=count)
    [got] = runner.run(feeds)
    [want] = mesh_reference.run(feeds)
    assert got.shape == want.shape == (count, 3, size, size) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)


def test_mesh_swap_torch_module_equals_the_onnx_graph(mesh_reference):
    module = mesh_swap_torch().eval()
    feeds = _mesh_feeds(4, seed=9)
    with torch.inference_mode():
        got = module(*[torch.from_numpy(feeds[name]) for name in ("target", "source", "grid", "mask", "blend", "colour")])
    np.testing.assert_allclose(got.numpy(), mesh_reference.run(feeds)[0], atol=TOLERANCE, rtol=0)


def test_torch_runner_equals_onnxruntime_on_the_inswapper_twin_with_dynamic_batch(tmp_path):
    path = make_inswapper(tmp_path / "inswapper_128.onnx")
    model = onnx.load(str(path))
    make_batch_dynamic(model, path)
    reference = OnnxRuntimeRunner(model)
    runner = TorchRunner(model, device="cpu", name="inswapper_128")
    rng = np.random.default_rng(3)
    for count in (1, 4, 7):
        feeds = {"target": rng.random((count, 3, 128, 128), np.float32), "source": rng.standard_normal((count, 512)).astype(np.float32)}
        [got] = runner.run(feeds)
        np.testing.assert_allclose(got, reference.run(feeds)[0], atol=TOLERANCE, rtol=0)
        # rows are independent: each row alone (its own source) gives the same answer
        for row in range(count):
            [alone] = runner.run({name: value[row : row + 1] for name, value in feeds.items()})
            np.testing.assert_allclose(alone[0], got[row], atol=1e-5, rtol=0)


def test_torch_runner_equals_onnxruntime_on_the_synthetic_inswapper():
    model = build_synthetic_inswapper(width=8, blocks=2, seed=4)
    rng = np.random.default_rng(4)
    feeds = {"target": rng.random((3, 3, 128, 128), np.float32), "source": rng.standard_normal((3, 512)).astype(np.float32)}
    [got] = TorchRunner(model, device="cpu").run(feeds)
    [want] = OnnxRuntimeRunner(model).run(feeds)
    assert got.shape == (3, 3, 128, 128) and 0 <= got.min() and got.max() <= 1
    assert got.std() > 0.01  # not a constant picture
    np.testing.assert_allclose(got, want, atol=TOLERANCE, rtol=0)


def test_synthetic_inswapper_has_the_inswapper_signature_and_cost():
    model = build_synthetic_inswapper()
    inputs = {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in model.graph.input}
    assert inputs == {"target": ["N", 3, 128, 128], "source": ["N", 512]}
    assert [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == ["N", 3, 128, 128]
    assert model.graph.initializer[-1].name == "emap" and list(model.graph.initializer[-1].dims) == [512, 512]
    assert 165e9 <= flops_per_face(model) <= 185e9
    assert len([n for n in model.graph.node if n.op_type == "Conv"]) >= 20  # similar depth


def test_fp32_islands_wrap_the_normalisation_and_are_transparent_in_fp32():
    model = build_synthetic_inswapper(width=8, blocks=1, seed=5)
    module = import_onnx2torch().convert(model).eval()
    rng = np.random.default_rng(5)
    inputs = (torch.from_numpy(rng.random((2, 3, 128, 128), np.float32)), torch.from_numpy(rng.standard_normal((2, 512)).astype(np.float32)))
    for layer in module.modules():  # weights fp16-exact, so storing them in fp16 loses nothing
        if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)):
            layer.weight.data = layer.weight.data.half().float()
    with torch.inference_mode():
        before = module(*inputs)
    kept = keep_normalisation_fp32(module)
    norms = sum(1 for n in model.graph.node if n.op_type in ("ReduceMean", "Div", "Sqrt"))
    assert kept == norms
    names = {type(child).__name__ for child in module.children()}
    assert "Fp32Island" in names
    convs = [m for m in module.modules() if isinstance(m, torch.nn.Conv2d)]
    assert convs and all(m.weight.dtype == torch.float16 for m in convs)
    for layer in module.modules():  # back to fp32 weights: the islands alone must not change the result
        if isinstance(layer, (torch.nn.Conv2d, torch.nn.Linear)):
            layer.float()
    with torch.inference_mode():
        after = module(*inputs)
    np.testing.assert_allclose(after.numpy(), before.numpy(), atol=1e-6, rtol=0)


def test_cpu_torch_runner_is_the_fp32_reference_and_refuses_gpu_only_options(mesh_graph):
    with pytest.raises(SwapcastError, match="need device='cuda'"):
        TorchRunner(mesh_graph, device="cpu", fp16=True)
    with pytest.raises(SwapcastError, match="need device='cuda'"):
        TorchRunner(mesh_graph, device="cpu", cuda_graphs=True)
    with pytest.raises(SwapcastError, match="cpu or cuda"):
        TorchRunner(mesh_graph, device="tpu")
    if not torch.cuda.is_available():
        with pytest.raises(TorchUnavailableError, match="sees no CUDA device"):
            TorchRunner(mesh_graph, device="cuda")


def test_run_device_on_cpu_and_zero_copy_numpy(mesh_graph, mesh_reference):
    runner = TorchRunner(mesh_graph, device="cpu")
    feeds = _mesh_feeds(2, seed=11)
    [out] = runner.run_device(feeds)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, mesh_reference.run(feeds)[0], atol=TOLERANCE, rtol=0)
    host = np.zeros((4, 4), np.float32)
    assert as_torch(host).data_ptr() == host.ctypes.data


def test_onnx2torch_imports_with_or_without_a_working_torchvision():
    assert import_onnx2torch() is sys.modules["onnx2torch"]
    vision = sys.modules["torchvision"]
    if getattr(vision, "__swapcast_stand_in__", None):  # PyPI's torchvision beside a CPU torch
        with pytest.raises(TorchUnavailableError, match="torchvision"):
            vision.ops.nms(None, None, 0.5)


# --------------------------------------------------------------------- runner choice

CUDA = DeviceInfo("cupy", "Test GPU", 80.0, "test")
CPU = DeviceInfo("numpy", "CPU", None, "test")


def _node(monkeypatch, *, trt: bool, torch_cuda: bool, ort_cuda: bool) -> None:
    monkeypatch.setattr(select, "tensorrt_importable", lambda: (trt, "TensorRT 10.9" if trt else "TensorRT is not installed"))
    monkeypatch.setattr(select, "torch_cuda_usable", lambda: (torch_cuda, "PyTorch 2.11 on CUDA 13.0" if torch_cuda else "PyTorch cannot use CUDA"))
    monkeypatch.setattr(select, "onnxruntime_cuda", lambda: ort_cuda)


@pytest.mark.parametrize(
    ("trt", "torch_cuda", "ort_cuda", "runner", "device"),
    [
        (True, True, True, "tensorrt", "cuda"),
        (False, True, True, "torch", "cuda"),
        (False, False, True, "onnxruntime", "cuda"),
        (False, False, False, "onnxruntime", "cpu"),
    ],
)
def test_auto_on_cuda_prefers_tensorrt_then_torch_then_onnxruntime(monkeypatch, trt, torch_cuda, ort_cuda, runner, device):
    _node(monkeypatch, trt=trt, torch_cuda=torch_cuda, ort_cuda=ort_cuda)
    choice = select.choose_runner(CUDA, "auto")
    assert (choice.runner, choice.device) == (runner, device)
    assert choice.reason.startswith("auto on CUDA")


def test_auto_on_cpu_is_onnxruntime_even_with_everything_installed(monkeypatch):
    _node(monkeypatch, trt=True, torch_cuda=True, ort_cuda=True)
    choice = select.choose_runner(CPU, "auto")
    assert (choice.runner, choice.device, choice.providers) == ("onnxruntime", "cpu", ("CPUExecutionProvider",))


def test_explicit_runners_are_honoured_or_refused_with_the_reason(monkeypatch):
    _node(monkeypatch, trt=False, torch_cuda=False, ort_cuda=False)
    with pytest.raises(select.RunnerUnavailableError, match="TensorRT is not installed"):
        select.choose_runner(CUDA, "tensorrt")
    with pytest.raises(select.RunnerUnavailableError, match="PyTorch cannot use CUDA"):
        select.choose_runner(CUDA, "torch")
    with pytest.raises(select.RunnerUnavailableError, match="onnxruntime-gpu"):
        select.choose_runner(CUDA, "onnxruntime")
    assert select.choose_runner(CPU, "torch").device == "cpu"
    _node(monkeypatch, trt=True, torch_cuda=True, ort_cuda=True)
    with pytest.raises(select.RunnerUnavailableError, match="needs device cuda"):
        select.choose_runner(CPU, "tensorrt")
    assert select.choose_runner(CUDA, "torch").runner == "torch"
    with pytest.raises(SwapcastError, match="runner must be one of"):
        select.choose_runner(CPU, "openvino")


def test_make_runner_builds_the_choice(mesh_graph, mesh_reference):
    feeds = _mesh_feeds(2, seed=12)
    ort = select.make_runner(mesh_graph, device="cpu", name="mesh")
    assert isinstance(ort, OnnxRuntimeRunner) and ort.choice.runner == "onnxruntime" and ort.name == "mesh"
    runner = select.make_runner(mesh_graph, device="cpu", runner="torch", max_batch=16)
    assert isinstance(runner, TorchRunner) and runner.buckets == (1, 2, 4, 8, 16)
    np.testing.assert_allclose(runner.run(feeds)[0], mesh_reference.run(feeds)[0], atol=TOLERANCE, rtol=0)


def test_auto_sends_models_with_symbolic_crop_sizes_past_tensorrt(monkeypatch, mesh_graph):
    _node(monkeypatch, trt=True, torch_cuda=True, ort_cuda=False)
    built = {}

    class FakeTorchRunner:
        def __init__(self, model, **kwargs):
            built.update(kwargs)

    import gpu.runners.torch_cuda as torch_cuda

    monkeypatch.setattr(torch_cuda, "TorchRunner", FakeTorchRunner)
    assert select.has_dynamic_non_batch_dims(mesh_graph)
    assert not select.has_dynamic_non_batch_dims(build_synthetic_inswapper(width=8, blocks=1))
    runner = select.make_runner(mesh_graph, device=CUDA)
    assert runner.choice.runner == "torch" and "symbolic" in runner.choice.reason and built["device"] == "cuda"


def test_make_runner_on_cuda_without_a_gpu_says_why():
    from gpu.device import detect_device

    if detect_device().is_cuda:
        pytest.skip("this check is for machines without CUDA")  # never the case in CI
    with pytest.raises(DeviceUnavailableError, match="device 'cuda' was asked for"):
        select.make_runner(build_mesh_swap_graph(), device="cuda")


# ------------------------------------------------------------------ TensorRT runner


def test_tensorrt_module_imports_without_tensorrt_and_refuses_clearly(mesh_graph):
    from gpu.runners import tensorrt

    if select.tensorrt_importable()[0]:
        pytest.skip("TensorRT is installed here")  # never the case on our machines
    with pytest.raises(tensorrt.TensorRTUnavailableError, match="needs TensorRT 10"):
        tensorrt.TensorRTRunner(mesh_graph)
    assert "tensorrt" not in sys.modules or sys.modules["tensorrt"] is None


def test_tensorrt_helpers():
    from gpu.runners.base import TensorSpec
    from gpu.runners.tensorrt import Profile, cache_key, keeps_fp32, timing_cache_name

    assert keeps_fp32("REDUCE") and keeps_fp32("NORMALIZATION") and keeps_fp32("UNARY", "SQRT")
    assert keeps_fp32("ELEMENTWISE", "DIV") and not keeps_fp32("ELEMENTWISE", "SUM") and not keeps_fp32("CONVOLUTION")
    profile = Profile(1, 8, 32)
    spec = TensorSpec("target", ("N", 3, 128, 128), np.dtype(np.float32))
    assert profile.shapes(spec) == ((1, 3, 128, 128), (8, 3, 128, 128), (32, 3, 128, 128))
    with pytest.raises(SwapcastError, match="fixed non-batch"):
        profile.shapes(TensorSpec("x", ("N", 3, "S", "S"), np.dtype(np.float32)))
    with pytest.raises(SwapcastError, match="min <= opt <= max"):
        Profile(1, 64, 32)
    key = dict(trt_version="10.9.0", gpu_name="NVIDIA H200", fp16=True, profile=profile, streams=2)
    first = cache_key(b"model", **key)
    assert first.startswith("trt10.9.0-nvidia-h200-") and first == cache_key(b"model", **key)
    assert cache_key(b"other", **key) != first
    assert cache_key(b"model", **{**key, "trt_version": "10.10.0"}) != first
    assert cache_key(b"model", **{**key, "gpu_name": "NVIDIA L4"}) != first
    assert timing_cache_name(trt_version="10.9.0", gpu_name="NVIDIA H200") == "timing-trt10.9.0-nvidia-h200.cache"


def test_shape_constants_stay_on_the_host_for_cuda_graph_capture():
    """Pads, shapes, split sizes and scales are read with .tolist(): kept on the CPU they
    never make a CUDA graph capture wait on the device. Weights and math operands move."""
    from gpu.runners.torch_cuda import host_constants

    module = import_onnx2torch().convert(build_synthetic_inswapper(width=8, blocks=1, seed=6))
    kept = host_constants(module)
    shape_readers = ("OnnxPadDynamic", "OnnxReshape", "OnnxResize", "OnnxSplit13")
    seen = set()
    for node in module.graph.nodes:
        if node.op != "get_attr":
            continue
        kinds = {type(module.get_submodule(user.target)).__name__ for user in node.users if user.op == "call_module"}
        seen |= kinds
        assert (node.target in kept) == (kinds <= set(shape_readers)), (node.target, kinds)
    assert set(shape_readers) <= seen and kept
