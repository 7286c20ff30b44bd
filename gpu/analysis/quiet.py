"""Silence the C++ log lines mediapipe prints while its graphs start.

Its TFLite/absl code writes setup chatter ("Created TensorFlow Lite XNNPACK delegate",
"Feedback manager requires …") straight to file descriptor 2, past Python's logging. The
descriptor is pointed at /dev/null only around graph creation and the first run."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    if os.environ.get("SWAPCAST_NATIVE_LOGS"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class QuietGraph:
    """A mediapipe solution graph whose start-up chatter never reaches the console: created
    and warmed up on a blank frame with stderr silenced, and silenced again until the first
    frame with a result (some warnings only fire when a first face is projected)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        with native_stderr_silenced():
            self._graph = factory()
            self._graph.process(np.zeros((64, 64, 3), dtype=np.uint8))
        self._settled = False

    def process(self, image: np.ndarray) -> Any:
        if self._settled:
            return self._graph.process(image)
        with native_stderr_silenced():
            result = self._graph.process(image)
        self._settled = bool(getattr(result, "multi_face_landmarks", None) or getattr(result, "detections", None))
        return result

    def close(self) -> None:
        self._graph.close()
