"""The face-engine benchmark: what one frame costs, stage by stage, on this machine.

Everything is measured in one run, side by side: both resolutions, batch sizes 1/4/16
against batch 1, landmark jitter with smoothing on and off, identity both directions; with
``--compare SWAPPER`` another swapper's frame times and identity too, in one table.

With ``--sessions N`` it measures the node's micro-batcher instead: N concurrent 1280x720
single-face sessions (one thread and one ``FrameSwapper`` each, as fast as they can go)
through the batcher and through the same batcher with batching off (max_batch=1), side by
side; then the capacity ramp: 1, 2, 4, ... sessions paced at 30 fps (newest frame only,
older ones dropped) until p99 latency exceeds 60 ms or frames drop.

With ``--trackers mediapipe,graphs`` it compares the video tracker backends instead
(``swapcast.benchmarks.tracking``): tracking ms per frame at 1 and 4 sessions, landmark
error against mediapipe and the pose set's ground truth."""

from __future__ import annotations

import json
import math
import resource
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import cv2
import numpy as np

from gpu.analysis.identity import identity_distance
from gpu.engine import FaceEngine, TrackerName
from gpu.errors import SwapcastError
from gpu.runners.bench import CAPACITY_P99_MS  # one bar for both capacity benchmarks
from gpu.swappers.base import stack_feeds
from streamer.media.images import write_image
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.samples import astronaut, grace_hopper, moving_face_frames
from swapcast.benchmarks.occlusion import occlusion_cost
from swapcast.config import Config

RESOLUTIONS = ((640, 480), (1280, 720))
BATCH_SIZES = (1, 4, 16)
STAGES = ("track", "identity", "prepare", "run", "paste")
FRAME_BUDGET_MS = 25.0
JITTER_LIMIT_PX = 1.0
SESSION_SIZE = (1280, 720)
SESSION_FPS = 30.0
CAPACITY_DROP_SHARE = 0.01  # more dropped frames than this and a step does not hold
CLIP_FRAMES = 48


def run_engine_benchmark(
    config: Config,
    frames: int,
    report_dir: str | None,
    as_json: bool,
    sessions: int | None = None,
    device: str = "auto",
    seconds: float = 6.0,
    max_sessions: int = 64,
    compare: str | None = None,
    trackers: Sequence[str] | None = None,
    processors: bool = False,
    runner: str | None = None,
) -> int:
    """``trackers`` (``--trackers``): compare those tracker backends instead (see
    ``swapcast.benchmarks.tracking``); ``processors`` (``--processors``): measure the user's
    processors instead (``swapcast.benchmarks.processors``); ``runner`` (``--runner``): the
    swap model's runner instead of ``engine.runner``."""
    device_info = _check_device(device)
    settings = config.engine.settings()
    if device != "auto":
        settings = replace(settings, device=device)
    if runner is not None:  # --runner: e.g. triton vs onnxruntime side by side in two runs
        settings = replace(settings, runner=runner)
    if trackers is not None:
        unknown = [name for name in trackers if name not in get_args(TrackerName)]
        if unknown or not trackers:
            raise SwapcastError(f"--trackers: unknown tracker(s) {', '.join(unknown) or '(none given)'}; "
                                f"choose from {', '.join(get_args(TrackerName))}")
    engine = FaceEngine(settings)
    other = FaceEngine(replace(settings, swapper=compare)) if compare is not None and sessions is None else None
    try:
        if processors:
            from swapcast.benchmarks.processors import processors_lines, run_processors_benchmark

            report = run_processors_benchmark(engine, frames)
            print("\n".join(processors_lines(report)))
            if as_json:
                print(json.dumps(report))
            return 0
        if trackers is not None:
            from swapcast.benchmarks.tracking import run_tracking_benchmark

            report = run_tracking_benchmark(engine, trackers, seconds)
            if as_json:
                print(json.dumps(report))
            return 0
        if sessions is not None:
            return _run_sessions_benchmark(engine, config, device_info, sessions, seconds, max_sessions, as_json)
        return _run_frame_benchmark(engine, config, frames, report_dir, as_json, other)
    finally:
        engine.close()
        if other is not None:
            other.close()


