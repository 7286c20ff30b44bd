"""The one runner contract every model (built-in or neural) is executed through.

``run(feeds)`` takes named arrays whose first axis is the batch ``N`` and returns the
outputs in the model's declared order, each with the same ``N``. Rows are independent, so
the batcher can stack requests from many sessions into one call and split the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int | str | None, ...]  # str or None = symbolic/dynamic dimension
    dtype: np.dtype


class Runner(Protocol):
    """Executes one model on a batch: ``[N, ...]`` in, ``[N, ...]`` out."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...
