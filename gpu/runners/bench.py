"""GPU benchmark of the compute plane alone (needs gpu/ only: numpy, onnx, torch, CuPy):
``python -m gpu.runners.bench --device cuda --sessions 32 --json out.json``.

What it measures, for the synthetic inswapper (180 GFLOP/face) and the built-in mesh graph
(256 px crops), through the runner ``make_runner`` picks:
- batch 1 / 8 / 32: per-call latency p50 / p99, faces per second, achieved TFLOP/s;
- sessions 1 -> N: N sessions each sending one face per frame at ``--fps``, batched per tick
  (what the micro-batcher does when every session's face is ready): latency p50 / p99, the
  share of ticks finished inside the frame interval, and GPU busy % (kernel time measured
  with CUDA events / wall time);
- the device kernels at 1280x720: NV12 -> RGB and RGB -> I420 for a batch of frames, crop of 32 faces.
The whole node pipeline (tracking, swap, paste-back, YUV, batched vs unbatched, sessions
held) is ``python -m gpu.pipeline_bench``; ``swapcast bench engine`` measures the engine
where the media stack is installed. Both this one and the pipeline run on a bare GPU image.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpu.models.synthetic import build_synthetic_inswapper, flops_per_face
from gpu.runners.select import make_runner
from gpu.swappers.mesh_graph import build_mesh_swap_graph

CAPACITY_P99_MS = 60.0  # the bar for "held" (here and in the pipeline and engine benchmarks): 720p30 single-face sessions with p99 <= 60 ms


def _percentiles(samples: list[float]) -> dict[str, float]:
    values = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(values, 50)), 3), "p99_ms": round(float(np.percentile(values, 99)), 3), "n": len(samples)}


class _Clock:
    """Wall time per call, plus GPU kernel time through CUDA events when on CUDA."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        if cuda:
            import torch

            self.torch = torch

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def timed(self, call) -> tuple[float, float]:
        if not self.cuda:
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            return elapsed, elapsed
        begin, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start = time.perf_counter()
        begin.record()
        call()
        end.record()
        end.synchronize()
        return time.perf_counter() - start, begin.elapsed_time(end) / 1000


def _feeds_synthetic(count: int, device: str) -> dict[str, Any]:
    rng = np.random.default_rng(count)
    source = rng.standard_normal((count, 512)).astype(np.float32)
    feeds = {"target": rng.random((count, 3, 128, 128), np.float32), "source": source / np.linalg.norm(source, axis=1, keepdims=True)}
    return _on(feeds, device)


def _feeds_mesh(count: int, device: str, size: int = 256) -> dict[str, Any]:
    rng = np.random.default_rng(count)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1) * 2 - 1
    feeds = {
        "target": rng.random((count, 3, size, size), np.float32),
        "source": rng.random((count, 3, size, size), np.float32),
        "grid": np.repeat(np.stack([xx, yy], -1)[None], count, 0).astype(np.float32),
        "mask": np.repeat(np.clip(1.2 - np.hypot(xx, yy), 0, 1)[None, None], count, 0).astype(np.float32),
        "blend": np.ones((count, 1, 1, 1), np.float32),
        "colour": np.ones((count, 1, 1, 1), np.float32),
    }
    return _on(feeds, device)


def _on(feeds: dict[str, np.ndarray], device: str) -> dict[str, Any]:
    if device != "cuda":
        return feeds
    import cupy

    return {k: cupy.asarray(v) for k, v in feeds.items()}


def _call(runner, feeds):
    return runner.run_device(feeds) if hasattr(runner, "run_device") else runner.run(feeds)


def bench_batches(runner, make_feeds, batches, clock: _Clock, seconds: float, flops: float | None) -> dict[str, Any]:
    result = {}
    for batch in batches:
        feeds = make_feeds(batch)
        for _ in range(3):  # warm-up (graph capture, cuDNN autotune)
            _call(runner, feeds)
        clock.sync()
        walls, gpus, deadline = [], [], time.perf_counter() + seconds
        while time.perf_counter() < deadline or len(walls) < 5:
            wall, gpu = clock.timed(lambda: _call(runner, feeds))
            walls.append(wall)
            gpus.append(gpu)
        row = _percentiles(walls)
        row["faces_per_s"] = round(batch / float(np.median(walls)), 1)
        if flops:
            row["tflops"] = round(flops * batch / float(np.median(gpus)) / 1e12, 1)
        result[str(batch)] = row
    return result