def _side_by_side_table(baseline: dict[str, Any], report: dict[str, Any]) -> list[str]:
    """One line per figure: the compared swapper's value, then this run's."""
    old, new = baseline["swapper"], report["swapper"]
    lines = [f"{'side by side':<44} {old:>12} {new:>12}"]
    for resolution in baseline["resolutions"]:
        for label, key in (("median ms/frame", "median_ms"), ("p90 ms/frame", "p90_ms"), ("frames/s", "fps")):
            a, b = baseline["resolutions"][resolution][key], report["resolutions"][resolution][key]
            lines.append(f"{resolution + ' ' + label:<44} {a:>12.1f} {b:>12.1f}")
        for stage in STAGES:
            a = baseline["resolutions"][resolution]["stages_median_ms"][stage]
            b = report["resolutions"][resolution]["stages_median_ms"][stage]
            lines.append(f"{resolution + ' ' + stage + ' ms':<44} {a:>12.1f} {b:>12.1f}")
    for pair in baseline["identity"]:
        for key in ("output_to_source", "output_to_target"):
            a, b = baseline["identity"][pair][key], report["identity"][pair][key]
            lines.append(f"{pair + ' ' + key:<44} {_distance(a):>12} {_distance(b):>12}")
    return lines


def _distance(value: float | None) -> str:
    return "no face" if value is None else f"{value:.3f}"


def _check_device(device: str):
    """The device the run is on; ``cuda`` without a CUDA device is bad input (exit 2)."""
    from gpu.device import detect_device

    info = detect_device()
    if device == "cuda" and info.backend != "cupy":
        raise SwapcastError(f"--device cuda: no CUDA device is usable here ({info.reason}); use --device cpu or auto")
    return info


def _run_frame_benchmark(engine: FaceEngine, config: Config, frames: int, report_dir: str | None, as_json: bool,
                         other: FaceEngine | None = None) -> int:
    """``other`` (``--compare``): a second swapper timed on the same frames, frame by frame
    in turn with this one (so a busy machine slows both alike), and scored for identity."""
    options = config.swap.options()
    faces = {"astronaut": astronaut(), "grace_hopper": grace_hopper()}
    print(f"engine: swapper={engine.swapper.name}, runner={type(engine.swapper.runner).__name__}, frames per run={frames}"
          + (f"; compared with {other.swapper.name}, frames in turn" if other is not None else ""))
    report: dict[str, Any] = {"swapper": engine.swapper.name, "frames": frames}
    engines = [engine] if other is None else [engine, other]
    sources = [each.register_source(faces["astronaut"], label="astronaut") for each in engines]
    source = sources[0]
    report["resolutions"] = {}
    baseline: dict[str, Any] | None = None if other is None else {"swapper": other.swapper.name, "resolutions": {}}
    for width, height in RESOLUTIONS:
        clip = moving_face_frames(faces["grace_hopper"], frames, size=(width, height))
        results = _time_frames(engines, sources, options, clip, f"{width}x{height}")
        report["resolutions"][f"{width}x{height}"] = results[0]
        if baseline is not None:
            baseline["resolutions"][f"{width}x{height}"] = results[1]
    report["occlusion"] = occlusion_cost(engine, source, options, moving_face_frames(faces["grace_hopper"], frames))
    report["batch"] = _batch_throughput(engine, source, options, faces["grace_hopper"])
    report["jitter"] = _jitter(engine, faces["grace_hopper"])
    report["identity"] = _identity(engine, options, faces, Path(report_dir) if report_dir else None)
    if other is not None and baseline is not None:
        baseline["identity"] = _identity(other, options, faces, None)
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {report['peak_rss_mb']:.0f} MB")

    if baseline is not None:
        report["compared"] = baseline
        for line in _side_by_side_table(baseline, report):
            print(line)
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


