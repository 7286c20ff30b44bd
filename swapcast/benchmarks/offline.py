"""``swapcast bench offline``: ``swapcast swap`` on a file, as a user runs it, timed.

Generated clips of one moving real face (Grace Hopper, H.264 with B-frames and an AAC
track, ``swapcast.benchmarks.jobs.write_face_clip``) at 640x480 and 1280x720, each as a
short (30-frame) and a long (``frames``) clip. Each is swapped by ``python -m
swapcast.cli swap`` in a child process with the default options (swapper ``auto``:
``mesh3d`` on a CPU node, the watermark on), exactly as a user would type it. Per size it
reports:

* frames/s: what the command itself prints for the long clip (its transcode, without the
  start-up: loading the models and the source face);
* marginal ms per frame: (wall time of the long run − wall time of the short run) / the
  frames between them, i.e. what one more frame costs, start-up cancelled out;
* CPU cores: the child's CPU time (user + system) over its wall time;
* the machine's load average and the CPU the rest of the machine used meanwhile, since on a
  shared machine the numbers are only comparable within one run.

With ``baseline`` (a checkout of other code, e.g. ``git worktree add ../base <commit>``) each
run is made with that code too, interleaved (baseline, current, baseline, current ...) so
both see the same load, and printed side by side with their ratio; the two outputs of the
short clip are then compared frame by frame (watermark off, which differs per run by design).
"""

from __future__ import annotations

import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import av
import numpy as np

from swapcast.benchmarks.jobs import write_face_clip

SIZES = {"640x480": (640, 480), "1280x720": (1280, 720)}
SHORT_FRAMES = 30
FPS = 30
TARGET_FPS = {"640x480": 60.0, "1280x720": 40.0}
TARGET_MARGINAL_MS = 20.0
_FPS_LINE = re.compile(r"(\d+) frames \(.*\) at ([\d.]+) frames/s")


@dataclass(frozen=True)
class Code:
    """Which code a run uses: this checkout's (``root`` None) or another checkout's."""

    label: str
    root: Path | None = None

    def env(self, watermark: bool) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
        if self.root is not None:
            env["PYTHONPATH"] = str(self.root)
        if not watermark:
            env["SWAPCAST_PROVENANCE__WATERMARK"] = "false"
        return env


@dataclass(frozen=True)
class SwapRun:
    frames: int
    fps: float  # as the command prints it
    wall_s: float  # the whole command, start-up included
    cpu_s: float  # user + system of the child
    others_cores: float  # CPU the rest of the machine used meanwhile, in cores


def machine_busy_seconds() -> float:
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_swap(code: Code, source: Path, clip: Path, output: Path, *, watermark: bool = True,
             extra: list[str] | None = None) -> SwapRun:
    """One ``swapcast swap`` in a child process, timed."""
    command = [sys.executable, "-m", "swapcast.cli", "swap", "--source", str(source), "--target", str(clip),
               "--output", str(output), "--no-progress", *(extra or [])]
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    busy_before, started = machine_busy_seconds(), time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=code.env(watermark),
                          cwd=str(code.root) if code.root else None, timeout=900)
    wall = time.perf_counter() - started
    busy = machine_busy_seconds() - busy_before
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after_children.ru_utime - before_children.ru_utime) + (after_children.ru_stime - before_children.ru_stime)
    match = _FPS_LINE.search(done.stdout)
    if done.returncode != 0 or match is None:
        raise RuntimeError(f"swapcast swap ({code.label}) failed with code {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}")
    return SwapRun(int(match.group(1)), float(match.group(2)), wall, cpu, max(0.0, busy - cpu) / wall)


def same_frames(a: Path, b: Path) -> tuple[bool, float]:
    """(every decoded frame equal, the largest mean absolute difference of a frame)."""
    with av.open(str(a)) as first, av.open(str(b)) as second:
        worst, equal, count = 0.0, True, 0
        for x, y in zip(first.decode(video=0), second.decode(video=0), strict=True):
            p, q = x.to_ndarray(format="rgb24").astype(np.int16), y.to_ndarray(format="rgb24").astype(np.int16)
            equal &= bool(np.array_equal(p, q))
            worst = max(worst, float(np.abs(p - q).mean()))
            count += 1
    return equal, worst


def measure_offline(frames: int = 300, rounds: int = 2, baseline: Path | None = None, sizes: list[str] | None = None,
                    swapper: str | None = None, err: TextIO | None = None) -> dict[str, Any]:
    err = err or sys.stderr
    codes = ([Code("baseline", baseline.resolve())] if baseline else []) + [Code("current")]
    extra = ["--swapper", swapper] if swapper else []
    report: dict[str, Any] = {"frames": frames, "rounds": rounds, "swapper": swapper or "auto", "cpu_count": os.cpu_count(),
                              "load_before": os.getloadavg(), "sizes": {}}
    with tempfile.TemporaryDirectory(prefix="swapcast-bench-offline-") as tmp:
        work = Path(tmp)
        from streamer.samples import astronaut

        source = work / "astronaut.png"
        av.VideoFrame.from_ndarray(astronaut(), format="rgb24").to_image().save(source)
        for size in sizes or list(SIZES):
            clips = {}
            for count in (SHORT_FRAMES, frames):
                clips[count] = work / f"clip-{size}-{count}.mp4"
                write_face_clip(clips[count], count / FPS, size=SIZES[size], fps=FPS)
            runs: dict[str, dict[int, list[SwapRun]]] = {c.label: {SHORT_FRAMES: [], frames: []} for c in codes}
            for round_ in range(rounds):
                for count in (SHORT_FRAMES, frames):
                    for code in codes:
                        run = run_swap(code, source, clips[count], work / f"out-{code.label}.mp4", extra=extra)
                        runs[code.label][count].append(run)
                        print(f"[{size} round {round_ + 1}/{rounds}] {code.label:>8} {count:4d} frames: {run.fps:5.1f} frames/s, "
                              f"wall {run.wall_s:5.1f} s, {run.cpu_s / run.wall_s:.2f} cores, other work "
                              f"{run.others_cores:.2f} cores", file=err, flush=True)
            entry = {label: _summary(by_count, frames) for label, by_count in runs.items()}
            if baseline:
                outputs = {}
                for code in codes:
                    outputs[code.label] = work / f"same-{code.label}.mp4"
                    run_swap(code, source, clips[SHORT_FRAMES], outputs[code.label], watermark=False, extra=extra)
                equal, worst = same_frames(outputs["baseline"], outputs["current"])
                entry["same_frames_as_baseline"] = equal
                entry["largest_frame_difference"] = worst
            report["sizes"][size] = entry
    report["load_after"] = os.getloadavg()
    return report


