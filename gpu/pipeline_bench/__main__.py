"""``python -m gpu.pipeline_bench --carry .gpu-carry --json out.json``: the whole-pipeline
benchmark of a node (see ``gpu.pipeline_bench.stages``) for N single-face 1280x720
sessions at 30 fps, for each swapper (the synthetic inswapper-class model, the built-in
mesh3d swapper):

- session counts swept upwards until a tick's p99 passes 60 ms (or ticks are dropped, or
  faces are lost), then bisected once or twice: the largest N held;
- batched (one launch / model call per stage for all sessions) and unbatched (one session
  at a time) side by side at every N, and their ratio;
- per stage: host ms (the Python that launches it) and device ms (CUDA events) per tick;
- host CPU ms per frame (process CPU time over the measured ticks / frames);
- GPU memory: Torch's allocator and CuPy's pool at each N (peak), and per session (the
  slope of the peaks over N; the intercept is the models and workspace).

It keeps to ``--budget-s`` (the GPU check gives it a share of one device call) and
rewrites its JSON after every point, so a run cut short still reports what it measured.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpu.analysis.landmarks import five_points
from gpu.device import DeviceInfo, select_device
from gpu.options import SwapOptions
from gpu.pipeline_bench.pipeline import NodeTick, Swap, host_rings
from gpu.pipeline_bench.scene import Head, load_heads, render_rings
from gpu.pipeline_bench.stages import STAGES, InswapperStage, Mesh3dStage, infer, make_tracking
from gpu.runners.bench import CAPACITY_P99_MS
from gpu.runners.select import make_runner
from gpu.tracking import face_roi
from gpu.types import Face

GPU_COUNTS = (1, 4, 16, 32, 48, 64, 96, 128, 160, 192, 256)
MIN_FACES_PER_FRAME = 0.9  # a point where the tracker lost faces did less work: not "held"
SWAPPERS = ("synthetic_inswapper", "builtin_mesh3d")


@dataclass
class Settings:
    fps: float
    seconds: float
    min_ticks: int
    warmup: int


def shortfalls(row: dict[str, Any], fps: float) -> list[str]:
    """Why a measured point is not held (empty: held): tick p99 over the capacity limit,
    ticks dropped (fewer than 97% of ``fps`` ran), faces lost by the tracker."""
    reasons = []
    if row["p99_ms"] > CAPACITY_P99_MS:
        reasons.append(f"tick p99 {row['p99_ms']} ms > {CAPACITY_P99_MS:g}")
    if row["ticks_per_s"] < 0.97 * fps:
        reasons.append(f"{row['ticks_per_s']} ticks/s < {0.97 * fps:.1f}")
    if row["faces_per_frame"] < MIN_FACES_PER_FRAME:
        reasons.append(f"{row['faces_per_frame']} faces swapped per frame < {MIN_FACES_PER_FRAME}")
    return reasons


def measure(node: NodeTick, batched: bool, settings: Settings, max_seconds: float) -> dict[str, Any]:
    """Ticks paced at ``fps`` (a late tick makes the next start late, never queue) for
    ``settings.seconds`` and at least ``min_ticks`` ticks, at most ``max_seconds``."""
    node.reset()
    for tick in range(settings.warmup):
        node.run(tick, batched)
    interval = 1.0 / settings.fps
    walls: list[float] = []
    host = dict.fromkeys(STAGES, 0.0)
    device = dict.fromkeys(STAGES, 0.0)
    faces_before = node.faces_swapped
    cpu_before = time.process_time()
    start = next_tick = time.perf_counter()
    tick = settings.warmup
    while True:
        elapsed = time.perf_counter() - start
        if len(walls) >= settings.min_ticks and (elapsed >= settings.seconds or elapsed >= max_seconds):
            break
        if elapsed >= max_seconds and len(walls) >= 2:
            break
        now = time.perf_counter()
        if now < next_tick:
            time.sleep(next_tick - now)
        began = time.perf_counter()
        node.run(tick, batched)
        walls.append(time.perf_counter() - began)
        for stage, seconds in node.clock.host.items():
            host[stage] += seconds
        for stage, seconds in (node.clock.device() or {}).items():
            device[stage] += seconds
        tick += 1
        next_tick += interval
        if time.perf_counter() > next_tick:
            next_tick = time.perf_counter()
    elapsed = time.perf_counter() - start
    cpu = time.process_time() - cpu_before
    ms = np.asarray(walls) * 1000
    ticks, frames = len(walls), len(walls) * node.sessions
    row: dict[str, Any] = {
        "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2),
        "max_ms": round(float(ms.max()), 2),
        "ticks": ticks,
        "ticks_per_s": round(ticks / elapsed, 1),
        "on_time_share": round(float(np.mean(ms <= interval * 1000)), 3),
        "host_cpu_ms_per_frame": round(cpu * 1000 / frames, 3),
        "faces_per_frame": round((node.faces_swapped - faces_before) / frames, 3),
        "tracking_iou": node.tracking_iou(tick - 1),
        "stage_host_ms_per_tick": {k: round(v * 1000 / ticks, 3) for k, v in host.items()},
    }
    if node.clock.events:
        row["stage_device_ms_per_tick"] = {k: round(v * 1000 / ticks, 3) for k, v in device.items()}
        row["gpu_busy_pct"] = round(100 * sum(device.values()) / elapsed, 1)
    return row


def memory_snapshot(cuda: bool) -> dict[str, float] | None:
    """MiB held: Torch's allocator (now, peak since the last reset), CuPy's device pool, and
    the whole device (the driver's view, CUDA contexts included)."""
    if not cuda:
        return None
    import cupy
    import torch

    free, total = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    mib = 2**20
    return {
        "torch_allocated_mib": round(torch.cuda.memory_allocated() / mib, 1),
        "torch_peak_mib": round(torch.cuda.max_memory_allocated() / mib, 1),
        "torch_reserved_mib": round(torch.cuda.memory_reserved() / mib, 1),
        "cupy_pool_used_mib": round(pool.used_bytes() / mib, 1),
        "cupy_pool_total_mib": round(pool.total_bytes() / mib, 1),
        "device_used_mib": round((total - free) / mib, 1),
    }


def per_session_memory(points: dict[str, dict[str, Any]]) -> dict[str, float] | None:
    """Least-squares line of (Torch peak + CuPy pool total) over N: slope = MiB per session,
    intercept = what does not grow with sessions (models, workspaces)."""
    rows = [(int(n), p["memory"]["torch_peak_mib"] + p["memory"]["cupy_pool_total_mib"])
            for n, p in points.items() if p.get("memory")]
    if len({n for n, _ in rows}) < 2:
        return None
    counts, mib = np.array(rows, dtype=np.float64).T
    slope, intercept = np.polyfit(counts, mib, 1)
    return {"mib_per_session": round(float(slope), 1), "fixed_mib": round(float(intercept), 1),
            "points": {str(int(n)): round(float(m), 1) for n, m in rows}}


def reset_peak(cuda: bool) -> None:
    if cuda:
        import torch

        torch.cuda.reset_peak_memory_stats()


def warm_buckets(runner, sample: dict[str, np.ndarray], xp) -> None:
    """Capture every CUDA-graph bucket now, not in the middle of a measured tick."""
    for size in getattr(runner, "buckets", ()):
        infer(runner, {k: xp.asarray(np.repeat(v[:1], size, 0)) for k, v in sample.items()})


def register_mesh3d_source(swapper, head: Head, landmarker, cuda: bool):
    """The mesh3d source from a sample photo: its mesh found by the converted landmark graph
    (twice: the second ROI follows the first mesh), then ``register`` on the host."""
    x0, y0, x1, y1 = head.box
    rois = np.array([[(x0 + x1) / 2, (y0 + y1) / 2, max(x1 - x0, y1 - y0) * face_roi.ROI_SCALE, 0.0]], np.float32)
    photo = head.photo
    if cuda:
        import cupy

        photo = cupy.asarray(photo)
    for _ in range(2):
        raw = infer(landmarker, {"input": face_roi.landmark_input([photo], rois)})[0]
        mesh = np.asarray(face_roi.unproject_landmarks(raw, rois).get() if cuda else face_roi.unproject_landmarks(raw, rois))
        rois = face_roi.roi_from_landmarks(mesh)
    points = mesh[0]
    flat = np.ascontiguousarray(points[:, :2])
    face = Face(box=np.concatenate([flat.min(0), flat.max(0)]), kps=five_points(flat), mesh=flat,
                depth=np.ascontiguousarray(points[:, 2]))
    return swapper.register(head.photo, face)


class Bench:
    """Models, scene and the sweep of one run."""

    def __init__(self, args: argparse.Namespace, info: DeviceInfo, report: dict[str, Any], write) -> None:
        self.args, self.info, self.report, self.write = args, info, report, write
        self.cuda = info.is_cuda
        self.xp = np
        if self.cuda:
            import cupy

            self.xp = cupy
        self.settings = Settings(args.fps, args.seconds, args.min_ticks, args.warmup)
        self.options = SwapOptions()
        self._warmed: set[int] = set()

    def runner(self, model, name: str):
        started = time.perf_counter()
        runner = make_runner(model, device=self.info, name=name)
        self.report["models"][name] = {"runner": runner.choice.runner, "runner_device": runner.choice.device,
                                       "why": runner.choice.reason, "build_s": round(time.perf_counter() - started, 2)}
        return runner

    def setup(self) -> None:
        args, carry = self.args, Path(self.args.carry)
        started = time.perf_counter()
        self.heads = load_heads(carry / "faces.npz")
        rings = render_rings(self.heads, args.variants, args.ring_frames)
        self.rings, self.truth = host_rings(rings, self.cuda), [ring.boxes for ring in rings]
        self.report["scene"] = {"frame": "1280x720 I420", "variants": args.variants, "ring_frames": args.ring_frames,
                                "heads": [h.name for h in self.heads], "render_s": round(time.perf_counter() - started, 2)}
        self.tracking = make_tracking(carry / "models", self.runner, args.detect_every)
        self.detector, self.landmarker = self.tracking.detector, self.tracking.landmarker

    def swap_stage(self, name: str, sessions: int) -> Swap:
        if name == "synthetic_inswapper":
            if not hasattr(self, "inswapper_runner"):
                from gpu.models.synthetic import build_synthetic_inswapper, flops_per_face

                model = build_synthetic_inswapper(**({"width": 8, "blocks": 2} if self.args.small else {}))
                self.inswapper_runner = self.runner(model, name)
                self.report["models"][name]["gflop_per_face"] = round(flops_per_face(model) / 1e9, 1)
            return InswapperStage(self.inswapper_runner, sessions, self.options)
        if not hasattr(self, "mesh3d"):
            from gpu.swappers.mesh3d import Mesh3dSwapper
            from gpu.swappers.mesh3d_graph import build_mesh3d_swap_graph

            self.mesh3d = Mesh3dSwapper(runner=self.runner(build_mesh3d_swap_graph(), name))
            self.mesh3d_source = register_mesh3d_source(self.mesh3d, self.heads[-1], self.landmarker, self.cuda)
        return Mesh3dStage(self.mesh3d, self.mesh3d_source, self.options)

    def warm(self) -> None:
        """Every runner's CUDA-graph buckets, captured before anything is timed."""
        runners = [r for r in (self.detector, self.landmarker, getattr(self, "inswapper_runner", None)) if r is not None]
        if not self.cuda or all(id(r) in self._warmed for r in runners):
            return
        self._warmed.update(id(r) for r in runners)
        started = time.perf_counter()
        warm_buckets(self.detector, {"input": np.zeros((1, 3, 192, 192), np.float32)}, self.xp)
        warm_buckets(self.landmarker, {"input": np.zeros((1, 3, 192, 192), np.float32)}, self.xp)
        if hasattr(self, "inswapper_runner"):
            warm_buckets(self.inswapper_runner, {"target": np.zeros((1, 3, 128, 128), np.float32),
                                                 "source": np.full((1, 512), 512**-0.5, np.float32)}, self.xp)
        self.report["graph_capture_s"] = round(self.report.get("graph_capture_s", 0.0) + time.perf_counter() - started, 2)

    def sweep(self, name: str, deadline: float) -> dict[str, Any]:
        """Batched and unbatched at each N, upwards until batched fails, then bisected."""
        args, fps = self.args, self.args.fps
        entry: dict[str, Any] = {"points": {}, "stopped": None}
        self.report["swappers"][name] = entry
        counts = [int(n) for n in args.sessions.split(",")] if args.sessions else [n for n in GPU_COUNTS if n <= args.max_sessions]
        last_held, first_failed, unbatched_held = 0, None, True
        cost = 0.0
        queue = list(counts)
        bisections = 0
        while queue:
            sessions = queue.pop(0)
            remaining = deadline - time.perf_counter()
            if remaining < max(cost * 1.6, 2.5 * args.seconds):
                entry["stopped"] = f"budget: {remaining:.0f} s left before N={sessions}"
                break
            began = time.perf_counter()
            node = NodeTick(self.rings, self.truth, sessions, self.tracking, self.swap_stage(name, sessions), self.cuda, args.layout)
            self.warm()
            reset_peak(self.cuda)
            point: dict[str, Any] = {"batched": measure(node, True, self.settings, max(args.seconds, remaining / 4))}
            point["memory"] = memory_snapshot(self.cuda)
            # one session at a time: measured fully while it still holds, briefly after
            budget = args.seconds if unbatched_held else args.seconds / 2
            point["unbatched"] = measure(node, False, self.settings, min(budget, max(0.5, remaining / 4)))
            point["batched_over_unbatched"] = round(point["unbatched"]["p50_ms"] / point["batched"]["p50_ms"], 2)
            point["not_held_because"] = {mode: shortfalls(point[mode], fps) for mode in ("batched", "unbatched")}
            point["held"] = {mode: not reasons for mode, reasons in point["not_held_because"].items()}
            unbatched_held = unbatched_held and point["held"]["unbatched"]
            entry["points"][str(sessions)] = point
            del node
            cost = time.perf_counter() - began
            b = point["batched"]
            print(f"{name} N={sessions}: batched p50 {b['p50_ms']} p99 {b['p99_ms']} ms ({b['ticks_per_s']} ticks/s, "
                  f"{b['faces_per_frame']} faces/frame, host {b['host_cpu_ms_per_frame']} ms/frame); unbatched p50 "
                  f"{point['unbatched']['p50_ms']} ms; x{point['batched_over_unbatched']} [{cost:.1f} s]", file=sys.stderr)
            if point["held"]["batched"]:
                last_held = max(last_held, sessions)
            else:
                first_failed = sessions if first_failed is None else min(first_failed, sessions)
                if not args.sessions:  # an explicit list is measured whole
                    queue = []
            if not args.sessions and not queue and first_failed is not None and bisections < args.bisect \
                    and first_failed - last_held > max(2, last_held // 8):
                queue = [(last_held + first_failed) // 2]
                bisections += 1
            entry["max_sessions_held"] = self._max_held(entry["points"])
            entry["memory_per_session"] = per_session_memory(entry["points"])
            self.write()
        return entry

    @staticmethod
    def _max_held(points: dict[str, dict[str, Any]]) -> dict[str, int]:
        """Per mode, the largest N held with every smaller N measured also held."""
        result = {}
        for mode in ("batched", "unbatched"):
            best = 0
            for n in sorted(points, key=int):
                if not points[n]["held"][mode]:
                    break
                best = int(n)
            result[mode] = best
        return result


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The numbers the issue asks for, per swapper, at the largest N held batched."""
    out = {}
    for name, entry in report.get("swappers", {}).items():
        points = entry.get("points", {})
        if not points:
            continue
        best = entry.get("max_sessions_held", {}).get("batched", 0)
        at = str(best) if str(best) in points else min(points, key=int)
        row = points[at]["batched"]
        sessions = int(at)
        out[name] = {
            "sessions_held_720p30": entry.get("max_sessions_held"),
            "at_sessions": sessions,
            "batched_over_unbatched": points[at]["batched_over_unbatched"],
            "tick_p50_p99_ms": [row["p50_ms"], row["p99_ms"]],
            "host_cpu_ms_per_frame": row["host_cpu_ms_per_frame"],
            "gpu_mib_per_session": (entry.get("memory_per_session") or {}).get("mib_per_session"),
            "stage_device_ms_per_frame": {k: round(v / sessions, 3) for k, v in row.get("stage_device_ms_per_tick", {}).items()},
            "stage_host_ms_per_frame": {k: round(v / sessions, 3) for k, v in row["stage_host_ms_per_tick"].items()},
            "faces_per_frame": row["faces_per_frame"],
            "tracking_iou": row["tracking_iou"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu.pipeline_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--carry", default=".gpu-carry", help="folder with models/*.onnx and faces.npz")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--sessions", help="session counts to measure, e.g. 1,2 (default: 1, 4, 16, 32, ... up to --max-sessions, bisected)")
    parser.add_argument("--max-sessions", type=int, default=256)
    parser.add_argument("--swappers", default=",".join(SWAPPERS))
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=2.0, help="per measured point and mode")
    parser.add_argument("--min-ticks", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--detect-every", type=int, default=8, help="frames between detections per session (staggered)")
    parser.add_argument("--layout", choices=["i420", "nv12"], default="nv12", help="what the encoder takes")
    parser.add_argument("--variants", type=int, default=4)
    parser.add_argument("--ring-frames", type=int, default=64)
    parser.add_argument("--bisect", type=int, default=2, help="bisection steps after the first N not held")
    parser.add_argument("--budget-s", type=float, default=240.0, help="the whole run, setup included")
    parser.add_argument("--small", action="store_true", help="a small synthetic model (CPU dry runs)")
    parser.add_argument("--json", metavar="FILE", required=True)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    deadline = started + args.budget_s

    info = select_device(args.device)
    report: dict[str, Any] = {
        "device": {"kind": info.kind, "name": info.name, "memory_gb": info.memory_gb, "reason": info.reason},
        "config": {k: v for k, v in vars(args).items() if k != "json"},
        "capacity_rule": f"tick p99 <= {CAPACITY_P99_MS} ms, >= 97% of {args.fps} ticks/s, >= {MIN_FACES_PER_FRAME} faces swapped per frame",
        "models": {}, "swappers": {},
    }
    if info.is_cuda:
        import torch

        report["device"].update(torch=torch.__version__, cuda=torch.version.cuda)
    target = Path(args.json)

    def write() -> None:
        report["headline"] = headline(report)
        report["elapsed_s"] = round(time.perf_counter() - started, 1)
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(report, indent=2))
        os.replace(temporary, target)

    bench = Bench(args, info, report, write)
    bench.setup()
    report["setup_s"] = round(time.perf_counter() - started, 1)
    write()
    names = [n for n in args.swappers.split(",") if n]
    unknown = set(names) - set(SWAPPERS)
    if unknown:
        parser.error(f"unknown swappers {sorted(unknown)} (known: {', '.join(SWAPPERS)})")
    # the headline model gets most of the time; later swappers what is left
    shares = {"synthetic_inswapper": 0.65, "builtin_mesh3d": 1.0}
    failed = []
    for name in names:
        remaining = deadline - time.perf_counter()
        try:
            bench.sweep(name, time.perf_counter() + remaining * (shares[name] if name != names[-1] else 1.0))
        except Exception:  # one swapper's failure must not cost the other's numbers (one device call)
            report["swappers"].setdefault(name, {})["error"] = traceback.format_exc(limit=8)
            print(report["swappers"][name]["error"], file=sys.stderr)
            failed.append(name)
    write()
    print(json.dumps(report["headline"], indent=2), file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