def _time_frames(engines: list[FaceEngine], sources: list, options, clip: list[np.ndarray], label: str) -> list[dict[str, Any]]:
    """Per engine: frame times over the clip. With several engines each frame goes to each
    in turn, so load from elsewhere on the machine falls on all of them alike."""
    swappers = [FrameSwapper(engine, source, options) for engine, source in zip(engines, sources, strict=True)]
    totals: list[list[float]] = [[] for _ in engines]
    stages: list[list[Any]] = [[] for _ in engines]
    for index, frame in enumerate(clip):
        for k, swapper in enumerate(swappers):
            started = time.perf_counter()
            times = swapper.process(frame.copy(), index / 30.0)
            totals[k].append((time.perf_counter() - started) * 1000)
            stages[k].append(times)
        if index % 20 == 19:
            medians = ", ".join(f"{e.swapper.name} {np.median(t):.1f}" for e, t in zip(engines, totals, strict=True))
            print(f"  {label}: {index + 1}/{len(clip)} frames, median ms {medians}", file=sys.stderr, flush=True)
    for swapper in swappers:
        swapper.close()
    warm = slice(min(5, len(clip) - 1), None)  # the first frames include graph warm-up
    results = []
    for engine, times_ms, frame_stages in zip(engines, totals, stages, strict=True):
        result = {
            "median_ms": float(np.median(times_ms[warm])),
            "p90_ms": float(np.percentile(times_ms[warm], 90)),
            "fps": float(1000.0 / np.median(times_ms[warm])),
            "faces_swapped_share": float(np.mean([s.faces_swapped > 0 for s in frame_stages])),
            "stages_median_ms": {name: float(np.median([getattr(s, name) for s in frame_stages[warm]])) for name in STAGES},
        }
        stage_text = "  ".join(f"{k} {v:.1f}" for k, v in result["stages_median_ms"].items())
        prefix = f"{label} {engine.swapper.name}" if len(engines) > 1 else label
        print(f"{prefix}: median {result['median_ms']:.1f} ms/frame (p90 {result['p90_ms']:.1f}), {result['fps']:.0f} frames/s; "
              f"stages ms: {stage_text}; frames with a swap {100 * result['faces_swapped_share']:.0f}%")
        results.append(result)
    return results


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
        print(f"identity {source_name} onto {target_name}: d(output, source) {_distance(row['output_to_source'])}, "
              f"d(output, target) {_distance(row['output_to_target'])}")
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


# -- sessions: batched vs unbatched, and the capacity ramp -------------------------------------------


