"""Which array backend this node computes with: CuPy on a CUDA GPU, NumPy on the CPU.

One array API for the whole compute plane: ``xp()`` is the array module of the selected
device (``cupy`` on CUDA, ``numpy`` on CPU); ``to_device`` / ``to_host`` move arrays
between them. CuPy is imported lazily, inside functions, so ``gpu/`` imports with NumPy
alone.

    from gpu.device import select_device, xp, to_device, to_host
    select_device("auto")          # once, at start-up (the engine does this)
    frame = to_device(numpy_frame)  # cupy.ndarray on CUDA, the same numpy array on CPU
    out = xp().clip(frame, 0, 255)
    host = to_host(out)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

import numpy as np

from gpu.errors import SwapcastError

DevicePreference = Literal["auto", "cpu", "cuda"]


@dataclass(frozen=True)
class DeviceInfo:
    backend: str  # "cupy" or "numpy"
    name: str
    memory_gb: float | None
    reason: str  # why this backend was chosen

    @property
    def is_cuda(self) -> bool:
        return self.backend == "cupy"

    @property
    def kind(self) -> str:
        """``"cuda"`` or ``"cpu"``: the name the settings and runners use."""
        return "cuda" if self.is_cuda else "cpu"


class DeviceUnavailableError(SwapcastError):
    """``device: cuda`` was asked for on a node where CUDA cannot be used."""


def detect_device() -> DeviceInfo:
    """CuPy when it imports and sees a CUDA device; otherwise NumPy, with the reason."""
    try:
        import cupy
    except ImportError:
        return DeviceInfo("numpy", "CPU", None, "CuPy is not installed")
    except Exception as exc:  # a broken CuPy install (wrong CUDA libraries) raises others
        return DeviceInfo("numpy", "CPU", None, f"CuPy does not import ({type(exc).__name__}: {exc})")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy raises CUDARuntimeError without a driver
        return DeviceInfo("numpy", "CPU", None, f"CuPy found no CUDA driver ({exc})")
    if count == 0:
        return DeviceInfo("numpy", "CPU", None, "no CUDA device visible")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return DeviceInfo("cupy", name, props["totalGlobalMem"] / 2**30, f"{count} CUDA device(s)")


_lock = threading.Lock()
_selected: DeviceInfo | None = None


def select_device(preference: DevicePreference = "auto") -> DeviceInfo:
    """Choose the device for this process and remember it for ``xp()``.

    ``auto``: CUDA when CuPy sees a GPU, else CPU. ``cpu``: always NumPy. ``cuda``: CUDA or a
    ``DeviceUnavailableError`` that says why not (never a silent fall back to the CPU)."""
    info = resolve_device(preference)
    global _selected
    with _lock:
        _selected = info
    return info


def resolve_device(preference: DevicePreference = "auto") -> DeviceInfo:
    """What ``select_device`` would choose, without remembering it."""
    if preference not in ("auto", "cpu", "cuda"):
        raise SwapcastError(f"device must be auto, cpu or cuda (got {preference!r})")
    if preference == "cpu":
        info = DeviceInfo("numpy", "CPU", None, "device: cpu was asked for")
    else:
        info = detect_device()
        if preference == "cuda" and not info.is_cuda:
            raise DeviceUnavailableError(
                f"device 'cuda' was asked for but no CUDA device can be used: {info.reason}; "
                "install cupy-cuda13x (or cupy-cuda12x) on a machine with an NVIDIA GPU, or set engine.device to auto or cpu"
            )
        if preference == "auto":
            info = DeviceInfo(info.backend, info.name, info.memory_gb, f"auto: {info.reason}")
    return info


def current_device() -> DeviceInfo:
    """The device chosen by ``select_device`` (``auto`` on first use)."""
    if _selected is None:
        return select_device("auto")
    return _selected


def xp() -> ModuleType:
    """The array module of the selected device: ``cupy`` on CUDA, ``numpy`` on CPU."""
    if current_device().is_cuda:
        import cupy

        return cupy
    return np


def array_module(array: Any) -> ModuleType:
    """The module an existing array belongs to (``cupy`` for device arrays, else ``numpy``)."""
    if is_device_array(array):
        import cupy

        return cupy
    return np


def is_device_array(array: Any) -> bool:
    """True for a CuPy array (checked without importing CuPy)."""
    return type(array).__module__.startswith("cupy")


def to_device(array: Any, dtype: Any = None) -> Any:
    """``array`` on the selected device: a CuPy array on CUDA (copied once from the host),
    the NumPy array itself on CPU. Device arrays pass through without a copy."""
    if current_device().is_cuda:
        import cupy

        return cupy.asarray(array, dtype=dtype)
    if is_device_array(array):
        array = array.get()
    return np.asarray(array, dtype=dtype)


def to_host(array: Any) -> np.ndarray:
    """A NumPy array: copied from the GPU for a CuPy array, the array itself otherwise."""
    if is_device_array(array):
        return array.get()
    if hasattr(array, "detach") and hasattr(array, "cpu"):  # a torch tensor
        return array.detach().cpu().numpy()
    return np.asarray(array)


def synchronize() -> None:
    """Wait for the selected device's queued work (no-op on CPU)."""
    if current_device().is_cuda:
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def _reset_for_tests() -> None:
    global _selected
    with _lock:
        _selected = None
