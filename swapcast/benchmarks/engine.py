"""The face-engine benchmark: what one frame costs, stage by stage, on this machine.

Everything is measured in one run, side by side: both resolutions, batch sizes 1/4/16
against batch 1, landmark jitter with smoothing on and off, identity both directions."""

from __future__ import annotations

import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from gpu.analysis.identity import identity_distance
from gpu.engine import FaceEngine
from gpu.swappers.base import stack_feeds
from streamer.media.images import write_image
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.samples import astronaut, grace_hopper, moving_face_frames
from swapcast.config import Config

RESOLUTIONS = ((640, 480), (1280, 720))
BATCH_SIZES = (1, 4, 16)
STAGES = ("track", "identity", "prepare", "run", "paste")
FRAME_BUDGET_MS = 25.0
JITTER_LIMIT_PX = 1.0


def run_engine_benchmark(config: Config, frames: int, report_dir: str | None, as_json: bool) -> int:
    engine = FaceEngine(config.engine.settings())
    options = config.swap.options()
    faces = {"astronaut": astronaut(), "grace_hopper": grace_hopper()}
    print(f"engine: swapper={engine.swapper.name}, runner={type(engine.swapper.runner).__name__}, frames per run={frames}")
    report: dict[str, Any] = {"swapper": engine.swapper.name, "frames": frames}

    source = engine.register_source(faces["astronaut"], label="astronaut")
    report["resolutions"] = {}
    for width, height in RESOLUTIONS:
        clip = moving_face_frames(faces["grace_hopper"], frames, size=(width, height))
        report["resolutions"][f"{width}x{height}"] = _time_frames(engine, source, options, clip, f"{width}x{height}")
    report["batch"] = _batch_throughput(engine, source, options, faces["grace_hopper"])
    report["jitter"] = _jitter(engine, faces["grace_hopper"])
    report["identity"] = _identity(engine, options, faces, Path(report_dir) if report_dir else None)
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {report['peak_rss_mb']:.0f} MB")

    verdicts = _verdicts(report)
    for line in verdicts:
        print(line)
    if report_dir:
        path = Path(report_dir) / "report.json"
        path.write_text(json.dumps(report, indent=2))
        print(f"report: {path} (+ side-by-side pictures)")
    if as_json:
        print(json.dumps(report))
    return 0


def _time_frames(engine: FaceEngine, source, options, clip: list[np.ndarray], label: str) -> dict[str, Any]:
    swapper = FrameSwapper(engine, source, options)
    totals, stages = [], []
    for index, frame in enumerate(clip):
        started = time.perf_counter()
        times = swapper.process(frame.copy(), index / 30.0)
        totals.append((time.perf_counter() - started) * 1000)
        stages.append(times)
        if index % 20 == 19:
            print(f"  {label}: {index + 1}/{len(clip)} frames, median {np.median(totals):.1f} ms", file=sys.stderr, flush=True)
    swapper.close()
    warm = slice(min(5, len(clip) - 1), None)  # the first frames include graph warm-up
    result = {
        "median_ms": float(np.median(totals[warm])),
        "p90_ms": float(np.percentile(totals[warm], 90)),
        "fps": float(1000.0 / np.median(totals[warm])),
        "faces_swapped_share": float(np.mean([s.faces_swapped > 0 for s in stages])),
        "stages_median_ms": {name: float(np.median([getattr(s, name) for s in stages[warm]])) for name in STAGES},
    }
    stage_text = "  ".join(f"{k} {v:.1f}" for k, v in result["stages_median_ms"].items())
    print(f"{label}: median {result['median_ms']:.1f} ms/frame (p90 {result['p90_ms']:.1f}), {result['fps']:.0f} frames/s; "
          f"stages ms: {stage_text}; frames with a swap {100 * result['faces_swapped_share']:.0f}%")
    return result


