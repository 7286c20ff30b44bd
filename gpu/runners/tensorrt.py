"""TensorRT runner, for production GPU nodes that have TensorRT 10+.

**Unexercised here**: TensorRT cannot be installed on any of this project's machines (PyPI's
``tensorrt-cu13-libs`` downloads from NVIDIA's index at install time), so neither CI nor
``scripts/gpu-check.sh`` builds or runs an engine. CI only checks that this module imports
without TensorRT and that constructing the runner then fails with a clear error, plus the
pure helpers (cache keys, profile shapes, which layers stay fp32). The GPU runner that is
measured is ``gpu.runners.torch_cuda``. Treat the first run on a TensorRT node as a bring-up.

What it does:
- builds an engine from the ONNX model with a dynamic-batch optimization profile
  (min 1 / opt 8 / max 32 by default, from the engine settings), one identical profile per
  execution context;
- FP16 with the normalisation layers (reductions, normalisation, Sqrt/Pow/Div/Exp/Log,
  Softmax) constrained to FP32 (``OBEY_PRECISION_CONSTRAINTS``): plain FP16 garbles
  inswapper (its instance-norm variance overflows);
- caches the serialized engine and the timing cache on disk, keyed by TensorRT version, GPU
  name, model hash, precision and profile, so a node builds once;
- runs ``execute_async_v3`` on non-default CuPy streams, with one execution context per
  stream (each on its own profile), round robin, so at least two batches are in flight;
  tensors are bound by pointer (``set_tensor_address(name, cupy_array.data.ptr)``).
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gpu.errors import ModelFileError, SwapcastError
from gpu.runners.base import TensorSpec


class TensorRTUnavailableError(SwapcastError):
    """The TensorRT runner was asked for on a node without TensorRT or CUDA."""


# Layer kinds (TensorRT ``LayerType`` names) and unary / elementwise operations that run in
# fp32 under fp16: everything that computes or divides by a statistic.
FP32_LAYER_TYPES = frozenset({"REDUCE", "NORMALIZATION", "SOFTMAX"})
FP32_UNARY_OPS = frozenset({"SQRT", "EXP", "LOG", "RECIP"})
FP32_ELEMENTWISE_OPS = frozenset({"DIV", "POW"})


def keeps_fp32(layer_type: str, operation: str | None = None) -> bool:
    """Whether a layer (by TensorRT ``LayerType`` name and, for UNARY / ELEMENTWISE layers,
    operation name) is constrained to fp32 in an fp16 engine."""
    if layer_type in FP32_LAYER_TYPES:
        return True
    if layer_type == "UNARY":
        return operation in FP32_UNARY_OPS
    if layer_type == "ELEMENTWISE":
        return operation in FP32_ELEMENTWISE_OPS
    return False


@dataclass(frozen=True)
class Profile:
    min_batch: int = 1
    opt_batch: int = 8
    max_batch: int = 32

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.opt_batch <= self.max_batch:
            raise SwapcastError(f"TensorRT profile needs 1 <= min <= opt <= max (got {self})")

    def shapes(self, spec: TensorSpec) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """min / opt / max shapes of one input: the batch axis varies, the others must be fixed."""
        rest = spec.shape[1:]
        if any(not isinstance(d, int) or d <= 0 for d in rest):
            raise SwapcastError(
                f"TensorRT needs fixed non-batch dimensions; input {spec.name!r} has shape {spec.shape}"
            )
        return tuple((b, *rest) for b in (self.min_batch, self.opt_batch, self.max_batch))  # type: ignore[return-value]


def cache_key(model_bytes: bytes, *, trt_version: str, gpu_name: str, fp16: bool, profile: Profile, streams: int) -> str:
    """A file-name-safe key for an engine: changes with anything that invalidates it."""
    digest = hashlib.sha256()
    digest.update(model_bytes)
    digest.update(f"|{trt_version}|{gpu_name}|fp16={fp16}|{profile}|streams={streams}".encode())
    gpu = "".join(c if c.isalnum() else "-" for c in gpu_name).strip("-").lower()
    return f"trt{trt_version}-{gpu}-{digest.hexdigest()[:20]}"


def timing_cache_name(*, trt_version: str, gpu_name: str) -> str:
    gpu = "".join(c if c.isalnum() else "-" for c in gpu_name).strip("-").lower()
    return f"timing-trt{trt_version}-{gpu}.cache"


def import_tensorrt():
    try:
        import tensorrt
    except Exception as exc:  # ImportError, or a broken install's OSError
        raise TensorRTUnavailableError(
            "the TensorRT runner needs TensorRT 10+ ('import tensorrt' failed: "
            f"{type(exc).__name__}: {exc}); use runner: torch or onnxruntime, or auto"
        ) from exc
    major = int(str(tensorrt.__version__).split(".")[0])
    if major < 10:
        raise TensorRTUnavailableError(f"the TensorRT runner needs TensorRT 10+ (found {tensorrt.__version__})")
    return tensorrt


class _Slot:
    """One execution context, its CuPy stream and the event of its last batch."""

    def __init__(self, context: Any, stream: Any, index: int) -> None:
        self.context, self.stream, self.index = context, stream, index
        self.lock = threading.Lock()


class TensorRTRunner:
    """Runs an ONNX model as a TensorRT engine (see the module docstring; unexercised here)."""

    def __init__(
        self,
        model: onnx.ModelProto | str | Path,
        *,
        name: str | None = None,
        cache_dir: str | Path | None = None,
        fp16: bool = True,
        profile: Profile | None = None,
        streams: int = 2,
        workspace_gb: float = 4.0,
    ) -> None:
        trt = import_tensorrt()
        try:
            import cupy
        except ImportError as exc:
            raise TensorRTUnavailableError("the TensorRT runner needs CuPy for streams and device memory") from exc
        if cupy.cuda.runtime.getDeviceCount() == 0:
            raise TensorRTUnavailableError("the TensorRT runner needs a CUDA device")
        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model))
        self.name = name or (Path(model).name if isinstance(model, (str, Path)) else proto.graph.name)
        self.profile = profile or Profile()
        self.fp16 = fp16
        self.streams = max(2, streams)  # at least two batches in flight
        self.max_concurrency = self.streams  # the batcher may have this many calls in flight
        self._trt = trt
        self._logger = trt.Logger(trt.Logger.WARNING)
        payload = proto.SerializeToString()
        props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
        gpu_name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        key = cache_key(payload, trt_version=trt.__version__, gpu_name=gpu_name, fp16=fp16, profile=self.profile, streams=self.streams)
        cache = Path(cache_dir) if cache_dir else None
        engine_path = cache / f"{key}.engine" if cache else None
        timing_path = cache / timing_cache_name(trt_version=trt.__version__, gpu_name=gpu_name) if cache else None

        runtime = trt.Runtime(self._logger)
        engine = None
        if engine_path is not None and engine_path.exists():
            engine = runtime.deserialize_cuda_engine(engine_path.read_bytes())  # None when stale
        if engine is None:
            serialized = self._build(payload, proto, timing_path, workspace_gb)
            if engine_path is not None:
                engine_path.parent.mkdir(parents=True, exist_ok=True)
                tmp = engine_path.with_suffix(".tmp")
                tmp.write_bytes(serialized)
                tmp.replace(engine_path)
            engine = runtime.deserialize_cuda_engine(serialized)
        if engine is None:
            raise ModelFileError(self.name, "TensorRT could not deserialize the engine it built")
        self._engine = engine

        names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
        is_input = lambda n: engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT  # noqa: E731
        spec = lambda n: TensorSpec(n, tuple(engine.get_tensor_shape(n)), np.dtype(trt.nptype(engine.get_tensor_dtype(n))))  # noqa: E731
        self.inputs = tuple(spec(n) for n in names if is_input(n))
        self.outputs = tuple(spec(n) for n in names if not is_input(n))

        self._slots = []
        for index in range(self.streams):
            context = engine.create_execution_context()
            stream = cupy.cuda.Stream(non_blocking=True)
            context.set_optimization_profile_async(index, stream.ptr)
            self._slots.append(_Slot(context, stream, index))
        stream.synchronize()
        self._next = itertools.cycle(range(self.streams))
        self._next_lock = threading.Lock()

    def _build(self, payload: bytes, proto: onnx.ModelProto, timing_path: Path | None, workspace_gb: float) -> bytes:
        trt = self._trt
        builder = trt.Builder(self._logger)
        network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
        parser = trt.OnnxParser(network, self._logger)
        if not parser.parse(payload):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise ModelFileError(self.name, f"TensorRT cannot parse it ({errors})")
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gb * 2**30))
        if self.fp16:
            config.set_flag(trt.BuilderFlag.FP16)
            config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
            self.fp32_layers = _constrain_normalisation(trt, network)
        for _ in range(self.streams):  # one profile per execution context
            profile = builder.create_optimization_profile()
            for i in range(network.num_inputs):
                tensor = network.get_input(i)
                spec = TensorSpec(tensor.name, tuple(tensor.shape), np.dtype(np.float32))
                low, opt, high = self.profile.shapes(spec)
                profile.set_shape(tensor.name, low, opt, high)
            config.add_optimization_profile(profile)
        timing_bytes = timing_path.read_bytes() if timing_path is not None and timing_path.exists() else b""
        timing = config.create_timing_cache(timing_bytes)
        config.set_timing_cache(timing, ignore_mismatch=False)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise ModelFileError(self.name, "TensorRT failed to build an engine (see its log above)")
        if timing_path is not None:
            timing_path.parent.mkdir(parents=True, exist_ok=True)
            timing_path.write_bytes(memoryview(config.get_timing_cache().serialize()))
        return bytes(serialized)

    # -- the contract

    def run(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        return [out.get() for out in self.wait(self.submit(feeds))]

    def run_device(self, feeds: Mapping[str, Any]) -> list[Any]:
        return self.wait(self.submit(feeds))

    def submit(self, feeds: Mapping[str, Any]) -> tuple[_Slot, Any, list[Any]]:
        """Queue one batch on the next stream and return at once (``wait`` collects it);
        while it runs, the next ``submit`` uses another context and stream."""
        import cupy

        with self._next_lock:
            slot = self._slots[next(self._next)]
        slot.lock.acquire()  # released by wait(): a context runs one batch at a time
        # the feeds were made on the caller's stream; this non-blocking stream does not
        # wait for it by itself
        ready = cupy.cuda.get_current_stream().record()
        try:
            with slot.stream:
                slot.stream.wait_event(ready)
                bound = []
                count = None
                for spec in self.inputs:
                    array = cupy.ascontiguousarray(cupy.asarray(feeds[spec.name], dtype=spec.dtype))
                    count = array.shape[0] if count is None else count
                    if not 1 <= array.shape[0] <= self.profile.max_batch:
                        raise SwapcastError(f"{self.name}: batch {array.shape[0]} is outside the profile (1..{self.profile.max_batch})")
                    slot.context.set_input_shape(spec.name, tuple(array.shape))
                    slot.context.set_tensor_address(spec.name, array.data.ptr)
                    bound.append(array)  # kept alive until the batch is done
                outputs = []
                for spec in self.outputs:
                    shape = tuple(slot.context.get_tensor_shape(spec.name))
                    out = cupy.empty(shape, dtype=spec.dtype)
                    slot.context.set_tensor_address(spec.name, out.data.ptr)
                    outputs.append(out)
                if not slot.context.execute_async_v3(slot.stream.ptr):
                    raise SwapcastError(f"{self.name}: TensorRT execution failed")
                done = slot.stream.record()
        except BaseException:
            slot.lock.release()
            raise
        return slot, (done, bound), outputs

    def wait(self, handle: tuple[_Slot, Any, list[Any]]) -> list[Any]:
        slot, (done, _bound), outputs = handle
        try:
            done.synchronize()
        finally:
            slot.lock.release()
        return outputs


def _constrain_normalisation(trt, network) -> list[str]:
    """Pin the normalisation layers of ``network`` to fp32; returns their names."""
    kept = []
    casts = {
        "UNARY": trt.IUnaryLayer,
        "ELEMENTWISE": trt.IElementWiseLayer,
    }
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        kind = layer.type.name
        operation = None
        if kind in casts:
            layer.__class__ = casts[kind]  # the Python binding's way to reach .op
            operation = layer.op.name
        if keeps_fp32(kind, operation):
            layer.precision = trt.float32
            for j in range(layer.num_outputs):
                layer.set_output_type(j, trt.float32)
            kept.append(layer.name)
    return kept


def tensorrt_version() -> str | None:
    """TensorRT's version where it imports, else None (never raises)."""
    try:
        import tensorrt

        return str(tensorrt.__version__)
    except Exception:
        return None


__all__ = [
    "Profile",
    "TensorRTRunner",
    "TensorRTUnavailableError",
    "cache_key",
    "keeps_fp32",
    "tensorrt_version",
    "timing_cache_name",
]
