"""``swapcast bench engine --trackers mediapipe,graphs``: the video tracker backends side by
side, in one run.

- **cost**: the tracking stage alone (``tracker.process``: detection sweep, landmarks,
  smoothing) at 1 and 4 concurrent 640x480 single-face sessions, one thread and one tracker
  each, as fast as they go: wall ms per frame (p50/p90) and the process's CPU ms per frame
  (all threads: ONNX Runtime's, mediapipe's, the batchers'). The backends take turns,
  twice each, so a loaded machine slows both alike; the lower of the two runs counts;
- **accuracy**: landmarks of each backend (unsmoothed) on the sample faces and the pose
  set's stills and clips, against the ``mediapipe`` tracker, against mediapipe's FaceMesh
  run on the whole frame in its own tracking mode (``facemesh``: the ROI rules the graphs
  backend follows; the ``mediapipe`` tracker feeds its graph a moving region instead), and
  against the pose set's ground truth: mean and p95 of the per-point distance, in pixels,
  and against the truth also per frame as % of the face's width (mean, worst frame). The
  ``occluded clips`` are the pose clips' pans and zooms with ``bench occlusion``'s objects
  held in front of the face from a quarter in: where a tracker drifts off a covered face.
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from gpu.engine import FaceEngine, TrackerName
from streamer.samples import astronaut, grace_hopper, moving_face_frames

SESSION_COUNTS = (1, 4)
CLIP_SIZE = (640, 480)
CLIP_FRAMES = 48
WARMUP_FRAMES = 4
ROUNDS = 2
STILL_FRAMES = 3  # a still is tracked for a few frames: from the detection's ROI to the mesh's own


def run_tracking_benchmark(engine: FaceEngine, trackers: Sequence[TrackerName], seconds: float, quick: bool = False) -> dict[str, Any]:
    """Cost and accuracy of each backend in ``trackers``; prints a table, returns the report."""
    print(f"tracking: {', '.join(trackers)} side by side; {CLIP_SIZE[0]}x{CLIP_SIZE[1]} single-face sessions, "
          f"{seconds:g} s per run, {ROUNDS} runs each in turn (machine load hits both alike)")
    faces = {"astronaut": astronaut(), "grace_hopper": grace_hopper()}
    clips = [moving_face_frames(faces[name], CLIP_FRAMES, CLIP_SIZE, seed=k) for k, name in enumerate(("grace_hopper", "astronaut"))]
    cost: dict[str, dict[str, Any]] = {}
    for count in SESSION_COUNTS:
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trackers}
        for _ in range(ROUNDS):
            for name in trackers:
                runs[name].append(_sessions(engine, name, clips, count, seconds))
        for name in trackers:
            best = min(runs[name], key=lambda run: run["cpu_ms_per_frame"])
            cost[f"{name}/{count}"] = best
            print(f"  {name:<9} {count} session(s): CPU {best['cpu_ms_per_frame']:.2f} ms/frame, wall p50 "
                  f"{best['wall_p50_ms']:.2f} p90 {best['wall_p90_ms']:.2f} ms/frame, {best['frames_per_s']:.0f} frames/s"
                  + (f", landmark batch mean {best['landmark_batch']:.2f}" if best.get("landmark_batch") else ""))
    print("landmark accuracy (px per point: mean / p95) ...", file=sys.stderr, flush=True)
    accuracy = _accuracy(engine, trackers, faces, quick)
    for group, rows in accuracy.items():
        for label, row in rows.items():
            print(f"  {group:<28} {label:<26} mean {row['mean_px']:.3f} p95 {row['p95_px']:.3f} px"
                  + (f", {row['face_pct_mean']:.2f} % of the face's width (worst frame {row['face_pct_max']:.2f} %)" if "face_pct_mean" in row else "")
                  + f" ({row['faces']} faces, {row['missed']} missed)")
    return {"cost": cost, "accuracy": accuracy}


def _sessions(engine: FaceEngine, backend: TrackerName, clips: list[list[np.ndarray]], count: int, seconds: float) -> dict[str, Any]:
    """``count`` threads, each tracking its own clip with its own tracker for ``seconds``."""
    from swapcast.benchmarks.engine import run_session_threads

    trackers = [engine.tracker(smoothing=True, backend=backend) for _ in range(count)]
    for k, tracker in enumerate(trackers):
        for index in range(WARMUP_FRAMES):
            tracker.process(clips[k % len(clips)][index], index / 30)
    if backend == "graphs":
        engine.tracking_graphs.reset_metrics()
    times: list[list[float]] = [[] for _ in range(count)]

    def body(k: int, t0: float) -> None:
        clip, tracker = clips[k % len(clips)], trackers[k]
        index = WARMUP_FRAMES
        while time.perf_counter() < t0 + seconds:
            started = time.perf_counter()
            tracker.process(clip[index % len(clip)], index / 30)
            times[k].append((time.perf_counter() - started) * 1000)
            index += 1

    cpu_before = _cpu_seconds()
    wall = run_session_threads(count, body)
    cpu = _cpu_seconds() - cpu_before
    for tracker in trackers:
        tracker.close()
    every = np.concatenate([np.array(x) for x in times])
    run = {
        "sessions": count,
        "frames": len(every),
        "frames_per_s": len(every) / wall,
        "cpu_ms_per_frame": 1000 * cpu / len(every),
        "wall_p50_ms": float(np.percentile(every, 50)),
        "wall_p90_ms": float(np.percentile(every, 90)),
    }
    if backend == "graphs":
        landmarks = engine.tracking_graphs.metrics()["landmarks"]
        run["landmark_batch"] = landmarks["mean_batch_size"]
        run["landmark_queue_delay_p50_ms"] = landmarks["queue_delay_p50_ms"]
    return run


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _accuracy(engine: FaceEngine, trackers: Sequence[TrackerName], faces: dict[str, np.ndarray],
              quick: bool) -> dict[str, dict[str, dict[str, float]]]:
    """Per group of targets: each backend against mediapipe's tracker, and against the
    pose set's ground truth where there is one."""
    from gpu.analysis.landmarks import FACE_OVAL
    from swapcast.benchmarks.occlusion import MOTIONS as OCCLUDED_MOTIONS
    from swapcast.benchmarks.occlusion import occluded_clip, occluders
    from swapcast.benchmarks.pose_set import pose_clips, pose_set

    clips = list(pose_clips(quick=quick))
    groups: dict[str, list[tuple[list[np.ndarray], list[np.ndarray | None]]]] = {
        "sample faces": [([image] * STILL_FRAMES, [None] * STILL_FRAMES) for image in faces.values()],
        "pose set stills": [([s.image] * STILL_FRAMES, [s.mesh] * STILL_FRAMES) for s in pose_set(quick=quick)],
        "pose set clips": [(clip.frames, list(clip.meshes)) for clip in clips],
        "occluded clips": [(occluded.frames, list(occluded.meshes)) for occluded in (
            occluded_clip(clip, occluder) for clip in clips if clip.motion in OCCLUDED_MOTIONS for occluder in occluders().values())],
    }
    report: dict[str, dict[str, dict[str, float]]] = {}
    for group, targets in groups.items():
        distances: dict[str, list[np.ndarray]] = {}
        face_pct: dict[str, list[float]] = {}  # per frame against the truth: mean distance / the face's width
        missed: dict[str, int] = {}
        for frames, truths in targets:
            meshes = {name: _tracked(engine, name, frames) for name in {"mediapipe", *trackers}}
            meshes["facemesh"] = _face_mesh(frames)
            still = len(frames) == STILL_FRAMES and all(f is frames[0] for f in frames)
            picks = range(len(frames) - 1, len(frames)) if still else range(len(frames))  # a still: its settled mesh
            for index in picks:
                references = {"mediapipe": meshes["mediapipe"][index], "facemesh": meshes["facemesh"][index],
                              "truth": truths[index]}
                for name in trackers:
                    for against, reference in references.items():
                        if reference is None or (name == "mediapipe" and against == "mediapipe"):
                            continue
                        label = f"{name} vs {against}"
                        mesh = meshes[name][index]
                        if mesh is None:
                            missed[label] = missed.get(label, 0) + 1
                            continue
                        distance = np.linalg.norm(mesh - reference[:, :2], axis=1)
                        distances.setdefault(label, []).append(distance)
                        if against == "truth":
                            width = max(float(np.ptp(reference[list(FACE_OVAL), 0])), 1e-6)
                            face_pct.setdefault(label, []).append(100 * float(distance.mean()) / width)
        report[group] = {
            label: {"mean_px": float(np.mean(d)), "p95_px": float(np.percentile(np.concatenate(d), 95)),
                    "faces": len(d), "missed": missed.get(label, 0),
                    **({"face_pct_mean": float(np.mean(face_pct[label])), "face_pct_max": float(np.max(face_pct[label]))}
                       if label in face_pct else {})}
            for label, d in sorted(distances.items())
        }
    return report


def _face_mesh(frames: list[np.ndarray]) -> list[np.ndarray | None]:
    """mediapipe's FaceMesh in tracking mode on the whole frames: (468, 2) per frame or None."""
    from mediapipe.python.solutions import face_mesh

    meshes = []
    with face_mesh.FaceMesh(static_image_mode=False, max_num_faces=1) as graph:
        for frame in frames:
            result = graph.process(frame)
            height, width = frame.shape[:2]
            found = result.multi_face_landmarks
            meshes.append(np.array([(p.x * width, p.y * height) for p in found[0].landmark[:468]]) if found else None)
    return meshes


def _tracked(engine: FaceEngine, backend: TrackerName, frames: list[np.ndarray]) -> list[np.ndarray | None]:
    """The one face's (468, 2) mesh in each frame (unsmoothed), None where none was found."""
    tracker = engine.tracker(smoothing=False, backend=backend)
    try:
        meshes = []
        for index, frame in enumerate(frames):
            found = tracker.process(frame, index / 30)
            meshes.append(max(found, key=lambda f: f.area).mesh if found else None)
        return meshes
    finally:
        tracker.close()
