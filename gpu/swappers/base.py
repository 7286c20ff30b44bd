"""The swapper contract: prepare rows, run them as one batch, paste the answers back.

A swap is split in three so that rows from many faces, frames and sessions can share one
runner call (the micro-batcher stacks ``FaceJob.feeds`` along axis 0):

1. ``register(image, face)`` once per source face -> the swapper's own source payload;
2. ``prepare(frame, face, source, options)`` per target face -> a ``FaceJob`` whose feeds
   are single rows (no batch axis);
3. the runner runs the stacked feeds; ``finish(frame, job, row)`` pastes one output row
   back into the frame in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gpu.options import SwapOptions
from gpu.runners.base import Runner
from gpu.types import Face


@dataclass
class FaceJob:
    """One target face ready for the runner."""

    feeds: dict[str, np.ndarray]  # one row per input name, without the batch axis
    matrix: np.ndarray  # (2, 3) frame pixels -> crop pixels
    context: dict[str, Any] = field(default_factory=dict)  # what finish() needs (masks, ...)


class Swapper(Protocol):
    name: str
    runner: Runner
    crop_size: int

    def register(self, image: np.ndarray, face: Face) -> Any: ...

    def prepare(self, frame: np.ndarray, face: Face, source: Any, options: SwapOptions) -> FaceJob: ...

    def finish(self, frame: np.ndarray, job: FaceJob, row: Sequence[np.ndarray]) -> None: ...


def stack_feeds(jobs: Sequence[FaceJob]) -> dict[str, np.ndarray]:
    """Stack the single-row feeds of several jobs into one ``[N, ...]`` batch."""
    names = jobs[0].feeds.keys()
    return {name: np.stack([job.feeds[name] for job in jobs]) for name in names}


def run_jobs(runner: Runner, jobs: Sequence[FaceJob]) -> list[list[np.ndarray]]:
    """Run jobs as one batch; returns, per job, its row of every output."""
    if not jobs:
        return []
    outputs = runner.run(stack_feeds(jobs))
    return [[out[i] for out in outputs] for i in range(len(jobs))]
