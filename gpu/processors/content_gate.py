"""Content gate: an OpenNSFW image classifier on source photos and sampled input frames.

Signature: Yahoo's open_nsfw as FaceFusion 2.x ships it (``open_nsfw.onnx``;
facefusion/content_analyser.py): one input float32 ``[N, 224, 224, 3]`` (NHWC), the image
resized to 224x224, BGR, minus the Caffe means (104, 117, 123), no scaling; one output
``[N, 2]`` softmax, column 1 = probability the image is not safe for work. FaceFusion refuses
above 0.80 and samples a video once a second; those are the defaults here. FaceFusion 3.3's
newer ``nsfw_1/2/3`` (a YOLO detector and two classifiers voted together) are not read.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Hashable
from concurrent.futures import Future
from pathlib import Path

import cv2
import numpy as np

from gpu.errors import SwapcastError
from gpu.processors.model import BatchedModel, MakeRunner, TensorRule, load_checked
from gpu.swappers.inswapper import BATCH_DIM

SIZE = 224
BGR_MEAN = np.array([104.0, 117.0, 123.0], np.float32)


class ContentRefused(SwapcastError):
    """The content gate refused an image: the message says what and the score (HTTP 422)."""

    status = 422

    def __init__(self, message: str, score: float) -> None:
        super().__init__(message)
        self.score = score


class ContentGate:
    kind = "content_gate"

    def __init__(self, path: str | Path, *, threshold: float = 0.8, make_runner: MakeRunner | None = None,
                 **batching) -> None:
        self.path = Path(path)
        self.threshold = float(threshold)
        model = load_checked(self.path, [TensorRule(None, (BATCH_DIM, SIZE, SIZE, 3))],
                             [TensorRule(None, (BATCH_DIM, 2))])
        self.model = BatchedModel(self.path, model, make_runner, **batching)
        self._lock = threading.Lock()
        self._refusals: Counter[str] = Counter()  # by where: source (registration), frame (sampled stream or job frames)

    @staticmethod
    def feed(image: np.ndarray) -> dict[str, np.ndarray]:
        """An RGB uint8 image as the model's row."""
        resized = cv2.resize(np.asarray(image), (SIZE, SIZE), interpolation=cv2.INTER_LINEAR)
        return {"input": np.ascontiguousarray(resized[..., ::-1], dtype=np.float32) - BGR_MEAN}

    def score(self, image: np.ndarray, session_id: Hashable = "content-gate") -> float:
        return float(self.model.run(session_id, [self.feed(image)])[0][1])

    def submit(self, image: np.ndarray, session_id: Hashable) -> Future:
        """Score without waiting (live streams): the future's result is ``[row]``; read it with
        ``ContentGate.score_of``."""
        return self.model.submit(session_id, self.feed(image))

    @staticmethod
    def score_of(result: list) -> float:
        return float(np.asarray(result[0][0])[1])

    def check(self, image: np.ndarray, what: str, where: str, session_id: Hashable = "content-gate") -> float:
        """The image's score; ``ContentRefused`` (counted under ``where``) above the threshold."""
        return self.verdict(self.score(image, session_id), what, where)

    def verdict(self, score: float, what: str, where: str) -> float:
        if score > self.threshold:
            with self._lock:
                self._refusals[where] += 1
            raise ContentRefused(
                f"{what} was refused by the content gate ({self.path.name} score {score:.2f} > threshold "
                f"{self.threshold:.2f})", score)
        return score

    def refusals(self) -> dict[str, int]:
        with self._lock:
            return dict(self._refusals)

    def close(self) -> None:
        self.model.close()
