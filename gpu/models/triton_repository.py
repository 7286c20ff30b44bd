"""A Triton model repository for the node's models (``swapcast models export --triton DIR``).

Each model becomes ``DIR/<name>/1/model.onnx`` with a ``config.pbtxt`` for Triton's ONNX
Runtime backend: ``max_batch_size`` and the dynamic batcher's preferred sizes and queue
delay from swapcast's own batcher settings, one instance per GPU (``KIND_GPU``; Triton
falls back to ``KIND_CPU`` when told so with ``--kind cpu``). Beside it,
``DIR/<name>_trt/config.pbtxt`` describes the TensorRT plan variant (FP16) and
``DIR/<name>_trt/BUILD.txt`` the ``trtexec`` command that builds its ``model.plan`` on the
GPU node itself (a plan is tied to the GPU and TensorRT version, so it cannot be built here).
The model names are the ones the node asks Triton for (the runner's ``name``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import onnx

from gpu.runners.triton import DATATYPES, onnx_signature

KINDS = ("gpu", "cpu")


@dataclass(frozen=True)
class BatchingPlan:
    max_batch: int = 32
    max_queue_delay_ms: float = 4.0
    instances: int = 1
    kind: str = "gpu"  # instance_group kind: gpu or cpu

    def preferred_sizes(self) -> list[int]:
        """Powers of two from 4 up to ``max_batch``, and ``max_batch`` itself."""
        sizes = [size for size in (4, 8, 16, 32, 64, 128, 256) if size < self.max_batch]
        return sizes + [self.max_batch]


def _dims(shape: tuple[int | str | None, ...]) -> str:
    return ", ".join(str(d) if isinstance(d, int) else "-1" for d in shape[1:])


def _tensors(kind: str, specs) -> str:
    blocks = [f'  {{\n    name: "{s.name}"\n    data_type: TYPE_{DATATYPES[s.dtype]}\n    dims: [ {_dims(s.shape)} ]\n  }}'
              for s in specs]
    return f"{kind} [\n" + ",\n".join(blocks) + "\n]\n"


def model_config(model: onnx.ModelProto, name: str, plan: BatchingPlan, platform: str = "onnxruntime_onnx") -> str:
    """``config.pbtxt`` text for ``model`` served as ``name``."""
    if plan.kind not in KINDS:
        raise ValueError(f"instance kind must be one of {', '.join(KINDS)} (got {plan.kind!r})")
    inputs, outputs = onnx_signature(model)
    preferred = ", ".join(str(s) for s in plan.preferred_sizes())
    return (
        f'name: "{name}"\nplatform: "{platform}"\nmax_batch_size: {plan.max_batch}\n'
        + _tensors("input", inputs) + _tensors("output", outputs)
        + f"dynamic_batching {{\n  preferred_batch_size: [ {preferred} ]\n"
        f"  max_queue_delay_microseconds: {round(plan.max_queue_delay_ms * 1000)}\n}}\n"
        f"instance_group [\n  {{\n    count: {plan.instances}\n    kind: KIND_{plan.kind.upper()}\n  }}\n]\n"
    )


def tensorrt_build_note(model: onnx.ModelProto, name: str, plan: BatchingPlan, crop_size: int) -> str:
    """The ``trtexec`` command that builds the FP16 plan on the GPU node (symbolic spatial
    dims take ``crop_size``)."""
    inputs, _ = onnx_signature(model)

    def shapes(batch: int) -> str:
        return ",".join(f"{s.name}:{batch}x" + "x".join(str(d) if isinstance(d, int) else str(crop_size) for d in s.shape[1:])
                        for s in inputs)

    opt = max(1, min(8, plan.max_batch))
    return (
        f"# Build {name}_trt/1/model.plan on the GPU node (TensorRT 10+), from the ONNX model beside it:\n"
        f"trtexec --onnx=../{name}/1/model.onnx --saveEngine=1/model.plan --fp16 \\\n"
        f"  --minShapes={shapes(1)} --optShapes={shapes(opt)} --maxShapes={shapes(plan.max_batch)}\n"
        "# Symbolic dims were given the crop size; set the others to what the node sends\n"
        "#   (mesh3d: shading is half the crop, albedo the source texture size).\n"
        "# inswapper: plain FP16 garbles it (its normalisation layers overflow); keep them FP32 with\n"
        "#   --precisionConstraints=obey --layerPrecisions=<normalisation layers>:fp32\n"
        f"# then point the nodes at model '{name}_trt' (engine.triton_model) or rename the folder.\n"
    )


def write_model(directory: Path, model: onnx.ModelProto, name: str, plan: BatchingPlan, crop_size: int = 256) -> Path:
    """``directory/name`` (ONNX Runtime backend) and ``directory/name_trt`` (TensorRT plan variant)."""
    folder = directory / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(folder / "1" / "model.onnx"))
    (folder / "config.pbtxt").write_text(model_config(model, name, plan))
    trt = directory / f"{name}_trt"
    (trt / "1").mkdir(parents=True, exist_ok=True)
    (trt / "config.pbtxt").write_text(model_config(model, f"{name}_trt", plan, platform="tensorrt_plan"))
    (trt / "BUILD.txt").write_text(tensorrt_build_note(model, name, plan, crop_size))
    return folder


def write_repository(directory: Path, models: Iterable[tuple[str, onnx.ModelProto]], plan: BatchingPlan,
                     crop_size: int = 256) -> list[Path]:
    """Every ``(name, model)`` into ``directory``; returns the ONNX model folders."""
    directory.mkdir(parents=True, exist_ok=True)
    return [write_model(directory, model, name, plan, crop_size) for name, model in models]


def swap_model(swapper: str, models_dir: Path | None, prefer_fp16: bool = False) -> tuple[str, onnx.ModelProto]:
    """The swap model a node with these engine settings runs, under the name it asks Triton
    for: the user's inswapper (batch made dynamic, as the node does) or a built-in graph."""
    from gpu.errors import ModelFileError

    user = None
    if models_dir is not None:
        from gpu.models.user_models import UserModels

        user = UserModels.discover(models_dir, prefer_fp16=prefer_fp16).swapper
    if swapper == "inswapper" or (swapper == "auto" and user is not None):
        if user is None:
            raise ModelFileError(models_dir or "(no models directory)", "swapper 'inswapper' needs inswapper_128.onnx")
        from gpu.models.signatures import load_onnx
        from gpu.swappers.inswapper import make_batch_dynamic

        model = load_onnx(user)
        make_batch_dynamic(model, user)
        return user.stem, model
    if swapper == "mesh":
        from gpu.swappers.mesh_graph import build_mesh_swap_graph

        return "mesh_swap", build_mesh_swap_graph()
    from gpu.swappers.mesh3d_graph import build_mesh3d_swap_graph

    return "mesh3d_swap", build_mesh3d_swap_graph()