def _summary(by_count: dict[int, list[SwapRun]], frames: int) -> dict[str, Any]:
    long, short = by_count[frames], by_count[SHORT_FRAMES]
    wall_long = statistics.median(r.wall_s for r in long)
    wall_short = statistics.median(r.wall_s for r in short)
    return {
        "fps": statistics.median(r.fps for r in long),
        "fps_all": [r.fps for r in long],
        "wall_s": wall_long,
        "startup_s": wall_short - SHORT_FRAMES * (wall_long - wall_short) / (frames - SHORT_FRAMES),
        "marginal_ms_per_frame": 1000 * (wall_long - wall_short) / (frames - SHORT_FRAMES),
        "cores": statistics.median(r.cpu_s / r.wall_s for r in long),
        "cpu_ms_per_frame": 1000 * (statistics.median(r.cpu_s for r in long) - statistics.median(r.cpu_s for r in short))
        / (frames - SHORT_FRAMES),
        "others_cores": statistics.median(r.others_cores for r in long + short),
    }


def _print(report: dict[str, Any], out: TextIO) -> None:
    load = " ".join(f"{v:.2f}" for v in report["load_before"])
    print(f"offline: swapcast swap --swapper {report['swapper']} (default options, watermark on), one moving face, "
          f"{report['frames']} and {SHORT_FRAMES} frames, median of {report['rounds']} interleaved round(s); "
          f"{report['cpu_count']} CPU core(s), load average before {load}", file=out)
    rows = [
        ("frames/s (the command's own)", lambda s: f"{s['fps']:.1f}"),
        ("marginal ms per frame (wall)", lambda s: f"{s['marginal_ms_per_frame']:.1f}"),
        ("CPU ms per extra frame", lambda s: f"{s['cpu_ms_per_frame']:.1f}"),
        ("start-up s", lambda s: f"{s['startup_s']:.1f}"),
        ("cores busy (long run)", lambda s: f"{s['cores']:.2f}"),
        ("other work on the machine, cores", lambda s: f"{s['others_cores']:.2f}"),
    ]
    for size, entry in report["sizes"].items():
        labels = [k for k in entry if isinstance(entry[k], dict)]
        print(f"{size}:" + "".join(f"{label:>14}" for label in labels) + ("         ratio" if len(labels) == 2 else ""), file=out)
        for name, cell in rows:
            line = f"  {name:<36}" + "".join(f"{cell(entry[label]):>14}" for label in labels)
            if len(labels) == 2 and name.startswith(("frames/s", "marginal")):
                a, b = entry[labels[0]], entry[labels[1]]
                key = "fps" if name.startswith("frames") else "marginal_ms_per_frame"
                ratio = b[key] / a[key] if key == "fps" else a[key] / b[key]
                line += f"{ratio:>13.2f}x"
            print(line, file=out)
        if "same_frames_as_baseline" in entry:
            print(f"  output frames identical to the baseline's ({SHORT_FRAMES} frames, watermark off): "
                  f"{'yes' if entry['same_frames_as_baseline'] else 'no'} (largest mean difference "
                  f"{entry['largest_frame_difference']:.3f} levels)", file=out)
        current = entry["current"]
        target = TARGET_FPS.get(size)
        if target:
            print(f"  target: >= {target:.0f} frames/s: {current['fps']:.1f} -> {'PASS' if current['fps'] >= target else 'FAIL'}",
                  file=out)
        print(f"  target: marginal <= {TARGET_MARGINAL_MS:.0f} ms per frame: {current['marginal_ms_per_frame']:.1f} -> "
              f"{'PASS' if current['marginal_ms_per_frame'] <= TARGET_MARGINAL_MS else 'FAIL'}", file=out)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in report['load_after'])}", file=out)


def run_offline_benchmark(*, frames: int = 300, rounds: int = 2, baseline: str | None = None, sizes: list[str] | None = None,
                          swapper: str | None = None, as_json: bool = False, out: TextIO | None = None,
                          err: TextIO | None = None) -> int:
    from swapcast.config import ConfigError

    out, err = out or sys.stdout, err or sys.stderr
    if frames <= SHORT_FRAMES or rounds < 1:
        raise ConfigError(f"--frames must be more than {SHORT_FRAMES} and --rounds at least 1")
    unknown = [s for s in sizes or [] if s not in SIZES]
    if unknown:
        raise ConfigError(f"--sizes: unknown {', '.join(unknown)}; choose from {', '.join(SIZES)}")
    root = Path(baseline) if baseline else None
    if root is not None and not (root / "swapcast" / "cli.py").is_file():
        raise ConfigError(f"--baseline {baseline}: not a swapcast checkout (no swapcast/cli.py there)")
    report = measure_offline(frames, rounds, root, sizes, swapper, err)
    _print(report, out)
    if as_json:
        print(json.dumps(report), file=out)
    return 0
