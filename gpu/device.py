"""Which array backend this node computes with: CuPy on a CUDA GPU, NumPy on the CPU."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceInfo:
    backend: str  # "cupy" or "numpy"
    name: str
    memory_gb: float | None
    reason: str  # why this backend was chosen


def detect_device() -> DeviceInfo:
    """CuPy when it imports and sees a CUDA device; otherwise NumPy, with the reason."""
    try:
        import cupy
    except ImportError:
        return DeviceInfo("numpy", "CPU", None, "CuPy is not installed")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CuPy raises CUDARuntimeError without a driver
        return DeviceInfo("numpy", "CPU", None, f"CuPy found no CUDA driver ({exc})")
    if count == 0:
        return DeviceInfo("numpy", "CPU", None, "no CUDA device visible")
    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return DeviceInfo("cupy", name, props["totalGlobalMem"] / 2**30, f"{count} CUDA device(s)")
