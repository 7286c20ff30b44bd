"""ONNX Runtime runner (CPU execution provider everywhere; CUDA when onnxruntime-gpu is there).

``run`` is host NumPy in and out; ``run_device`` goes through an IO binding so that, with the
CUDA execution provider, CuPy feeds are read and results written in device memory (zero
copy, like the torch runner's ``run_device``). CuPy is imported inside the CUDA branch only.
Thread pools are sized by the node's thread budget (``gpu.threads``): by default one
intra-op thread per session and no spin-waiting, because a node's sessions already keep
its cores busy and an idle pool that spins takes them from the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from gpu import threads as thread_budget
from gpu.device import is_device_array, to_host
from gpu.errors import ModelFileError, SwapcastError
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
        """``threads``: intra-op threads of this session; by default the thread budget's."""
        options = session_options(threads)
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

    def run_device(self, feeds: Mapping[str, Any]) -> list[Any]:
        """Device in, device out, through an IO binding; the results equal ``run``'s.

        With ``CUDAExecutionProvider`` and CuPy feeds: each feed is made contiguous and of its
        input's dtype on the device and bound by pointer; outputs whose shape the model fixes
        (the feeds' batch plus static dims) are CuPy arrays ORT writes into, the others ORT
        allocates on the device and they come back as CuPy views of its buffers (no copy; the
        view holds the ``OrtValue``). Returns CuPy arrays. Streams: ORT's CUDA EP computes on
        its own stream, which does not wait for CuPy's, so CuPy's current stream (where the
        feeds were made, converted and the outputs allocated) is synchronised before the run;
        that is narrower than ``io_binding.synchronize_inputs()``, a ``cudaDeviceSynchronize``
        that would also wait for other sessions' work. ``run_with_iobinding`` returns after
        ORT synchronised its own stream (``disable_synchronize_execution_providers`` is left
        at its default, 0), so the outputs are complete when this returns.
        This branch is untested: onnxruntime-gpu (255 MB) is installed on none of our
        machines, CI's nor the GPU check's (ARCHITECTURE.md "The GPU check").

        Otherwise (a CPU session, or NumPy feeds): the same binding with host arrays
        (``bind_cpu_input``, ``bind_output``, ``copy_outputs_to_cpu``); CuPy feeds are copied
        to the host first, so a CUDA node whose ONNX Runtime is the CPU build still runs.
        Returns NumPy arrays.

        Batch 0 returns empty outputs: ``(0, *static dims)`` without running the model when
        every output's shape is fixed, else what ORT computes for the empty batch."""
        missing = [spec.name for spec in self.inputs if spec.name not in feeds]
        if missing:
            raise SwapcastError(f"{self.name}: missing input(s) {', '.join(map(repr, missing))}")
        counts = {np.shape(feeds[spec.name])[0] for spec in self.inputs if np.ndim(feeds[spec.name])}
        if len(counts) > 1:
            raise SwapcastError(f"{self.name}: inputs disagree on the batch size ({sorted(counts)})")
        batch = counts.pop() if counts else 1
        shapes = [output_shape(spec, batch, self.inputs[0].shape[:1]) for spec in self.outputs]
        skip = batch == 0 and all(shape is not None for shape in shapes)
        if "CUDAExecutionProvider" in self.providers and any(is_device_array(feeds[spec.name]) for spec in self.inputs):
            return self._run_cuda(feeds, shapes, skip)
        if skip:
            return [np.empty(shape, spec.dtype) for shape, spec in zip(shapes, self.outputs, strict=True)]
        binding = self._session.io_binding()
        for spec in self.inputs:
            binding.bind_cpu_input(spec.name, np.ascontiguousarray(to_host(feeds[spec.name]), dtype=spec.dtype))
        for spec in self.outputs:
            binding.bind_output(spec.name)
        self._session.run_with_iobinding(binding)
        return list(binding.copy_outputs_to_cpu())

    def _run_cuda(self, feeds: Mapping[str, Any], shapes: list[tuple[int, ...] | None], skip: bool) -> list[Any]:
        """``run_device`` on the CUDA EP; ``skip``: an empty batch of fixed-shape outputs."""
        import cupy

        arrays = [cupy.ascontiguousarray(cupy.asarray(feeds[spec.name], dtype=spec.dtype)) for spec in self.inputs]
        device_id = arrays[0].device.id
        with cupy.cuda.Device(device_id):
            outputs = [
                None if shape is None else cupy.empty(shape, spec.dtype)
                for shape, spec in zip(shapes, self.outputs, strict=True)
            ]
            if skip:
                return outputs
            binding = self._session.io_binding()
            for spec, array in zip(self.inputs, arrays, strict=True):
                binding.bind_input(spec.name, "cuda", array.device.id, spec.dtype, tuple(array.shape), array.data.ptr)
            for spec, out in zip(self.outputs, outputs, strict=True):
                if out is None:
                    binding.bind_output(spec.name, "cuda", device_id)
                else:
                    binding.bind_output(spec.name, "cuda", device_id, spec.dtype, tuple(out.shape), out.data.ptr)
            cupy.cuda.get_current_stream().synchronize()
            self._session.run_with_iobinding(binding)
            values = binding.get_outputs()
            return [
                out if out is not None else _cupy_view(value, device_id)
                for out, value in zip(outputs, values, strict=True)
            ]


def session_options(threads: int | None = None) -> ort.SessionOptions:
    """Session options under the node's thread budget (``gpu.threads.current()``):
    ``threads`` intra-op threads (default: the budget's), one inter-op thread, and both
    pools spin-waiting only where the budget allows it."""
    budget = thread_budget.current()
    spin = "1" if budget.runner_spinning else "0"
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads or budget.runner_threads or min(4, thread_budget.usable_cpus())
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    return options


def output_shape(spec: TensorSpec, batch: int, batch_dim: tuple[int | str | None, ...]) -> tuple[int, ...] | None:
    """The shape of output ``spec`` for ``batch`` rows when the model fixes it: its first axis
    is the inputs' batch axis (``batch_dim``, the first input's symbolic first dim) or a fixed
    size, the others static. ``None``: it depends on the data, ORT must allocate it."""
    if not spec.shape or not all(isinstance(d, int) for d in spec.shape[1:]):
        return None
    first = spec.shape[0]
    rest = tuple(d for d in spec.shape[1:] if isinstance(d, int))  # all of them (checked above)
    if isinstance(first, int):
        return (first, *rest)
    if first is not None and batch_dim == (first,):
        return (batch, *rest)
    return None


def _cupy_view(value: ort.OrtValue, device_id: int) -> Any:
    """A CuPy array over an ORT-allocated device tensor, without a copy; the ``OrtValue`` is
    the memory's owner, so its buffer lives as long as the array (and its views). Once freed,
    ORT reuses it only in a later run, which first synchronises CuPy's current stream."""
    import cupy

    dtype = _ORT_TYPES.get(value.data_type())
    if dtype is None:
        raise SwapcastError(f"ONNX Runtime returned a {value.data_type()} output, which has no CuPy dtype here")
    shape = tuple(value.shape())
    if value.tensor_size_in_bytes() == 0:
        return cupy.empty(shape, dtype)
    memory = cupy.cuda.UnownedMemory(value.data_ptr(), value.tensor_size_in_bytes(), value, device_id)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(memory, 0))


def _spec(arg: ort.NodeArg) -> TensorSpec:
    shape = tuple(d if isinstance(d, int) else (d or None) for d in arg.shape)
    return TensorSpec(arg.name, shape, _ORT_TYPES.get(arg.type, np.dtype(np.float32)))
