"""PyTorch runner: the GPU runner this repository measures (TensorRT is not to be had on our
machines; see ARCHITECTURE.md "The GPU check").

- Models: the built-in mesh graph runs as ``MeshSwapTorch``, a native module that mirrors
  ``gpu/swappers/mesh_graph.py`` op for op; any other ONNX model is converted with
  ``onnx2torch`` (plus a GridSample converter registered here, which onnx2torch lacks).
- Same runner on both devices: ``device="cpu"`` runs fp32 eagerly (what CI tests against
  ONNX Runtime); ``device="cuda"`` runs fp16 with the normalisation layers kept fp32 and
  replays one CUDA graph per batch-size bucket (1, 2, 4, 8, 16, 32; a batch is padded up to
  its bucket, larger batches are split).
- fp16 islands: convolutions and matrix products run in fp16 under autocast; the ops that
  overflow in fp16 (reductions -- mean/variance --, Pow, Sqrt, Div, Reciprocal, Exp/Log,
  Softmax, Instance/Layer/Batch norm) are wrapped to run in fp32 on fp32 inputs, and their
  fp32 results carry on (type promotion) until the next convolution casts to fp16.
- Zero copy: ``run_device`` takes CuPy arrays (or torch tensors) and returns CuPy arrays,
  exchanged through DLPack (``as_torch`` / ``as_cupy`` keep the data pointer).

torch, onnx2torch and CuPy are imported inside functions: importing this module needs
only NumPy and onnx.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gpu.errors import ModelFileError, SwapcastError
from gpu.runners.base import TensorSpec

BUCKETS = (1, 2, 4, 8, 16, 32)

_ONNX_DTYPES = {
    onnx.TensorProto.FLOAT: np.dtype(np.float32),
    onnx.TensorProto.FLOAT16: np.dtype(np.float16),
    onnx.TensorProto.INT64: np.dtype(np.int64),
    onnx.TensorProto.INT32: np.dtype(np.int32),
    onnx.TensorProto.UINT8: np.dtype(np.uint8),
}


class TorchUnavailableError(SwapcastError):
    """The torch runner was asked for where torch (or onnx2torch, or CUDA) is missing."""


# ----------------------------------------------------------------------------- imports


def import_torch():
    try:
        import torch
    except ImportError as exc:
        raise TorchUnavailableError(
            "the torch runner needs PyTorch: pip install 'swapcast[gpu]' (a CUDA build on GPU nodes)"
        ) from exc
    return torch


@functools.cache
def import_onnx2torch():
    """onnx2torch, importable even where torchvision is missing or broken.

    onnx2torch imports torchvision at import time for two converters only (NonMaxSuppression
    and RoiAlign, which no face-swap model uses). PyPI's torchvision must match the torch
    build exactly and fails to import beside a CPU-only or a differently built torch, so
    when it does not import, a stand-in whose functions raise is put in its place."""
    import_torch()
    try:
        import torchvision  # noqa: F401
    except Exception as exc:  # ImportError, or RuntimeError "operator torchvision::nms does not exist"
        _install_torchvision_stand_in(f"{type(exc).__name__}: {exc}")
    try:
        import onnx2torch
        from onnx2torch.node_converters.registry import add_converter
    except ImportError as exc:
        raise TorchUnavailableError("the torch runner needs onnx2torch for ONNX models: pip install 'swapcast[gpu]'") from exc
    _register_grid_sample(add_converter)
    return onnx2torch


def _install_torchvision_stand_in(reason: str) -> None:
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]

    def unavailable(*_args, **_kwargs):
        raise TorchUnavailableError(f"this model needs torchvision, which does not import here ({reason})")

    package = types.ModuleType("torchvision")
    package.__path__ = []  # a package, so "from torchvision.ops import x" resolves
    package.__swapcast_stand_in__ = reason
    ops = types.ModuleType("torchvision.ops")
    for name in ("nms", "batched_nms", "box_convert", "roi_align", "roi_pool"):
        setattr(ops, name, unavailable)
    package.ops = ops
    sys.modules["torchvision"] = package
    sys.modules["torchvision.ops"] = ops


def _register_grid_sample(add_converter) -> None:
    import torch
    from onnx2torch.onnx_graph import OnnxGraph
    from onnx2torch.onnx_node import OnnxNode
    from onnx2torch.utils.common import OnnxToTorchModule, OperationConverterResult, onnx_mapping_from_node

    class OnnxGridSample(torch.nn.Module, OnnxToTorchModule):
        def __init__(self, mode: str, padding_mode: str, align_corners: bool) -> None:
            super().__init__()
            self.mode, self.padding_mode, self.align_corners = mode, padding_mode, align_corners

        def forward(self, image: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.grid_sample(
                image, grid.to(image.dtype), mode=self.mode, padding_mode=self.padding_mode, align_corners=self.align_corners
            )

    modes = {"bilinear": "bilinear", "linear": "bilinear", "nearest": "nearest", "bicubic": "bicubic", "cubic": "bicubic"}

    def convert(node: OnnxNode, graph: OnnxGraph) -> OperationConverterResult:  # noqa: ARG001
        mode = node.attributes.get("mode", "bilinear")
        mode = mode.decode() if isinstance(mode, bytes) else mode
        padding = node.attributes.get("padding_mode", "zeros")
        padding = padding.decode() if isinstance(padding, bytes) else padding
        return OperationConverterResult(
            torch_module=OnnxGridSample(modes[mode], padding, bool(node.attributes.get("align_corners", 0))),
            onnx_mapping=onnx_mapping_from_node(node=node),
        )

    for version in (16, 20, 22):
        try:
            add_converter(operation_type="GridSample", version=version)(convert)
        except ValueError:  # a later onnx2torch registers its own: keep it
            pass


# ------------------------------------------------------------------ mesh graph, native


def is_mesh_swap_graph(model: onnx.ModelProto) -> bool:
    """The built-in mesh graph (``gpu.swappers.mesh_graph``), recognised by its signature."""
    names = [i.name for i in model.graph.input]
    return names == ["target", "source", "grid", "mask", "blend", "colour"] and [o.name for o in model.graph.output] == ["swapped"]


def mesh_swap_torch():
    """A ``MeshSwapTorch`` module (the class is built on first use, so torch is imported lazily)."""
    return _mesh_swap_class()()


@functools.cache
def _mesh_swap_class():
    torch = import_torch()
    from torch import nn
    from torch.nn import functional as F

    from gpu.swappers import mesh_graph as g

    class MeshSwapTorch(nn.Module):
        """``gpu/swappers/mesh_graph.py`` as a torch module, op for op (same inputs, same
        output, same constants), all in fp32: the sampling grid's coordinates need it (fp16
        keeps 11 bits, steps of 1/16 texel on a 256-texel texture, which shimmer over time and
        measured 0.05 off fp32 on the H200), and the module is memory-bound, not math-bound."""

        def __init__(self) -> None:
            super().__init__()
            ycc = torch.from_numpy(g._RGB_TO_YCC.copy())
            self.register_buffer("rgb_to_ycc", ycc)
            self.register_buffer("rgb_to_ycc_kernel", ycc.reshape(3, 3, 1, 1).clone())
            self.register_buffer("ycc_to_rgb", torch.from_numpy(np.linalg.inv(g._RGB_TO_YCC).astype(np.float32)))
            self.register_buffer("identity3", torch.eye(3))
            self.gain_min, self.gain_max = g._STD_GAIN_LIMITS
            self.eps = 1e-6

        def forward(self, target, source, grid, mask, blend, colour):
            n = target.shape[0]
            warped = F.grid_sample(source, grid, mode="bilinear", padding_mode="border", align_corners=False)
            weight = F.avg_pool2d(mask, 4, 4)
            area = weight.sum(dim=(2, 3), keepdim=True) + self.eps

            def masked_stats(image):
                ycc = F.conv2d(F.avg_pool2d(image, 4, 4), self.rgb_to_ycc_kernel)
                mean = (ycc * weight).sum(dim=(2, 3), keepdim=True) / area
                centred = ycc - mean
                var = ((centred * centred) * weight).sum(dim=(2, 3), keepdim=True) / area
                return mean, torch.sqrt(var + self.eps)

            src_mean, src_std = masked_stats(warped)
            dst_mean, dst_std = masked_stats(target)
            gain = torch.clamp(dst_std / src_std, self.gain_min, self.gain_max)
            matrix = torch.matmul(self.ycc_to_rgb, gain.reshape(n, 3, 1) * self.rgb_to_ycc)
            offset = torch.matmul(self.ycc_to_rgb, (dst_mean - gain * src_mean).reshape(n, 3, 1))
            switch = colour.reshape(n, 1, 1)
            matrix_on = self.identity3 + (matrix - self.identity3) * switch
            face = (torch.matmul(matrix_on, warped.reshape(n, 3, -1)) + offset * switch).reshape(target.shape)
            alpha = torch.ceil(mask) * blend
            return torch.clamp(target + (face - target) * alpha, 0.0, 1.0)

    return MeshSwapTorch


# ------------------------------------------------------------------ shape constants

# onnx2torch modules that read some tensor inputs on the host (``.tolist()``): shapes, pads,
# split sizes, scales, axes, slice bounds. A constant fed there is kept on the CPU, so a
# CUDA graph capture never waits on a device-to-host copy.
_HOST_ARGUMENT_MODULES = re.compile(
    r"^Onnx(Reshape|Pad\w*|Split\w*|Resize\w*|Expand|Tile|Slice\w*|Squeeze\w*|Unsqueeze\w*|Range|ConstantOfShape|TopK)$"
)


def host_constants(module) -> set[str]:
    """Buffers of an onnx2torch ``GraphModule`` used only as host-read arguments (never as
    the data input) of the modules above."""
    targets: set[str] = set()
    for node in module.graph.nodes:
        if node.op != "get_attr":
            continue
        users = list(node.users)
        if users and all(
            user.op == "call_module"
            and _HOST_ARGUMENT_MODULES.match(type(module.get_submodule(user.target)).__name__)
            and user.args
            and user.args[0] is not node
            for user in users
        ):
            targets.add(node.target)
    return targets


def _keep_on_host(module, targets: set[str]) -> None:
    for target in targets:
        owner_name, _, buffer_name = target.rpartition(".")
        owner = module.get_submodule(owner_name) if owner_name else module
        owner._buffers[buffer_name] = owner._buffers[buffer_name].cpu()


# ------------------------------------------------------------------------- fp16 islands

# onnx2torch module classes (or ONNX-named torch modules) that must run in fp32.
_FP32_CLASSES = re.compile(r"Reduce|Norm|Pow|Sqrt|Reciprocal|Softmax|Exp|Log|Erf|Mean|Var")
_FP16_CLASSES = ("Conv", "Linear", "ConvTranspose", "Gemm", "MatMul")


def keep_normalisation_fp32(module) -> int:
    """Prepare an onnx2torch ``GraphModule`` for fp16 autocast: wrap every normalisation /
    reduction submodule (and every Div) so it runs in fp32; store conv/linear weights in fp16.
    Returns how many submodules were kept fp32."""
    torch = import_torch()
    island = _fp32_island_class()
    kept = 0
    for name, child in list(module.named_children()):
        kind = type(child).__name__
        is_div = kind == "OnnxBinaryMathOperation" and getattr(child.math_op_function, "__name__", "") == "_onnx_div"
        if _FP32_CLASSES.search(kind) or is_div:
            setattr(module, name, island(child.float()))
            kept += 1
        elif isinstance(child, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d, torch.nn.Linear, torch.nn.ConvTranspose2d)):
            child.half()
        elif any(part in kind for part in _FP16_CLASSES) or len(list(child.children())) == 0:
            pass
        else:
            kept += keep_normalisation_fp32(child)
    return kept


@functools.cache
def _fp32_island_class():
    torch = import_torch()

    class Fp32Island(torch.nn.Module):
        """Runs the wrapped module in fp32 with autocast off; floating inputs are cast up."""

        def __init__(self, inner) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            up = lambda v: v.float() if isinstance(v, torch.Tensor) and v.is_floating_point() else v  # noqa: E731
            with torch.autocast(device_type="cuda", enabled=False), torch.autocast(device_type="cpu", enabled=False):
                return self.inner(*[up(a) for a in args], **{k: up(v) for k, v in kwargs.items()})

    return Fp32Island


# -------------------------------------------------------------------------------- DLPack


def as_torch(array: Any):
    """A torch tensor sharing ``array``'s memory: CuPy through DLPack (same pointer), NumPy
    through ``from_numpy``; tensors pass through."""
    torch = import_torch()
    if isinstance(array, torch.Tensor):
        return array
    if type(array).__module__.startswith("cupy"):
        return torch.from_dlpack(array)
    return torch.from_numpy(np.ascontiguousarray(array))


def as_cupy(tensor: Any):
    """A CuPy array sharing a CUDA tensor's memory (DLPack, same pointer)."""
    import cupy

    return cupy.from_dlpack(tensor.detach())


