"""Temporal smoothing of landmarks: the One Euro filter (Casiez et al., CHI 2012).

A still face must not jitter (low cutoff when points barely move) while a moving face must
not lag (the cutoff rises with speed)."""

from __future__ import annotations

import math

import numpy as np


def _alpha(cutoff: np.ndarray | float, dt: float) -> np.ndarray | float:
    tau = 1.0 / (2.0 * math.pi * np.asarray(cutoff))
    return 1.0 / (1.0 + tau / dt)


class OneEuroFilter:
    """Smooths an array of points over time; each element is filtered independently."""

    def __init__(self, min_cutoff: float = 0.8, beta: float = 0.04, derivative_cutoff: float = 1.0) -> None:
        self.min_cutoff = min_cutoff
        self.beta = beta
        self.derivative_cutoff = derivative_cutoff
        self._value: np.ndarray | None = None
        self._speed: np.ndarray | None = None
        self._time: float | None = None

    def reset(self) -> None:
        self._value = self._speed = self._time = None

    def __call__(self, value: np.ndarray, timestamp: float) -> np.ndarray:
        value = np.asarray(value, dtype=np.float32)
        if self._value is None or self._time is None or timestamp <= self._time:
            self._value, self._speed, self._time = value.copy(), np.zeros_like(value), timestamp
            return value
        dt = timestamp - self._time
        speed = (value - self._value) / dt
        self._speed = self._speed + _alpha(self.derivative_cutoff, dt) * (speed - self._speed)
        # One speed per point (not per axis), so a point moving along x is not smoothed more in y.
        point_speed = np.linalg.norm(self._speed.reshape(len(value), -1), axis=1, keepdims=True)
        cutoff = self.min_cutoff + self.beta * point_speed
        self._value = self._value + _alpha(cutoff, dt) * (value - self._value)
        self._time = timestamp
        return self._value.astype(np.float32)