def _run_sessions_benchmark(
    engine: FaceEngine, config: Config, device_info, sessions: int, seconds: float, max_sessions: int, as_json: bool
) -> int:
    if sessions < 1:
        raise SwapcastError("--sessions must be at least 1")
    options = config.swap.options()
    settings = engine.settings
    width, height = SESSION_SIZE
    print(f"engine: swapper={engine.swapper.name}, runner={type(engine.swapper.runner).__name__}, "
          f"device {device_info.backend} ({device_info.name}; {device_info.reason}), "
          f"batcher max_batch={settings.max_batch} max_queue_delay_ms={settings.max_queue_delay_ms:g}")
    faces = {"astronaut": astronaut(), "grace_hopper": grace_hopper()}
    source = engine.register_source(faces["astronaut"], label="astronaut")
    print(f"preparing {width}x{height} moving-face clips ...", file=sys.stderr, flush=True)
    clips = [moving_face_frames(faces[name], CLIP_FRAMES, size=SESSION_SIZE, seed=k) for k, name in enumerate(("grace_hopper", "astronaut"))]
    report: dict[str, Any] = {
        "swapper": engine.swapper.name,
        "device": {"backend": device_info.backend, "name": device_info.name, "reason": device_info.reason},
        "resolution": f"{width}x{height}",
        "sessions": sessions,
        "seconds": seconds,
    }

    print(f"{sessions} concurrent {width}x{height} single-face sessions, each a thread with its own FrameSwapper and clip, "
          f"as fast as possible, {seconds:g} s per run:")
    runs = {}
    for label, max_batch in (("batched", settings.max_batch), ("unbatched", 1)):
        engine.configure_batcher(max_batch=max_batch, max_queue_delay_ms=settings.max_queue_delay_ms)
        runs[label] = _throughput(engine, source, options, clips, sessions, seconds)
        _print_run(label, runs[label])
    engine.configure_batcher(max_batch=settings.max_batch, max_queue_delay_ms=settings.max_queue_delay_ms)
    unbatched = runs["unbatched"]["faces_per_s"]
    ratio = runs["batched"]["faces_per_s"] / unbatched if unbatched else None
    runs["batched_vs_unbatched"] = ratio
    note = ""
    if device_info.backend != "cupy":
        note = " (ONNX Runtime on a CPU gains nothing from batching: expect ~1)"
    print(f"  batched / unbatched faces/s: x{ratio:.2f}{note}" if ratio is not None else "  batched / unbatched: n/a")
    report["throughput"] = runs

    print(f"capacity: {width}x{height} at {SESSION_FPS:g} fps per session, paced, newest frame only "
          f"(held = p99 <= {CAPACITY_P99_MS:g} ms and <= {100 * CAPACITY_DROP_SHARE:g}% frames dropped), {seconds:g} s per step:")
    steps = []
    held = 0
    count = 1
    while count <= max_sessions:
        step = _paced(engine, source, options, clips, count, seconds)
        step["held"] = (step["latency_p99_ms"] is not None and step["latency_p99_ms"] <= CAPACITY_P99_MS
                        and step["dropped_share"] <= CAPACITY_DROP_SHARE)
        steps.append(step)
        print(f"  {count:>3} session(s): fps out {step['fps_out_per_session']:.1f}/session, latency p50 "
              f"{_ms(step['latency_p50_ms'])} p99 {_ms(step['latency_p99_ms'])}, dropped {100 * step['dropped_share']:.1f}%, "
              f"device busy {step['batcher']['device_busy_pct']:.0f}%, mean batch {step['batcher']['mean_batch_size']:.2f} "
              f"-> {'held' if step['held'] else 'NOT held'}")
        if not step["held"]:
            break
        held = count
        count *= 2
    report["capacity"] = {"p99_limit_ms": CAPACITY_P99_MS, "fps": SESSION_FPS, "steps": steps, "max_sessions_held": held}
    print(f"largest number of {width}x{height}@{SESSION_FPS:g} single-face sessions held with p99 <= {CAPACITY_P99_MS:g} ms: {held}"
          + (f" (stopped at the --max-sessions cap {max_sessions})" if count > max_sessions else ""))
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {report['peak_rss_mb']:.0f} MB")
    if as_json:
        print(json.dumps(report))
    return 0


def _ms(value: float | None) -> str:
    return f"{value:.1f} ms" if value is not None else "n/a"


def _print_run(label: str, run: dict[str, Any]) -> None:
    batcher = run["batcher"]
    histogram = ", ".join(f"{size}: {count}" for size, count in batcher["batch_size_histogram"].items())
    print(f"  {label:<9} (max_batch {batcher['max_batch']:>2}): {run['faces_per_s']:.1f} faces/s, {run['frames_per_s']:.1f} frames/s; "
          f"frame latency p50 {_ms(run['latency_p50_ms'])} p99 {_ms(run['latency_p99_ms'])}; device busy "
          f"{batcher['device_busy_pct']:.0f}%; queue delay p50 {_ms(batcher['queue_delay_p50_ms'])} p99 "
          f"{_ms(batcher['queue_delay_p99_ms'])}; batch sizes {{{histogram}}}; dropped by batcher {run['dropped_by_batcher']}")


def _session_swappers(engine: FaceEngine, source, options, clips, count: int) -> list[FrameSwapper]:
    """One FrameSwapper per session, warmed up on its own clip (tracker found the face)."""
    swappers = []
    for k in range(count):
        swapper = FrameSwapper(engine, source, options, session_id=f"bench-{k}")
        clip = clips[k % len(clips)]
        for index in range(2):
            swapper.process(clip[(7 * k + index) % len(clip)].copy(), index / SESSION_FPS)
        swappers.append(swapper)
    return swappers