# -------------------------------------------------------------------------------- runner


class TorchRunner:
    """Runs a model with PyTorch behind the runner contract (``run(feeds) -> [np.ndarray]``).

    ``model``: an ONNX ``ModelProto`` or file (the mesh graph is recognised and run natively
    unless ``native=False``), or a ready ``torch.nn.Module`` with ``inputs``/``outputs`` given.
    ``device``: ``"cuda"`` or ``"cpu"``. ``fp16`` and ``cuda_graphs`` default to on for CUDA
    and are refused on CPU (CPU is the fp32 eager reference)."""

    def __init__(
        self,
        model: onnx.ModelProto | str | Path | Any,
        *,
        name: str | None = None,
        device: str = "cuda",
        fp16: bool | None = None,
        cuda_graphs: bool | None = None,
        buckets: Sequence[int] = BUCKETS,
        native: bool = True,
        inputs: Sequence[TensorSpec] | None = None,
        outputs: Sequence[TensorSpec] | None = None,
    ) -> None:
        torch = import_torch()
        if device not in ("cpu", "cuda"):
            raise SwapcastError(f"torch runner device must be cpu or cuda (got {device!r})")
        if device == "cuda" and not torch.cuda.is_available():
            raise TorchUnavailableError(
                f"the torch runner was asked to use CUDA, but torch {torch.__version__} sees no CUDA device"
                + (" (this is a CPU-only build)" if torch.version.cuda is None else "")
            )
        on_cuda = device == "cuda"
        self.fp16 = on_cuda if fp16 is None else fp16
        self.cuda_graphs = on_cuda if cuda_graphs is None else cuda_graphs
        if not on_cuda and (self.fp16 or self.cuda_graphs):
            raise SwapcastError("fp16 and CUDA graphs need device='cuda'; the CPU torch runner is the fp32 reference")
        self.device = torch.device(device)
        self.buckets = tuple(sorted(buckets))
        self._lock = threading.Lock()
        self.max_concurrency = 1  # one call at a time (static graph buffers)
        self._graphs: dict[tuple, tuple[Any, list[Any], list[Any]]] = {}

        if isinstance(model, torch.nn.Module):
            if inputs is None or outputs is None:
                raise SwapcastError("a torch module needs its inputs and outputs specs")
            self.name = name or type(model).__name__
            self.inputs, self.outputs = tuple(inputs), tuple(outputs)
            module, self.kind = model, "module"
        else:
            proto = _load_onnx(model)
            self.name = name or (Path(model).name if isinstance(model, (str, Path)) else proto.graph.name)
            self.inputs = tuple(_spec(v) for v in _real_inputs(proto))
            self.outputs = tuple(_spec(v) for v in proto.graph.output)
            if native and is_mesh_swap_graph(proto):
                module, self.kind = mesh_swap_torch(), "native mesh"
            else:
                onnx2torch = import_onnx2torch()
                try:
                    module = onnx2torch.convert(proto)
                except Exception as exc:  # NotImplementedError for an op, others for odd graphs
                    raise ModelFileError(self.name, f"onnx2torch cannot convert it ({exc})") from exc
                self.kind = "onnx2torch"
                self._host_constants = host_constants(module)
                if self.fp16:
                    self.fp32_islands = keep_normalisation_fp32(module)
        self.module = module.to(self.device).eval()
        _keep_on_host(self.module, getattr(self, "_host_constants", set()))
        self.graph_error: str | None = None  # why CUDA graphs were given up, if they were
        self._autocast = self.fp16 and self.kind != "native mesh"

    # -- the contract

    def run(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        """Host in, host out (NumPy), as every runner."""
        return [t.detach().cpu().numpy() for t in self._run_tensors(feeds)]

    def run_device(self, feeds: Mapping[str, Any]) -> list[Any]:
        """Device in, device out: CuPy (or torch) feeds, CuPy results on CUDA, zero-copy
        both ways (NumPy results on CPU)."""
        outputs = self._run_tensors(feeds)
        if self.device.type == "cuda":
            return [as_cupy(t) for t in outputs]
        return [t.numpy() for t in outputs]

    # -- internals

    def _run_tensors(self, feeds: Mapping[str, Any]) -> list[Any]:
        torch = import_torch()
        tensors = []
        for spec in self.inputs:
            if spec.name not in feeds:
                raise SwapcastError(f"{self.name}: missing input {spec.name!r}")
            tensor = as_torch(feeds[spec.name]).to(self.device, _TORCH_DTYPES()[spec.dtype], non_blocking=True)
            tensors.append(tensor.contiguous())
        count = tensors[0].shape[0]
        if any(t.shape[0] != count for t in tensors):
            raise SwapcastError(f"{self.name}: inputs disagree on the batch size")
        if count == 0:
            with torch.inference_mode():
                probe = self._forward([torch.cat([t[:0], torch.zeros_like(t[:1])]) for t in tensors])
            return [p[:0] for p in probe]
        if not self.cuda_graphs:
            with torch.inference_mode():
                return self._forward(tensors)
        if self.graph_error is not None:
            with torch.inference_mode():
                return self._forward(tensors)
        largest = self.buckets[-1]
        parts = [self._replay([t[i : i + largest] for t in tensors]) for i in range(0, count, largest)]
        return [torch.cat([p[k] for p in parts]) if len(parts) > 1 else parts[0][k] for k in range(len(self.outputs))]

    def _forward(self, tensors: list[Any]) -> list[Any]:
        torch = import_torch()
        with torch.autocast(device_type=self.device.type, dtype=torch.float16, enabled=self._autocast):
            result = self.module(*tensors)
        if isinstance(result, torch.Tensor):
            result = [result]
        return [r.to(_TORCH_DTYPES()[spec.dtype]) for r, spec in zip(result, self.outputs, strict=True)]

    def bucket(self, count: int) -> int:
        return next(b for b in self.buckets if b >= count)

    def _replay(self, tensors: list[Any]) -> list[Any]:
        torch = import_torch()
        count = tensors[0].shape[0]
        size = self.bucket(count)
        key = (size, *((tuple(t.shape[1:]), t.dtype) for t in tensors))
        with self._lock:
            entry = self._graphs.get(key)
            if entry is None:
                try:
                    entry = self._capture(size, tensors)
                except Exception as exc:  # a model that reads device values on the host cannot be captured
                    self.graph_error = f"{type(exc).__name__}: {exc}"
                    torch.cuda.synchronize()
                    with torch.inference_mode():
                        return self._forward(tensors)
                self._graphs[key] = entry
            graph, static_in, static_out = entry
            for buffer, tensor in zip(static_in, tensors, strict=True):
                buffer[:count].copy_(tensor)
                if count < size:
                    buffer[count:].zero_()
            graph.replay()
            return [out[:count].clone() for out in static_out]

    def _capture(self, size: int, like: list[Any]):
        torch = import_torch()
        static_in = [torch.zeros((size, *t.shape[1:]), dtype=t.dtype, device=self.device) for t in like]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.inference_mode():
            for _ in range(2):  # warm-up: cuDNN picks its algorithms outside the capture
                self._forward(static_in)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            static_out = self._forward(static_in)
        return graph, static_in, static_out

    @property
    def captured_buckets(self) -> list[int]:
        return sorted({key[0] for key in self._graphs})


@functools.cache
def _TORCH_DTYPES():  # noqa: N802 - a constant table, built once torch is imported
    torch = import_torch()
    return {
        np.dtype(np.float32): torch.float32,
        np.dtype(np.float16): torch.float16,
        np.dtype(np.int64): torch.int64,
        np.dtype(np.int32): torch.int32,
        np.dtype(np.uint8): torch.uint8,
    }


def _load_onnx(model: onnx.ModelProto | str | Path) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        return onnx.load(str(model))
    except Exception as exc:
        raise ModelFileError(model, f"not a readable ONNX file ({exc})") from exc


def _real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    initialisers = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in initialisers]


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    tensor = value.type.tensor_type
    shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
    return TensorSpec(value.name, shape, _ONNX_DTYPES.get(tensor.elem_type, np.dtype(np.float32)))