def _batch_throughput(engine: FaceEngine, source, options, target: np.ndarray) -> dict[str, Any]:
    """Runner alone on stacked rows from real prepared faces: batch N vs N x batch 1."""
    face = engine.analyse_image(target)[0]
    job = engine.swapper.prepare(target.copy(), face, source.payload, options)
    results = {}
    for size in BATCH_SIZES:
        feeds = stack_feeds([job] * size)
        engine.swapper.runner.run(feeds)
        repeats = max(3, 48 // size)
        started = time.perf_counter()
        for _ in range(repeats):
            engine.swapper.runner.run(feeds)
        per_batch = (time.perf_counter() - started) * 1000 / repeats
        results[str(size)] = {"ms_per_batch": per_batch, "ms_per_face": per_batch / size, "faces_per_s": 1000 * size / per_batch}
    base = results["1"]["faces_per_s"]
    for size, row in results.items():
        row["speedup_vs_batch1"] = row["faces_per_s"] / base
        print(f"runner batch {size:>2}: {row['ms_per_batch']:.1f} ms/batch, {row['ms_per_face']:.2f} ms/face, "
              f"{row['faces_per_s']:.0f} faces/s, x{row['speedup_vs_batch1']:.2f} vs batch 1")
    return results


def _jitter(engine: FaceEngine, face: np.ndarray, count: int = 90) -> dict[str, float]:
    """A still face under camera noise: how much the landmarks move from frame to frame.
    Jitter = mean over the 468 points of the RMS distance from their mean position (px)."""
    still = cv2.resize(face, (640, int(640 * face.shape[0] / face.shape[1])))[:480]
    canvas = np.zeros((480, 640, 3), np.uint8)
    canvas[: still.shape[0]] = still
    rng = np.random.default_rng(7)
    noisy = [np.clip(canvas + rng.normal(0, 3.0, canvas.shape), 0, 255).astype(np.uint8) for _ in range(count)]
    result = {}
    for smoothing in (False, True):
        tracker = engine.tracker(smoothing=smoothing)
        meshes = [tracker.process(frame, i / 30.0)[0].mesh for i, frame in enumerate(noisy)]
        tracker.close()
        points = np.stack(meshes[10:])
        rms = np.sqrt(((points - points.mean(0)) ** 2).sum(-1).mean(0))
        result["smoothed_px" if smoothing else "raw_px"] = float(rms.mean())
    print(f"landmark jitter on a still face (noise sigma 3): raw {result['raw_px']:.2f} px, smoothed {result['smoothed_px']:.2f} px")
    return result


def _identity(engine: FaceEngine, options, faces: dict[str, np.ndarray], report_dir: Path | None) -> dict[str, Any]:
    """Swap each sample face onto the other and score with dlib identity distances."""
    if report_dir:
        report_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    identities = {name: engine.identity(image, engine.analyse_image(image)[0]) for name, image in faces.items()}
    for source_name, target_name in (("astronaut", "grace_hopper"), ("grace_hopper", "astronaut")):
        source = engine.register_source(faces[source_name], label=source_name)
        output = faces[target_name].copy()
        FrameSwapper(engine, source, replace(options, smoothing=False)).process_still(output)
        found = engine.analyse_image(output)
        identity = engine.identity(output, found[0]) if found else None
        row = {
            "output_to_source": identity_distance(identity, identities[source_name]) if identity is not None else None,
            "output_to_target": identity_distance(identity, identities[target_name]) if identity is not None else None,
        }
        results[f"{source_name}_onto_{target_name}"] = row
        print(f"identity {source_name} onto {target_name}: d(output, source) {row['output_to_source']:.3f}, "
              f"d(output, target) {row['output_to_target']:.3f}")
        if report_dir:
            write_image(report_dir / f"{source_name}_onto_{target_name}.png", _side_by_side(faces[target_name], output, faces[source_name]))
    return results


def _side_by_side(target: np.ndarray, output: np.ndarray, source: np.ndarray, height: int = 512) -> np.ndarray:
    def fit(image: np.ndarray) -> np.ndarray:
        return cv2.resize(image, (int(image.shape[1] * height / image.shape[0]), height), interpolation=cv2.INTER_AREA)

    return np.hstack([fit(target), fit(output), fit(source)])


def _verdicts(report: dict[str, Any]) -> list[str]:
    vga = report["resolutions"]["640x480"]["median_ms"]
    jitter = report["jitter"]["smoothed_px"]
    lines = [
        f"target: built-in swap <= {FRAME_BUDGET_MS:.0f} ms per 640x480 frame: {vga:.1f} ms -> {'PASS' if vga <= FRAME_BUDGET_MS else 'FAIL'}",
        f"target: jitter on a still frame <= {JITTER_LIMIT_PX:.0f} px: {jitter:.2f} px -> {'PASS' if jitter <= JITTER_LIMIT_PX else 'FAIL'}",
    ]
    for name, row in report["identity"].items():
        ok = row["output_to_source"] is not None and row["output_to_source"] < 0.6 and row["output_to_source"] < row["output_to_target"]
        lines.append(f"target: identity {name}: d(out,src) < 0.6 and < d(out,tgt) -> {'PASS' if ok else 'FAIL'}")
    return lines
