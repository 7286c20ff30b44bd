"""What every user-supplied processor model shares: load, check, batch, run.

A processor file (occluder, parser, enhancer, content gate) is loaded like the swap model:
parsed, its signature checked against what its adapter feeds (a mismatch is a
``ModelFileError`` naming the file and the mismatch), its batch dimension made dynamic
(FaceFusion's exports fix it at 1) and handed to the node's runner. Rows go through a
micro-batcher of its own, so faces of every session share runner calls like the swap rows.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from gpu.batcher import MicroBatcher
from gpu.errors import ModelFileError
from gpu.models.signatures import (
    ExpectedDim,
    check_count,
    check_tensor,
    find,
    format_shape,
    graph_inputs,
    graph_outputs,
    load_onnx,
    open_runner,
)
from gpu.runners.base import Runner
from gpu.swappers.base import FaceJob
from gpu.swappers.inswapper import make_batch_dynamic

MakeRunner = Callable[[onnx.ModelProto, str], Runner]


@dataclass(frozen=True)
class TensorRule:
    """One expected input or output: its name (None: any), shape (``"N"`` = batch) and types."""

    name: str | None
    shape: Sequence[ExpectedDim]
    dtypes: Sequence[np.dtype] = (np.dtype(np.float32),)


def check_signature(path: Path, model: onnx.ModelProto, inputs: Sequence[TensorRule],
                    outputs: Sequence[TensorRule], *, extra_outputs: bool = False) -> None:
    """Inputs must be exactly ``inputs``; outputs start with ``outputs`` (more are allowed
    with ``extra_outputs``: some exports keep auxiliary heads the adapter never reads)."""
    have_in, have_out = graph_inputs(model), graph_outputs(model)
    check_count(path, "input", have_in, len(inputs))
    for index, rule in enumerate(inputs):
        spec = have_in[index] if rule.name is None else find(path, "input", have_in, rule.name)
        check_tensor(path, "input", spec, rule.shape, rule.dtypes)
    if not (extra_outputs and len(have_out) >= len(outputs)):
        check_count(path, "output", have_out, len(outputs))
    for spec, rule in zip(have_out, outputs, strict=False):
        check_tensor(path, "output", spec, rule.shape, rule.dtypes)


def bake_input(path: Path, model: onnx.ModelProto, name: str, value: np.ndarray) -> None:
    """Turn graph input ``name`` into a constant (CodeFormer's fidelity ``weight``: one value
    per node, so rows of any session can share a call)."""
    graph = model.graph
    spec = next((v for v in graph.input if v.name == name), None)
    if spec is None:
        raise ModelFileError(path, f"has no input '{name}'")
    dims = [d.dim_value for d in spec.type.tensor_type.shape.dim]
    array = np.asarray(value, dtype=onnx.helper.tensor_dtype_to_np_dtype(spec.type.tensor_type.elem_type))
    if any(dims) and array.size != int(np.prod([d or 1 for d in dims])):
        raise ModelFileError(path, f"input '{name}' has shape {format_shape(dims)}, expected one value")
    graph.input.remove(spec)
    graph.initializer.append(onnx.numpy_helper.from_array(array.reshape([d or 1 for d in dims]), name))


class BatchedModel:
    """A checked processor model behind the runner contract and a micro-batcher of its own."""

    def __init__(self, path: Path, model: onnx.ModelProto, make_runner: MakeRunner | None = None, *,
                 max_batch: int = 32, max_queue_delay_ms: float = 4.0) -> None:
        self.path = path
        self.name = path.stem
        make_batch_dynamic(model, path)
        self.runner: Runner = make_runner(model, self.name) if make_runner else open_runner(path, model)
        self._batch_params = (max_batch, max_queue_delay_ms)
        self._batcher: MicroBatcher | None = None
        self._lock = threading.Lock()

    @property
    def batcher(self) -> MicroBatcher:
        with self._lock:
            if self._batcher is None or self._batcher.closed:
                max_batch, delay = self._batch_params
                self._batcher = MicroBatcher(self.runner, max_batch=max_batch, max_queue_delay_ms=delay,
                                             max_in_flight=int(getattr(self.runner, "max_concurrency", 1)),
                                             name=f"batcher-{self.name}")
            return self._batcher

    def run(self, session_id: Hashable, feeds: Sequence[dict[str, Any]], timeout: float | None = 10.0) -> list[np.ndarray]:
        """Each feed (one row per input) through the batcher; the first output's row of each.
        The caller counts as attached while it waits, so a lone stream takes the batcher's
        solo path (no queue delay) and concurrent ones share batches."""
        jobs = [FaceJob(feeds=feed, matrix=np.eye(2, 3, dtype=np.float32)) for feed in feeds]
        batcher = self.batcher
        batcher.attach(session_id)
        try:
            rows = batcher.run(session_id, jobs, timeout=timeout)
        finally:
            batcher.detach(session_id)
        return [np.asarray(row[0]) for row in rows]

    def submit(self, session_id: Hashable, feed: dict[str, Any]):
        """One row, not waited for: a ``Future`` whose result is its outputs' rows."""
        return self.batcher.submit(session_id, [FaceJob(feeds=feed, matrix=np.eye(2, 3, dtype=np.float32))])

    def metrics(self) -> dict[str, Any] | None:
        with self._lock:
            batcher = self._batcher
        return batcher.metrics() if batcher is not None and not batcher.closed else None

    def close(self) -> None:
        with self._lock:
            batcher, self._batcher = self._batcher, None
        if batcher is not None:
            batcher.close()


def load_checked(path: Path, inputs: Sequence[TensorRule], outputs: Sequence[TensorRule], *,
                 extra_outputs: bool = False) -> onnx.ModelProto:
    model = load_onnx(path)
    check_signature(path, model, inputs, outputs, extra_outputs=extra_outputs)
    return model

