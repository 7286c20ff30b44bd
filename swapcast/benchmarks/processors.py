"""What each user-supplied processor costs per frame (``swapcast bench engine --processors``).

Measures the processors the engine loaded from ``--models DIR`` on a moving 640x480 face,
one face per frame, the way a stream calls them: the occluder and the parser through the
swappers' keep-mask hook (the swapper's crop re-cut into theirs), the enhancer on the
swapped frame, the content gate on one frame per ``content_sample_s`` (its cost per frame is
spread over the frames in between at 30 fps). All of it runs through each processor's own
micro-batcher, as in the node. With generated twins (the tests' stand-ins, a near-free
network) the numbers are the adapter's own cost -- crops, pre- and post-processing, masks,
paste-back, the runner call; with the real files they include the network.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from gpu.align import arcface_template, estimate_similarity
from gpu.engine import FaceEngine
from gpu.errors import SwapcastError
from gpu.kernels.warp import crop_faces
from streamer.samples import astronaut, moving_face_frames

STREAM_FPS = 30.0
SWAPPER_CROP = 128  # the keep-mask hook is measured on an inswapper-sized crop (the smallest a swapper hands it)


def run_processors_benchmark(engine: FaceEngine, frames: int) -> dict[str, Any]:
    """Per processor: ms per face (median, p90) and ms per frame of a 30 fps stream."""
    processors = engine.processors
    if not processors.loaded:
        raise SwapcastError("bench engine --processors: no processor files in the models folder; pass --models DIR "
                            "with xseg_*, bisenet_resnet_*, gfpgan_1.4 / codeformer / gpen_bfr_*, or open_nsfw .onnx")
    clip = moving_face_frames(astronaut(), max(frames, 8), (640, 480))
    tracker = engine.tracker()
    faces = [tracker.process(frame, index / STREAM_FPS) for index, frame in enumerate(clip)]
    tracker.close()
    clip = [(frame, found[:1]) for frame, found in zip(clip, faces, strict=True) if found]
    if not clip:
        raise SwapcastError("bench engine --processors: the tracker found no face in the sample clip")
    report: dict[str, Any] = {"frames": len(clip), "processors": {}}
    for processor in processors.loaded:
        timings = np.array([_time_one(engine, processor, frame, face) for frame, [face] in clip])
        per_face, cpu = timings[:, 0], timings[:, 1]
        per_frame = float(np.median(per_face))
        if processor is processors.gate:
            per_frame /= STREAM_FPS * processors.settings.content_sample_s
        report["processors"][processor.kind] = {
            "model": processor.path.stem,
            "median_ms": float(np.median(per_face)),
            "p90_ms": float(np.percentile(per_face, 90)),
            "cpu_ms": float(np.median(cpu)),  # CPU time of the whole process: steadier than wall time on a busy machine
            "ms_per_frame_at_30fps": per_frame,
            "fps_alone": 1000.0 / float(np.median(per_face)),
        }
    return report


def _time_one(engine: FaceEngine, processor: Any, frame: np.ndarray, face) -> tuple[float, float]:
    """(wall ms, CPU ms) of one call."""
    processors = engine.processors
    work = frame.copy()
    started, cpu = time.perf_counter(), time.process_time()
    if processor is processors.gate:
        processors.gate.score(work, "bench")
    elif processor is processors.enhancer:
        processor.enhance(work, [face], "bench", processors.settings.enhancer_blend)
    else:
        matrix = estimate_similarity(face.kps, arcface_template(SWAPPER_CROP))
        crop = crop_faces([work], matrix[None], SWAPPER_CROP)[0]
        processor(crop, face, matrix)
    return (time.perf_counter() - started) * 1000.0, (time.process_time() - cpu) * 1000.0


def processors_lines(report: dict[str, Any]) -> list[str]:
    lines = [f"processors on {report['frames']} frames of a moving 640x480 face, one face per frame",
             f"{'processor':<14} {'model':<20} {'ms/face p50':>11} {'p90':>7} {'CPU ms':>7} {'ms/frame @30fps':>16} "
             f"{'fps alone':>10}"]
    for kind, entry in report["processors"].items():
        lines.append(f"{kind:<14} {entry['model']:<20} {entry['median_ms']:>11.2f} {entry['p90_ms']:>7.2f} {entry['cpu_ms']:>7.2f} "
                     f"{entry['ms_per_frame_at_30fps']:>16.2f} {entry['fps_alone']:>10.0f}")
    lines.append("content_gate: one frame per content_sample_s, spread over the frames between")
    return lines