def run_session_threads(count: int, body) -> float:
    """Start ``body(k, t0)`` on one thread per session at the same instant; wall seconds."""
    start = threading.Barrier(count + 1)
    t0_box: list[float] = []
    errors: list[BaseException] = []

    def thread_main(k: int) -> None:
        start.wait()
        try:
            body(k, t0_box[0])
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=thread_main, args=(k,), name=f"bench-session-{k}") for k in range(count)]
    for thread in threads:
        thread.start()
    t0_box.append(time.perf_counter() + 0.05)
    start.wait()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - t0_box[0]


def _measure_sessions(engine: FaceEngine, swappers, body, latencies: list[list[float]]) -> tuple[float, dict, dict]:
    """Run ``body`` on one thread per session with fresh batcher metrics, close the
    swappers, and summarise every session's latencies: (wall s, batcher metrics, summary)."""
    engine.batcher.reset_metrics()
    wall = run_session_threads(len(swappers), body)
    batcher = engine.batcher.metrics()
    for swapper in swappers:
        swapper.close()
    every = np.concatenate([np.array(x) for x in latencies]) if any(latencies) else np.array([])
    summary = {
        "frames": len(every),
        "latency_p50_ms": float(np.percentile(every, 50)) if len(every) else None,
        "latency_p99_ms": float(np.percentile(every, 99)) if len(every) else None,
    }
    return wall, batcher, summary


def _throughput(engine: FaceEngine, source, options, clips, count: int, seconds: float) -> dict[str, Any]:
    swappers = _session_swappers(engine, source, options, clips, count)
    latencies: list[list[float]] = [[] for _ in range(count)]
    faces = [0] * count
    dropped = [0] * count

    def body(k: int, t0: float) -> None:
        while time.perf_counter() < t0:
            time.sleep(0.001)
        clip, swapper = clips[k % len(clips)], swappers[k]
        index = 2
        while time.perf_counter() < t0 + seconds:
            frame = clip[(7 * k + index) % len(clip)].copy()
            started = time.perf_counter()
            times = swapper.process(frame, index / SESSION_FPS)
            latencies[k].append((time.perf_counter() - started) * 1000)
            faces[k] += times.faces_swapped
            dropped[k] += times.dropped_by_batcher
            index += 1

    wall, batcher, summary = _measure_sessions(engine, swappers, body, latencies)
    return {
        "sessions": count,
        "faces_per_s": sum(faces) / wall,
        "frames_per_s": summary.pop("frames") / wall,
        **summary,
        "dropped_by_batcher": sum(dropped),
        "batcher": batcher,
    }


def _paced(engine: FaceEngine, source, options, clips, count: int, seconds: float) -> dict[str, Any]:
    """Each session's frames arrive every 1/30 s (sessions spread across the period); a
    session swaps the newest arrived frame and drops the older ones (the live policy)."""
    swappers = _session_swappers(engine, source, options, clips, count)
    period = 1.0 / SESSION_FPS
    frames_total = int(seconds * SESSION_FPS)
    latencies: list[list[float]] = [[] for _ in range(count)]
    dropped = [0] * count

    def body(k: int, t0: float) -> None:
        clip, swapper = clips[k % len(clips)], swappers[k]
        offset = t0 + period * k / count
        next_index = 0
        while next_index < frames_total:
            now = time.perf_counter()
            newest = min(math.floor((now - offset) / period), frames_total - 1)
            if newest < next_index:
                time.sleep(max(offset + next_index * period - now, 0.0))
                continue
            dropped[k] += newest - next_index
            frame = clip[(7 * k + 2 + newest) % len(clip)].copy()
            times = swapper.process(frame, (2 + newest) * period)
            if times.dropped_by_batcher:
                dropped[k] += 1
            else:
                latencies[k].append((time.perf_counter() - (offset + newest * period)) * 1000)
            next_index = newest + 1

    wall, batcher, summary = _measure_sessions(engine, swappers, body, latencies)
    return {
        "sessions": count,
        "fps_out_per_session": summary.pop("frames") / count / wall,
        **summary,
        "dropped_share": sum(dropped) / (frames_total * count),
        "batcher": batcher,
    }
