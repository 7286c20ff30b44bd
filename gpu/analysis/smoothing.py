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


class MeshSmoother:
    """One Euro on a face mesh split into its pose and its shape.

    Filtering each point on its own lags a zoom or a fast pan by a fifth of the face: the
    filter's speed estimate is slow to rise, and on a zoom the rim's points move while the
    centre's barely do. The pose here (centre, scale, in-plane turn) comes from all 468 points
    at once, so it is steady enough to follow closely (``pose``: a quick filter); the shape,
    in the face's own frame and size, keeps the full smoothing against the model's jitter.
    Input and output: (468, 2 or 3) pixels (z scales with the face, it does not turn)."""

    def __init__(self, pose: OneEuroFilter | None = None, shape: OneEuroFilter | None = None) -> None:
        self._pose = pose or OneEuroFilter(min_cutoff=1.0, beta=0.15, derivative_cutoff=4.0)
        self._shape = shape or OneEuroFilter()
        self._unit: float | None = None  # the first frame's size: pose and shape in pixels of it
        self._shape_value: np.ndarray | None = None
        self._angle = 0.0

    def reset(self) -> None:
        self._pose.reset()
        self._shape.reset()
        self._unit = self._shape_value = None

    def __call__(self, mesh: np.ndarray, timestamp: float) -> np.ndarray:
        mesh = np.asarray(mesh, dtype=np.float64)
        centre = mesh[:, :2].mean(0)
        offsets = mesh[:, :2] - centre
        size = float(np.sqrt((offsets ** 2).sum(1).mean())) or 1.0
        if self._unit is None or self._shape_value is None:
            self._unit = size
            eyes = offsets[263] - offsets[33] if len(mesh) > 263 else offsets[-1] - offsets[0]
            angle = float(np.arctan2(eyes[1], eyes[0]))
        else:  # the turn that best lays the last shape onto this frame's points
            last = self._shape_value[:, :2]
            turn = float(np.arctan2((last[:, 0] * offsets[:, 1] - last[:, 1] * offsets[:, 0]).sum(), (last * offsets).sum()))
            angle = self._angle + (turn - self._angle + np.pi) % (2 * np.pi) - np.pi  # no jump at +-pi
        self._angle = angle
        pose = np.array([[centre[0], centre[1]], [self._unit * np.log(size), self._unit * angle]])
        cos, sin = np.cos(angle), np.sin(angle)
        shape = np.empty_like(mesh)
        shape[:, 0] = (cos * offsets[:, 0] + sin * offsets[:, 1]) / size * self._unit
        shape[:, 1] = (-sin * offsets[:, 0] + cos * offsets[:, 1]) / size * self._unit
        shape[:, 2:] = mesh[:, 2:] / size * self._unit
        pose = self._pose(pose, timestamp).astype(np.float64)
        self._shape_value = self._shape(shape, timestamp).astype(np.float64)
        scale = np.exp(pose[1, 0] / self._unit) / self._unit
        cos, sin = np.cos(pose[1, 1] / self._unit), np.sin(pose[1, 1] / self._unit)
        out = np.empty_like(mesh)
        out[:, 0] = pose[0, 0] + scale * (cos * self._shape_value[:, 0] - sin * self._shape_value[:, 1])
        out[:, 1] = pose[0, 1] + scale * (sin * self._shape_value[:, 0] + cos * self._shape_value[:, 1])
        out[:, 2:] = scale * self._shape_value[:, 2:]
        return out.astype(np.float32)
