"""Signature checks for user-supplied ONNX files.

Users bring model files from other tools; a wrong file (another resolution, a detector in the
swapper slot, a truncated download) must fail at load time with a message that names the file
and the exact mismatch, not deep inside ONNX Runtime on the first frame.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper

from gpu.errors import ModelFileError
from gpu.runners.base import TensorSpec
from gpu.runners.onnxruntime import OnnxRuntimeRunner

# An expected dimension: an int must match exactly; a str accepts any size and names the
# dimension in messages ("N" for the batch).
ExpectedDim = int | str

FLOAT32 = (np.dtype(np.float32),)
FLOAT32_OR_16 = (np.dtype(np.float32), np.dtype(np.float16))


def load_onnx(path: str | Path) -> onnx.ModelProto:
    """Parse ``path`` as an ONNX model, turning every way that can fail into ModelFileError."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(path, "file not found")
    try:
        model = onnx.load(str(path))
    except (DecodeError, OSError, ValueError, RuntimeError) as exc:
        raise ModelFileError(path, f"not an ONNX model ({exc.__class__.__name__}: {exc})") from exc
    if not model.graph.node:
        raise ModelFileError(path, "not an ONNX model (it has no graph)")
    return model


def open_runner(path: str | Path, model: onnx.ModelProto) -> OnnxRuntimeRunner:
    """An ONNX Runtime runner for ``model``; a refusal names ``path``, not the graph's name."""
    try:
        return OnnxRuntimeRunner(model, name=Path(path).name)
    except ModelFileError as exc:
        raise ModelFileError(path, exc.problem) from exc


def graph_inputs(model: onnx.ModelProto) -> tuple[TensorSpec, ...]:
    """The graph's real inputs (old exporters also list initializers as inputs)."""
    constants = {init.name for init in model.graph.initializer}
    return tuple(_spec(value) for value in model.graph.input if value.name not in constants)


def graph_outputs(model: onnx.ModelProto) -> tuple[TensorSpec, ...]:
    return tuple(_spec(value) for value in model.graph.output)


def check_count(path: str | Path, kind: str, specs: Sequence[TensorSpec], expected: int) -> None:
    """``kind`` is "input" or "output"."""
    if len(specs) != expected:
        names = ", ".join(f"'{s.name}'" for s in specs) or "none"
        raise ModelFileError(path, f"has {len(specs)} {kind}s ({names}), expected {expected}")


def find(path: str | Path, kind: str, specs: Sequence[TensorSpec], name: str) -> TensorSpec:
    """The ``kind`` called ``name``, for models whose tensors are fed by name."""
    for spec in specs:
        if spec.name == name:
            return spec
    names = ", ".join(f"'{s.name}'" for s in specs) or "none"
    raise ModelFileError(path, f"has no {kind} '{name}' ({kind}s: {names})")


def check_tensor(
    path: str | Path,
    kind: str,
    spec: TensorSpec,
    shape: Sequence[ExpectedDim],
    dtypes: Sequence[np.dtype] = FLOAT32,
) -> None:
    """Check rank, fixed dimensions and element type. A dimension the file leaves symbolic
    passes (ONNX Runtime checks it when it runs)."""
    fits = len(spec.shape) == len(shape) and all(
        not isinstance(want, int) or not isinstance(have, int) or have == want
        for have, want in zip(spec.shape, shape, strict=True)
    )
    if not fits:
        raise ModelFileError(
            path, f"{kind} '{spec.name}' has shape {format_shape(spec.shape)}, expected {format_shape(shape)}"
        )
    if spec.dtype not in dtypes:
        wanted = " or ".join(str(d) for d in dtypes)
        raise ModelFileError(path, f"{kind} '{spec.name}' has type {spec.dtype}, expected {wanted}")


def format_shape(shape: Sequence[int | str | None]) -> str:
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _spec(value: onnx.ValueInfoProto) -> TensorSpec:
    tensor = value.type.tensor_type
    shape = tuple(
        d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim
    )
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    except (KeyError, TypeError, ValueError):
        dtype = np.dtype(np.void)  # not a plain tensor type: fails every dtype check
    return TensorSpec(value.name, shape, dtype)
