"""What a GPU node does per frame tick for N single-face sessions, stage by stage, batched
across sessions (one launch / one model call per stage for all of them) or one session at a
time, with the time of every stage.

Stages: ``upload`` (the decoder's I420 into device memory), ``yuv_to_rgb``, ``detect``
(BlazeFace full range on the whole frame, for the sessions whose turn it is: every
``detect_every`` frames, staggered, and every session without a track), ``landmarks`` (the
468-point mesh on each session's ROI: from the previous mesh, or from a fresh detection),
``swap_prepare`` (crop and feeds), ``swap_model``, ``paste``, ``rgb_to_yuv`` (the encoder's
I420 or NV12) and ``download`` (back to the host encoder). Detection decode, ROI and
un-projection are ``gpu.tracking``'s array-module code, the kernels ``gpu.kernels.ops``'s,
the models go through ``make_runner`` (Torch fp16 + CUDA graphs on a GPU, ONNX Runtime on
the CPU): the node's own pieces, not copies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu.align import arcface_template, estimate_similarity
from gpu.analysis.landmarks import five_points
from gpu.device import is_device_array, to_host
from gpu.kernels import ops
from gpu.models.converted_tracking import converted_files
from gpu.options import SwapOptions
from gpu.runners.base import Runner
from gpu.swappers.base import run_jobs
from gpu.swappers.inswapper import CROP_SIZE, paste_mask
from gpu.swappers.mesh3d import Mesh3dSource, Mesh3dSwapper
from gpu.tracking import blazeface_decode as blazeface
from gpu.tracking import face_roi
from gpu.types import Face

STAGES = ("upload", "yuv_to_rgb", "detect", "landmarks", "swap_prepare", "swap_model", "paste", "rgb_to_yuv", "download")
MIN_PRESENCE = 0.5  # mediapipe's min_tracking_confidence
MIN_DETECTION = 0.5
# The sessions' RGB frames by session number: a list of views into the batch, or (one
# session at a time) a mapping holding only the sessions being worked on.
Frames = Sequence[Any] | Mapping[int, Any]


def infer(runner: Runner, feeds: dict[str, Any]) -> list[Any]:
    """Device feeds to ``run_device`` (answers on the device), host feeds to ``run``."""
    if any(is_device_array(v) for v in feeds.values()) and hasattr(runner, "run_device"):
        return runner.run_device(feeds)
    return runner.run({k: to_host(v) for k, v in feeds.items()})


class StageClock:
    """Host time per stage (perf_counter), and on CUDA the device time per stage: an event is
    recorded at every stage boundary on the stream all stages share (CuPy's and Torch's
    default stream), and the time between consecutive events is charged to the stage that
    ended there."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.events = cuda  # off for one-session-at-a-time ticks: thousands of events would weigh on them
        self.host: dict[str, float] = {}
        self._marks: list[tuple[str, Any]] = []
        self._last = 0.0

    def begin(self) -> None:
        self.host = dict.fromkeys(STAGES, 0.0)
        self._marks = [("", self._event())] if self.events else []
        self._last = time.perf_counter()

    def mark(self, stage: str) -> None:
        now = time.perf_counter()
        self.host[stage] += now - self._last
        self._last = now
        if self.events:
            self._marks.append((stage, self._event()))

    def device(self) -> dict[str, float] | None:
        """Device seconds per stage of the last tick (call after the tick's sync)."""
        if not self.events:
            return None
        spent = dict.fromkeys(STAGES, 0.0)
        for (_, start), (stage, end) in zip(self._marks, self._marks[1:]):
            spent[stage] += cupy_seconds(start, end)
        return spent

    @staticmethod
    def _event():
        import cupy

        event = cupy.cuda.Event()
        event.record()
        return event


def cupy_seconds(start, end) -> float:
    import cupy

    return cupy.cuda.get_elapsed_time(start, end) / 1000


@dataclass
class Track:
    """A session's face between frames: its last mesh (None until found)."""

    mesh: np.ndarray | None = None  # (468, 3) frame pixels


