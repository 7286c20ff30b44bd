"""Live budgets: a live stream uses an optional processor only while it can afford it.

The user's processors are full networks per face; a node that swaps live at its frame rate
may not have their time to spare, and how much it has depends on the node and its load. So
each live stream measures its own step (the enhancer's, the mask models') and, once the
median of its last ``WINDOW`` frames goes over the step's budget, goes on without it: the
swap itself keeps its frame rate. Offline work (jobs, ``swapcast swap``) has no budget.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Hashable
from typing import Any

import numpy as np

from gpu.swappers.base import KeepMask, any_of
from gpu.types import Face

log = logging.getLogger(__name__)

WINDOW = 10  # live frames whose step time decides whether a stream keeps the processor


class LiveBudget:
    """One live stream's measured cost of one step (``what``), per frame, against ``budget_ms``."""

    def __init__(self, what: str, budget_ms: float, session_id: Hashable, window: int = WINDOW) -> None:
        if budget_ms <= 0:
            raise ValueError(f"{what}: a live budget must be positive, not {budget_ms} ms")
        self.what = what
        self.budget_ms = budget_ms
        self.session_id = session_id
        self.affordable = True
        self._recent: deque[float] = deque(maxlen=window)

    def record(self, ms: float) -> None:
        """One frame's step took ``ms``; over budget (median of the window) drops it for good."""
        if not self.affordable:
            return
        self._recent.append(ms)
        if len(self._recent) == self._recent.maxlen and (median := float(np.median(self._recent))) > self.budget_ms:
            self.affordable = False
            log.warning("stream %s: the %s takes %.1f ms a frame (budget %.1f ms): the stream goes on without it",
                        self.session_id, self.what, median, self.budget_ms)


class BudgetedKeepMasks:
    """The mask models' ``KeepMask`` hooks (occluder, parser) under a live stream's budget.
    ``hook`` is what the swappers call per face; the caller ends each frame with
    ``frame_done`` so the budget sees the frame's whole mask step (every face, every model)."""

    def __init__(self, masks: tuple[KeepMask, ...], budget: LiveBudget) -> None:
        self.budget = budget
        self._masks = any_of(*masks)
        self._frame_ms = 0.0
        self._called = False

    def hooks(self) -> tuple[KeepMask, ...]:
        """The hooks to use this frame: the timed masks while affordable, none after."""
        return (self._timed,) if self._masks is not None and self.budget.affordable else ()

    def frame_done(self) -> None:
        if self._called:
            self.budget.record(self._frame_ms)
        self._frame_ms, self._called = 0.0, False

    def _timed(self, crop: Any, face: Face, matrix: np.ndarray) -> np.ndarray | None:
        started = time.perf_counter()
        try:
            return self._masks(crop, face, matrix)
        finally:
            self._frame_ms += (time.perf_counter() - started) * 1000.0
            self._called = True