def _paced(call, clock: _Clock, fps: float, seconds: float) -> dict[str, Any]:
    """``call`` once per frame interval for ``seconds``; a late tick makes the next ones
    start late rather than queue (the latency policy: drop, never queue)."""
    interval = 1.0 / fps
    for _ in range(3):
        call()
    clock.sync()
    walls, busy = [], 0.0
    start = time.perf_counter()
    next_tick = start
    while time.perf_counter() - start < seconds:
        now = time.perf_counter()
        if now < next_tick:
            time.sleep(next_tick - now)
        wall, gpu = clock.timed(call)
        walls.append(wall)
        busy += gpu
        next_tick += interval
        if time.perf_counter() > next_tick:
            next_tick = time.perf_counter()
    elapsed = time.perf_counter() - start
    row = _percentiles(walls)
    row["on_time_share"] = round(float(np.mean(np.asarray(walls) <= interval)), 3)
    row["gpu_busy_pct"] = round(100 * busy / elapsed, 1)
    row["ticks_per_s"] = round(len(walls) / elapsed, 1)
    return row


def bench_sessions(runner, make_feeds, sessions_list, clock: _Clock, fps: float, seconds: float) -> dict[str, Any]:
    """N sessions each sending one face per frame, batched per tick: the runner alone."""
    result = {}
    for sessions in sessions_list:
        feeds = make_feeds(sessions)
        result[str(sessions)] = _paced(lambda f=feeds: _call(runner, f), clock, fps, seconds)
    return result


def bench_kernels(device: str, clock: _Clock, repeats: int = 20) -> dict[str, Any]:
    from gpu.kernels import ops

    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (8, 720 * 3 // 2, 1280), dtype=np.uint8)
    rgb = rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8)
    rgbs = np.repeat(rgb[None], 8, axis=0)
    matrices = np.tile(np.array([[0.5, 0.05, -200], [-0.05, 0.5, -80]], np.float32), (32, 1, 1))
    if device == "cuda":
        import cupy

        frames, rgb, rgbs = cupy.asarray(frames), cupy.asarray(rgb), cupy.asarray(rgbs)
    out = {}
    for name, call in {
        "nv12_to_rgb_8x720p": lambda: ops.yuv_to_rgb(frames, "nv12", matrix="bt709"),
        "rgb_to_i420_8x720p": lambda: ops.rgb_to_yuv(rgbs, "i420", matrix="bt709"),
        "crop_32_faces_720p_128px": lambda: ops.crop_faces([rgb] * 32, matrices, 128),
    }.items():
        call()
        clock.sync()
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            call()
            clock.sync()
            samples.append(time.perf_counter() - start)
        out[name] = _percentiles(samples)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu.runners.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--runner", choices=["auto", "onnxruntime", "torch", "tensorrt"], default="auto")
    parser.add_argument("--sessions", type=int, default=32, help="largest session count (1, 2, 4, ... up to it)")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=3.0, help="per measured point")
    parser.add_argument("--small", action="store_true", help="a small synthetic model (CPU dry runs)")
    parser.add_argument("--json", metavar="FILE", help="write the report here ('-' for stdout)")
    args = parser.parse_args(argv)

    from gpu.device import select_device

    info = select_device(args.device)
    device = info.kind
    clock = _Clock(device == "cuda")
    batches = [int(b) for b in args.batches.split(",")]
    sessions = sorted({s for s in (1, 2, 4, 8, 16, 32, 64) if s < args.sessions} | {args.sessions})
    report: dict[str, Any] = {"device": {"kind": device, "name": info.name, "memory_gb": info.memory_gb, "reason": info.reason}}
    if device == "cuda":
        import torch

        report["device"].update(torch=torch.__version__, cuda=torch.version.cuda)

    synthetic = build_synthetic_inswapper(**({"width": 8, "blocks": 2} if args.small else {}))
    flops = flops_per_face(synthetic)
    models = {
        "synthetic_inswapper": (synthetic, _feeds_synthetic, flops),
        "mesh_256": (build_mesh_swap_graph(), _feeds_mesh, None),
    }
    report["models"] = {}
    for name, (model, feeds, model_flops) in models.items():
        started = time.perf_counter()
        runner = make_runner(model, device=info, runner=args.runner, name=name)
        entry: dict[str, Any] = {
            "runner": runner.choice.runner,
            "runner_device": runner.choice.device,
            "why": runner.choice.reason,
            "build_s": round(time.perf_counter() - started, 2),
        }
        if model_flops:
            entry["gflop_per_face"] = round(model_flops / 1e9, 1)
        make = lambda count, f=feeds: f(count, runner.choice.device)  # noqa: E731
        entry["batch"] = bench_batches(runner, make, batches, clock, args.seconds, model_flops)
        entry["sessions"] = bench_sessions(runner, make, sessions, clock, args.fps, args.seconds)
        entry["cuda_graphs"] = getattr(runner, "captured_buckets", None)
        entry["graph_error"] = getattr(runner, "graph_error", None)
        report["models"][name] = entry
        print(f"{name}: {json.dumps(entry)}", file=sys.stderr)
    report["kernels"] = bench_kernels(device, clock)
    text = json.dumps(report, indent=2)
    if args.json == "-" or not args.json:
        print(text)
    else:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