class Tracking:
    """Detection every ``detect_every`` frames (staggered over sessions) and the mesh every
    frame, through the converted mediapipe graphs."""

    def __init__(self, detector: Runner, landmarker: Runner, detect_every: int) -> None:
        self.detector, self.landmarker, self.detect_every = detector, landmarker, detect_every
        self.spec = blazeface.FULL_RANGE

    def due(self, tick: int, sessions: Sequence[int], tracks: Sequence[Track]) -> list[int]:
        return [s for s in sessions if tracks[s].mesh is None or (tick + s) % self.detect_every == 0]

    def detect(self, frames: Frames, due: Sequence[int]) -> dict[int, np.ndarray]:
        """Whole-frame detection of ``frames[s]`` for each ``s`` in ``due``: the best face's
        landmark ROI (cx, cy, side, rotation) per session that has one."""
        if not due:
            return {}
        height, width = frames[due[0]].shape[:2]
        window = np.array([0.0, 0.0, width, height])
        windows = np.repeat(window[None], len(due), 0)
        tensor = blazeface.detector_input([frames[s] for s in due], windows, self.spec)
        boxes, scores = infer(self.detector, {"input": tensor})[:2]
        found = {}
        for session, detections in zip(due, blazeface.decode(boxes, scores, self.spec, MIN_DETECTION), strict=True):
            if len(detections):
                best = blazeface.to_frame(detections, window, self.spec.size)
                found[session] = face_roi.roi_from_detection(best.boxes[:1], best.keypoints[:1])[0]
        return found

    def landmarks(self, frames: Frames, sessions: Sequence[int], tracks: Sequence[Track],
                  detected: dict[int, np.ndarray]) -> dict[int, Face]:
        """The mesh of every session that has an ROI (its track's, else its detection's);
        updates the tracks (a face under ``MIN_PRESENCE`` is lost)."""
        rois, order = [], []
        for s in sessions:
            if tracks[s].mesh is not None:
                rois.append(face_roi.roi_from_landmarks(tracks[s].mesh[None])[0])
            elif s in detected:
                rois.append(detected[s])
            else:
                continue
            order.append(s)
        if not order:
            return {}
        rois_host = np.stack(rois).astype(np.float32)
        tensor = face_roi.landmark_input([frames[s] for s in order], rois_host)
        raw, logits = infer(self.landmarker, {"input": tensor})[:2]
        points = to_host(face_roi.unproject_landmarks(raw, rois_host))
        alive = to_host(face_roi.presence(logits)) >= MIN_PRESENCE
        faces = {}
        for i, s in enumerate(order):
            tracks[s].mesh = points[i] if alive[i] else None
            if alive[i]:
                mesh = np.ascontiguousarray(points[i, :, :2])
                box = np.concatenate([mesh.min(0), mesh.max(0)]).astype(np.float32)
                faces[s] = Face(box=box, kps=five_points(mesh), mesh=mesh, depth=np.ascontiguousarray(points[i, :, 2]), track_id=s)
        return faces


def make_tracking(models: Path, make_runner: Callable[[Path, str], Runner], detect_every: int) -> Tracking:
    """Tracking through the converted full-range detector and landmark model in ``models``,
    found by the folder's manifest as a node without mediapipe finds them (a file of another
    converter version, or one cut short, is never picked up)."""
    files = converted_files(models)
    detector = make_runner(files["face_detection_full_range_sparse.tflite"], "face_detection_full_range")
    landmarker = make_runner(files["face_landmark.tflite"], "face_landmark")
    return Tracking(detector, landmarker, detect_every)


class InswapperStage:
    """An inswapper-class model (the synthetic one: same signature and cost) on 128 px
    ArcFace-aligned crops: one crop launch, one model call and one paste launch for all
    faces; the masks are the adapter's own (``paste_mask``), drawn on the host."""

    name = "synthetic_inswapper"

    def __init__(self, runner: Runner, sessions: int, options: SwapOptions) -> None:
        self.runner, self.options = runner, options
        rng = np.random.default_rng(11)
        latents = rng.standard_normal((sessions, 512)).astype(np.float32)
        self.latents = latents / np.linalg.norm(latents, axis=1, keepdims=True)
        self._device_latents: Any = None
        self.template = arcface_template(CROP_SIZE)

    def swap(self, frames: Frames, faces: dict[int, Face], clock: StageClock) -> None:
        order = sorted(faces)
        if not order:
            for stage in ("swap_prepare", "swap_model", "paste"):
                clock.mark(stage)
            return
        xp = _xp(frames[order[0]])
        matrices = np.stack([estimate_similarity(faces[s].kps, self.template) for s in order])
        masks = np.stack([paste_mask(faces[s], m, CROP_SIZE, self.options.feather, False) for s, m in zip(order, matrices)])
        crops = ops.crop_faces([frames[s] for s in order], matrices, CROP_SIZE)
        target = xp.ascontiguousarray(crops.transpose(0, 3, 1, 2), dtype=np.float32) / np.float32(255.0)
        latents = self._latents(xp)[xp.asarray(np.array(order))] if xp is not np else self.latents[order]
        clock.mark("swap_prepare")
        out = infer(self.runner, {"target": target, "source": latents})[0]
        clock.mark("swap_model")
        swapped = xp.clip(xp.asarray(out).transpose(0, 2, 3, 1) * 255.0 + 0.5, 0, 255).astype(np.uint8)
        ops.paste_faces([frames[s] for s in order], range(len(order)), swapped,
                        xp.asarray(masks * np.float32(self.options.blend)), matrices)
        clock.mark("paste")

    def _latents(self, xp):
        if self._device_latents is None:
            self._device_latents = xp.asarray(self.latents)
        return self._device_latents


class Mesh3dStage:
    """The default built-in swapper (``mesh3d``): its host half (``prepare``: mesh
    rasterisation, lighting fit, masks) per face as the node runs it, its graph through the
    runner for all faces at once, each face pasted as the node pastes it (its frame's lost
    detail given back, on the host)."""

    name = "builtin_mesh3d"

    def __init__(self, swapper: Mesh3dSwapper, source: Mesh3dSource, options: SwapOptions) -> None:
        self.swapper, self.source, self.options = swapper, source, options

    def swap(self, frames: Frames, faces: dict[int, Face], clock: StageClock) -> None:
        order = sorted(faces)
        jobs = [self.swapper.prepare(frames[s], faces[s], self.source, self.options) for s in order]
        clock.mark("swap_prepare")
        rows = run_jobs(self.swapper.runner, jobs)
        clock.mark("swap_model")
        for s, job, row in zip(order, jobs, rows, strict=True):
            self.swapper.finish(frames[s], job, row)
        clock.mark("paste")


def _xp(array: Any):
    if is_device_array(array):
        import cupy

        return cupy
    return np
