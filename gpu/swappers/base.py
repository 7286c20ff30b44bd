"""The swapper contract: prepare rows, run them as one batch, paste the answers back.

A swap is split in three so that rows from many faces, frames and sessions can share one
runner call (the micro-batcher stacks ``FaceJob.feeds`` along axis 0):

1. ``register(image, face)`` once per source face -> the swapper's own source payload;
2. ``prepare(frame, face, source, options)`` per target face -> a ``FaceJob`` whose feeds
   are single rows (no batch axis);
3. the runner runs the stacked feeds; ``finish(frame, job, row)`` pastes one output row
   back into the frame in place.

Things in front of a face (a hand, a microphone, glasses frames) stay the target's: the
caller hands ``prepare`` a ``KeepMask`` and every swapper folds what it answers into its
blend and paste masks (see ``KeepMask`` for the contract).

Where the data lives follows the frame: given a CuPy frame (a CUDA node), ``prepare`` crops
on the device, the feeds are device arrays, ``run_jobs`` hands them to the runner's
``run_device`` (no host copy) and ``finish`` pastes on the device; given a NumPy frame, the
same code runs the CPU twins. So a frame crosses the bus once each way, not once per face.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from gpu.device import array_module, is_device_array, to_host
from gpu.options import SwapOptions
from gpu.runners.base import Runner
from gpu.types import Face


@dataclass
class FaceJob:
    """One target face ready for the runner."""

    feeds: dict[str, Any]  # one row per input name, without the batch axis (NumPy or CuPy, as the frame)
    matrix: np.ndarray  # (2, 3) frame pixels -> crop pixels
    context: dict[str, Any] = field(default_factory=dict)  # what finish() needs (masks, ...)


class KeepMask(Protocol):
    """Where a target face's own pixels must stay (occluders in front of it).

    Called by a swapper's ``prepare`` once per face, after it cropped the target:
    ``crop`` is the aligned target crop, (S, S, 3) uint8 RGB, NumPy or CuPy like the frame;
    ``face`` is in frame pixels (``track_id`` >= 0 for a tracked video face, None or < 0
    for a still: no history); ``matrix`` (2, 3) maps frame pixels to crop pixels.
    Answers (S, S) float32 in [0, 1], host or device, already soft-edged: 1 = the target's
    pixel stays exactly, 0 = swap as usual, between = a mix; or None when nothing is in
    front of the face. The swapper multiplies ``1 - keep`` into its blend and paste masks,
    so it needs no other knowledge of where the mask came from (the built-in estimator in
    ``gpu.analysis.occlusion``, an occluder or parser model). Must not modify ``crop``.
    """

    def __call__(self, crop: Any, face: Face, matrix: np.ndarray) -> Any | None: ...


def any_of(*masks: KeepMask | None) -> KeepMask | None:
    """One ``KeepMask`` keeping what any of ``masks`` keeps (their maximum); None when none is given."""
    given = [mask for mask in masks if mask is not None]
    if len(given) <= 1:
        return given[0] if given else None

    def keep(crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray | None:
        answers = [to_host(answer) for answer in (mask(crop, face, matrix) for mask in given) if answer is not None]
        return np.maximum.reduce(answers).astype(np.float32) if answers else None

    return keep


def keep_mask(keep: KeepMask | None, crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray | None:
    """What ``keep`` answers for this crop as a host (S, S) float32 array clipped to [0, 1]
    (None: nothing to keep); swappers call this rather than ``keep`` itself."""
    if keep is None:
        return None
    answer = keep(crop, face, matrix)
    if answer is None:
        return None
    size = crop.shape[:2]
    mask = np.clip(np.asarray(to_host(answer), dtype=np.float32), 0.0, 1.0)
    if mask.shape != size:
        raise ValueError(f"keep mask has shape {mask.shape}, expected the crop's {size}")
    return mask


class Swapper(Protocol):
    name: str
    runner: Runner
    crop_size: int

    def register(self, image: np.ndarray, face: Face) -> Any: ...

    def prepare(self, frame: np.ndarray, face: Face, source: Any, options: SwapOptions,
                keep: KeepMask | None = None) -> FaceJob: ...

    def finish(self, frame: np.ndarray, job: FaceJob, row: Sequence[np.ndarray]) -> None: ...


def stack_feeds(jobs: Sequence[FaceJob]) -> dict[str, Any]:
    """Stack the single-row feeds of several jobs into one ``[N, ...]`` batch, on the
    device the rows are on (rows of one name are all host or all device arrays). One job's
    batch is its rows as views, not copies: a lone session's every frame (mesh3d: its
    1.8 MB albedo and the crop's planes, ~0.5 ms of CPU a frame to copy)."""
    if len(jobs) == 1:
        return {name: array_module(row).ascontiguousarray(row)[None] for name, row in jobs[0].feeds.items()}
    names = jobs[0].feeds.keys()
    return {name: array_module(jobs[0].feeds[name]).stack([job.feeds[name] for job in jobs]) for name in names}


def run_jobs(runner: Runner, jobs: Sequence[FaceJob]) -> list[list[Any]]:
    """Run jobs as one batch; returns, per job, its row of every output. Device feeds go
    to ``runner.run_device``, which answers on the device where the runner computes there
    (ONNX Runtime's CPU provider on a CUDA node answers on the host; ``finish`` takes
    either); host feeds go to ``runner.run``."""
    if not jobs:
        return []
    feeds = stack_feeds(jobs)
    on_device = any(is_device_array(array) for array in feeds.values())
    if on_device and hasattr(runner, "run_device"):
        outputs = runner.run_device(feeds)
    else:
        outputs = runner.run({name: to_host(array) for name, array in feeds.items()} if on_device else feeds)
    return [[out[i] for out in outputs] for i in range(len(jobs))]
