"""One still swapped by a fresh mesh3d swapper: registration and the frame both run under
whatever a test has patched."""

from __future__ import annotations

import numpy as np

from gpu.options import SwapOptions
from gpu.swappers.base import run_jobs
from gpu.swappers.mesh3d import Mesh3dSwapper


def swap_still(source: np.ndarray, source_face, target: np.ndarray, target_face) -> np.ndarray:
    swapper = Mesh3dSwapper()
    registered = swapper.register(source, source_face)
    frame = target.copy()
    job = swapper.prepare(frame, target_face, registered, SwapOptions())
    swapper.finish(frame, job, run_jobs(swapper.runner, [job])[0])
    return frame
