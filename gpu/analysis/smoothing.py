"""Temporal smoothing of landmarks: the One Euro filter (Casiez et al., CHI 2012).

A still face must not jitter (low cutoff when points barely move) while a moving face must
not lag (the cutoff rises with speed)."""

from __future__ import annotations

import math

import numpy as np

from gpu.tracking.face_roi import MESH_EYES


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
        mesh = np.asarray(mesh, dtype=np.float32)
        centre = mesh[:, :2].mean(0)
        offsets = mesh[:, :2] - centre
        size = math.sqrt(float(np.einsum("ij,ij->", offsets, offsets)) / len(mesh)) or 1.0
        if self._unit is None or self._shape_value is None:
            self._unit = size
            left, right = MESH_EYES
            eyes = offsets[right] - offsets[left] if len(mesh) > right else offsets[-1] - offsets[0]
            angle = math.atan2(float(eyes[1]), float(eyes[0]))
        else:  # the turn that best lays the last shape onto this frame's points
            last = self._shape_value[:, :2]
            turn = math.atan2(float(last[:, 0] @ offsets[:, 1] - last[:, 1] @ offsets[:, 0]), float(np.einsum("ij,ij->", last, offsets)))
            angle = self._angle + (turn - self._angle + math.pi) % (2 * math.pi) - math.pi  # no jump at +-pi
        self._angle = angle
        pose = self._pose(np.array([[centre[0], centre[1]], [self._unit * math.log(size), self._unit * angle]]), timestamp)
        shape = np.empty_like(mesh)
        shape[:, :2] = offsets @ _turn(-angle) * (self._unit / size)
        shape[:, 2:] = mesh[:, 2:] * (self._unit / size)
        self._shape_value = self._shape(shape, timestamp)
        scale = math.exp(float(pose[1, 0]) / self._unit) / self._unit
        out = np.empty_like(mesh)
        out[:, :2] = self._shape_value[:, :2] @ _turn(float(pose[1, 1]) / self._unit) * scale + pose[0]
        out[:, 2:] = self._shape_value[:, 2:] * scale
        return out


def _turn(angle: float) -> np.ndarray:
    """(2, 2) float32: row vectors times it turn by ``angle`` (y down: clockwise on screen)."""
    cos, sin = math.cos(angle), math.sin(angle)
    return np.array([[cos, sin], [-sin, cos]], np.float32)
