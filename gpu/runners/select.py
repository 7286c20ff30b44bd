"""Which runner executes a model on this node, and building it.

``auto`` on CUDA: TensorRT (where it imports) -> PyTorch on CUDA -> ONNX Runtime (CUDA
execution provider with onnxruntime-gpu, else its CPU provider); ``auto`` on CPU: ONNX
Runtime's CPU provider. An explicit ``runner`` is honoured or refused with the reason --
never silently replaced. ``triton`` runs the model in a Triton Inference Server
(``gpu.runners.triton``; ``triton`` settings say where), whatever this node's device.

    runner = make_runner(model, device=settings.device, runner=settings.runner,
                         name="inswapper_128", cache_dir=settings.engine_cache_dir)
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx

from gpu.device import DeviceInfo, resolve_device
from gpu.errors import SwapcastError
from gpu.runners.base import Runner
from gpu.runners.triton import TritonSettings

RUNNERS = ("auto", "onnxruntime", "torch", "tensorrt", "triton")


class RunnerUnavailableError(SwapcastError):
    """The runner asked for cannot run on this node (the message says why)."""


@dataclass(frozen=True)
class RunnerChoice:
    runner: str  # "tensorrt", "torch", "onnxruntime" or "triton"
    device: str  # "cuda" or "cpu"
    reason: str
    providers: tuple[str, ...] = ()  # ONNX Runtime execution providers, when runner = onnxruntime


def tensorrt_importable() -> tuple[bool, str]:
    if importlib.util.find_spec("tensorrt") is None:
        return False, "TensorRT is not installed"
    from gpu.runners.tensorrt import tensorrt_version

    version = tensorrt_version()
    if version is None:
        return False, "TensorRT is installed but does not import"
    if int(version.split(".")[0]) < 10:
        return False, f"TensorRT {version} is older than 10"
    return True, f"TensorRT {version}"


def torch_cuda_usable() -> tuple[bool, str]:
    if importlib.util.find_spec("torch") is None:
        return False, "PyTorch is not installed"
    import torch

    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build, no device visible"
        return False, f"PyTorch {torch.__version__} cannot use CUDA ({build})"
    return True, f"PyTorch {torch.__version__} on CUDA {torch.version.cuda}"


def onnxruntime_cuda() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def choose_runner(device: DeviceInfo | str = "auto", runner: str = "auto") -> RunnerChoice:
    """Decide without building anything (``swapcast doctor`` prints this)."""
    if runner not in RUNNERS:
        raise SwapcastError(f"runner must be one of {', '.join(RUNNERS)} (got {runner!r})")
    info = device if isinstance(device, DeviceInfo) else resolve_device(device)  # type: ignore[arg-type]
    kind = info.kind
    if runner == "triton":
        return RunnerChoice("triton", kind, "asked for; the model runs in a Triton Inference Server")
    if runner == "tensorrt":
        ok, why = tensorrt_importable()
        if not ok:
            raise RunnerUnavailableError(f"runner 'tensorrt' was asked for, but {why}; use runner: torch, onnxruntime or auto")
        if kind != "cuda":
            raise RunnerUnavailableError(f"runner 'tensorrt' needs device cuda; the device is {kind} ({info.reason})")
        return RunnerChoice("tensorrt", "cuda", f"asked for; {why}")
    if runner == "torch":
        if importlib.util.find_spec("torch") is None:
            raise RunnerUnavailableError("runner 'torch' was asked for, but PyTorch is not installed: pip install 'swapcast[gpu]'")
        if kind == "cuda":
            ok, why = torch_cuda_usable()
            if not ok:
                raise RunnerUnavailableError(f"runner 'torch' on device cuda: {why}")
            return RunnerChoice("torch", "cuda", f"asked for; {why}, fp16 + CUDA graphs")
        return RunnerChoice("torch", "cpu", "asked for; PyTorch on the CPU, fp32")
    if runner == "onnxruntime":
        if kind == "cuda":
            if not onnxruntime_cuda():
                raise RunnerUnavailableError(
                    "runner 'onnxruntime' on device cuda needs onnxruntime-gpu (this onnxruntime has only the CPU provider); "
                    "use runner: torch or auto, or device: cpu"
                )
            return RunnerChoice("onnxruntime", "cuda", "asked for; CUDA execution provider", ("CUDAExecutionProvider", "CPUExecutionProvider"))
        return RunnerChoice("onnxruntime", "cpu", "asked for; CPU execution provider", ("CPUExecutionProvider",))
    # auto
    if kind == "cpu":
        return RunnerChoice("onnxruntime", "cpu", f"auto on CPU ({info.reason.removeprefix('auto: ')}): ONNX Runtime, CPU provider", ("CPUExecutionProvider",))
    ok, trt_why = tensorrt_importable()
    if ok:
        return RunnerChoice("tensorrt", "cuda", f"auto on CUDA: {trt_why}")
    ok, torch_why = torch_cuda_usable()
    if ok:
        return RunnerChoice("torch", "cuda", f"auto on CUDA: {trt_why}; {torch_why}, fp16 + CUDA graphs")
    if onnxruntime_cuda():
        return RunnerChoice(
            "onnxruntime", "cuda", f"auto on CUDA: {trt_why}; {torch_why}; ONNX Runtime CUDA provider",
            ("CUDAExecutionProvider", "CPUExecutionProvider"),
        )
    return RunnerChoice(
        "onnxruntime", "cpu",
        f"auto on CUDA, but {trt_why}, {torch_why} and onnxruntime has no CUDA provider: the model runs on the CPU",
        ("CPUExecutionProvider",),
    )


def has_dynamic_non_batch_dims(model: onnx.ModelProto | str | Path) -> bool:
    proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
    initialisers = {t.name for t in proto.graph.initializer}
    for value in proto.graph.input:
        if value.name in initialisers:
            continue
        dims = value.type.tensor_type.shape.dim[1:]
        if any(not d.HasField("dim_value") for d in dims):
            return True
    return False


def make_runner(
    model: onnx.ModelProto | str | Path,
    *,
    device: DeviceInfo | str = "auto",
    runner: str = "auto",
    name: str | None = None,
    cache_dir: str | Path | None = None,
    max_batch: int = 32,
    opt_batch: int = 8,
    threads: int | None = None,
    triton: TritonSettings | None = None,
) -> Runner:
    """Build the runner ``choose_runner`` picks. The result keeps the runner contract and
    carries ``choice`` (a ``RunnerChoice``: what was chosen and why)."""
    choice = choose_runner(device, runner)
    if choice.runner == "tensorrt" and runner == "auto" and has_dynamic_non_batch_dims(model):
        # a TensorRT profile varies only the batch: the mesh graph (symbolic crop sizes) goes to torch
        ok, why = torch_cuda_usable()
        if ok:
            choice = RunnerChoice("torch", "cuda", f"auto on CUDA: the model has symbolic non-batch dimensions, which TensorRT profiles here do not cover; {why}")
    built: Any
    if choice.runner == "triton":
        from gpu.runners.triton import TritonRunner

        proto = model if isinstance(model, onnx.ModelProto) else onnx.load(str(model), load_external_data=False)
        built = TritonRunner(proto, name=name or proto.graph.name, settings=triton or TritonSettings())
    elif choice.runner == "tensorrt":
        from gpu.runners.tensorrt import Profile, TensorRTRunner

        profile = Profile(1, max(1, min(opt_batch, max_batch)), max_batch)
        built = TensorRTRunner(model, name=name, cache_dir=cache_dir, profile=profile)
    elif choice.runner == "torch":
        from gpu.runners.torch_cuda import BUCKETS, TorchRunner
        from gpu.threads import size_torch_pool

        size_torch_pool()  # its CPU pool (host-side ops on CUDA too) within the node's budget
        buckets = tuple(b for b in BUCKETS if b < max_batch) + (max_batch,)
        built = TorchRunner(model, name=name, device=choice.device, buckets=buckets)
    else:
        from gpu.runners.onnxruntime import OnnxRuntimeRunner

        built = OnnxRuntimeRunner(model, name=name, providers=choice.providers, threads=threads)
    built.choice = choice
    return built
