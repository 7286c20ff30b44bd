"""The watermark embed on the device against its CPU twin (run by scripts/gpu-check.sh on a
CUDA machine; deselected in CI with -m "not gpu")."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.watermark.embed import LumaPattern, mark
from gpu.watermark.pattern import MESSAGE_BITS, WatermarkKey

pytestmark = pytest.mark.gpu


def test_device_mark_equals_the_cpu_twin():
    import cupy

    assert cupy.cuda.runtime.getDeviceCount() > 0, "the gpu tests need a CUDA device"
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    frame[:50] = 0  # saturation at both ends
    frame[-50:] = 255
    message = rng.integers(0, 2, MESSAGE_BITS).astype(np.uint8)
    pattern = LumaPattern.make(WatermarkKey(b"gpu"), message, 720, 1280, 3.0)
    on_host = frame.copy()
    mark(on_host, pattern)
    on_device = cupy.asarray(frame)
    mark(on_device, pattern, (cupy.asarray(pattern.add), cupy.asarray(pattern.subtract)))
    assert np.array_equal(cupy.asnumpy(on_device), on_host)
