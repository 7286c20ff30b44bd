"""Keep the C++ log lines mediapipe prints out of the console.

Its TFLite/absl code writes chatter ("Created TensorFlow Lite XNNPACK delegate",
"Feedback manager requires …") straight to file descriptor 2, past Python's logging, on
every graph it creates; absl's log level cannot be set from outside the wheel, and
GLOG_minloglevel / TF_CPP_MIN_LOG_LEVEL do not reach it (measured with mediapipe 0.10.21).

So fd 2 is pointed at a pipe once per process, before the first graph, and a thread copies
every line to where fd 2 pointed before, except the lines that match that chatter. fd 2 is
never touched again: pointing it at /dev/null around graph calls, as this module once did,
raced between threads and could leave the whole process without stderr for good.
``SWAPCAST_NATIVE_LOGS=1`` leaves fd 2 alone and shows everything."""

from __future__ import annotations

import atexit
import os
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

# what mediapipe's native code says while graphs start and first see a face
CHATTER = re.compile(
    rb"^(INFO: Created TensorFlow Lite XNNPACK delegate"
    rb"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    rb"|[IW]\d{4} [\d:. ]+\d+ (inference_feedback_manager|landmark_projection_calculator|gl_context)\.cc:\d+\])"
)


class NativeStderrFilter:
    """fd 2 through a pipe whose reader drops native chatter; installed once per process."""

    _lock = threading.Lock()
    _installed: NativeStderrFilter | None = None

    def __init__(self) -> None:
        self._target = os.dup(2)  # where stderr went before: the lines that are kept go there
        read_end, write_end = os.pipe()
        self._pipe = _identity(write_end)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._reader = os.fdopen(read_end, "rb", buffering=0)
        self._thread = threading.Thread(target=self._copy, name="native-stderr-filter", daemon=True)
        self._thread.start()
        atexit.register(self._drain)

    @classmethod
    def install(cls) -> None:
        """Once per process (later calls do nothing), unless SWAPCAST_NATIVE_LOGS is set."""
        with cls._lock:
            if cls._installed is None and not os.environ.get("SWAPCAST_NATIVE_LOGS"):
                cls._installed = cls()

    def _copy(self) -> None:
        pending = b""
        while chunk := self._reader.read(65536):
            *lines, pending = (pending + chunk).split(b"\n")
            kept = b"".join(line + b"\n" for line in lines if not CHATTER.match(line))
            if kept:
                os.write(self._target, kept)
        if pending and not CHATTER.match(pending):
            os.write(self._target, pending)

    def _drain(self) -> None:
        """At exit: give fd 2 back and copy what is still in the pipe (a last traceback),
        unless someone else (a test runner's capture) has pointed it elsewhere since."""
        if _identity(2) == self._pipe:
            os.dup2(self._target, 2)  # the pipe's last writer is gone: the reader sees its end
            self._thread.join(timeout=2.0)


def _identity(fd: int) -> tuple[int, int]:
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


class QuietGraph:
    """A mediapipe solution graph, created and warmed up on a blank frame, whose native
    chatter is filtered out of stderr (see ``NativeStderrFilter``)."""

    def __init__(self, factory: Callable[[], Any]) -> None:
        NativeStderrFilter.install()
        self._graph = factory()
        self._graph.process(np.zeros((64, 64, 3), dtype=np.uint8))

    def process(self, image: np.ndarray) -> Any:
        return self._graph.process(image)

    def close(self) -> None:
        self._graph.close()
