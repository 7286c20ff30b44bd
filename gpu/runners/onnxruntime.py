"""ONNX Runtime runner (CPU execution provider everywhere; CUDA when onnxruntime-gpu is there)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from gpu.errors import ModelFileError
from gpu.runners.base import TensorSpec

_ORT_TYPES = {
    "tensor(float)": np.dtype(np.float32),
    "tensor(float16)": np.dtype(np.float16),
    "tensor(int64)": np.dtype(np.int64),
    "tensor(int32)": np.dtype(np.int32),
    "tensor(uint8)": np.dtype(np.uint8),
}


def default_providers() -> list[str]:
    """CUDA first when this onnxruntime build has it, CPU always as the fallback."""
    available = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in available]


class OnnxRuntimeRunner:
    """Runs an ONNX model (a file or an in-memory ``ModelProto``) through ONNX Runtime."""

    def __init__(
        self,
        model: str | Path | onnx.ModelProto,
        *,
        name: str | None = None,
        providers: Sequence[str] | None = None,
        threads: int | None = None,
    ) -> None:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        payload = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
        self.name = name or (Path(model).name if not isinstance(model, onnx.ModelProto) else model.graph.name)
        try:
            self._session = ort.InferenceSession(
                payload, sess_options=options, providers=list(providers or default_providers())
            )
        except Exception as exc:  # onnxruntime raises its own untyped errors for bad files
            raise ModelFileError(self.name, f"ONNX Runtime cannot load it ({exc})") from exc
        self.inputs = tuple(_spec(i) for i in self._session.get_inputs())
        self.outputs = tuple(_spec(o) for o in self._session.get_outputs())
        self.providers = tuple(self._session.get_providers())

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        typed = {spec.name: np.ascontiguousarray(feeds[spec.name], dtype=spec.dtype) for spec in self.inputs}
        return list(self._session.run(None, typed))


def _spec(arg: ort.NodeArg) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else (d or None) for d in arg.shape)
    return TensorSpec(arg.name, shape, _ORT_TYPES.get(arg.type, np.dtype(np.float32)))
