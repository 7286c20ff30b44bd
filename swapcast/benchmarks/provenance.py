"""``swapcast bench provenance``: what the watermark costs.

1. The embed kernel on the CPU: ms per 640x480 and 1280x720 frame (two saturating adds of a
   cached pattern), and the one-off cost of making a pattern (per stream, frame size and hour).
2. The detector: seconds to verify 2 s of 720p video.
3. A live session with the watermark off, then on (``bench webrtc``'s machinery: a
   ``swapcast serve`` child and an aiortc peer on loopback), printed side by side: fps out,
   server latency p50 and server CPU per frame.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any, TextIO

import numpy as np

from gpu.watermark.detect import Detector
from gpu.watermark.embed import LumaPattern, mark
from streamer.provenance.payload import Payload
from swapcast.config import Config

SIZES = ((640, 480), (1280, 720))
EMBED_FRAMES = 300


def measure_embed(settings, frames: int = EMBED_FRAMES) -> dict[str, Any]:
    """Per size: pattern make ms, and embed ms per frame (median and p99 over ``frames``)."""
    rng = np.random.default_rng(0)
    message = Payload.for_stream(settings.issuer, "bench").bits()
    results = {}
    for width, height in SIZES:
        started = time.perf_counter()
        pattern = LumaPattern.make(settings.watermark_key, message, height, width, settings.strength)
        make_ms = (time.perf_counter() - started) * 1000
        # a new frame each time, as in a stream (the same frame again would sit in the CPU's cache)
        pool = [rng.integers(0, 256, (height, width, 3), dtype=np.uint8) for _ in range(8)]
        times = []
        for k in range(frames):
            frame = pool[k % len(pool)]
            started = time.perf_counter()
            mark(frame, pattern)
            times.append((time.perf_counter() - started) * 1000)
        results[f"{width}x{height}"] = {"pattern_make_ms": make_ms, "embed_ms_p50": statistics.median(times),
                                        "embed_ms_p99": float(np.percentile(times, 99))}
    return results


def measure_detect(settings, seconds: float = 2.0) -> dict[str, Any]:
    import cv2

    from streamer.samples import astronaut

    base = cv2.resize(astronaut(), (1400, 800))
    pattern = LumaPattern.make(settings.watermark_key, Payload.for_stream(0, "bench").bits(), 720, 1280, settings.strength)
    detector = Detector(settings.watermark_key)
    started = time.perf_counter()
    for k in range(round(seconds * 30)):
        frame = np.ascontiguousarray(base[k % 60:k % 60 + 720, k:k + 1280])
        mark(frame, pattern)
        detector.add(cv2.cvtColor(frame, cv2.COLOR_RGB2YUV)[..., 0])
    found = detector.result()
    return {"seconds_of_720p": seconds, "verify_s": time.perf_counter() - started, "found": found.found}


def measure_live(config: Config, seconds: float, err: TextIO) -> dict[str, Any]:
    """One live session with the watermark off, then on."""
    from swapcast.benchmarks.webrtc import measure_webrtc

    runs = {}
    for label, on in (("off", False), ("on", True)):
        wanted = config.model_copy(update={"provenance": config.provenance.model_copy(update={"watermark": on})})
        print(f"[provenance] live session, watermark {label}, {seconds:.0f} s …", file=err, flush=True)
        phase = measure_webrtc(1, seconds, config=wanted, counts=[1], err=err)["phases"][0]
        runs[label] = {key: phase.get(key) for key in ("fps_out_per_session", "server_latency_p50_ms",
                                                       "server_latency_p99_ms", "rtt_p50_ms",
                                                       "server_cpu_ms_per_frame_out", "server_cpu_cores")}
    return runs


def run_provenance_benchmark(config: Config, seconds: float = 10.0, *, live: bool = True, as_json: bool = False,
                             out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    settings = config.provenance.settings()
    report: dict[str, Any] = {"embed": measure_embed(settings), "detect": measure_detect(settings)}
    print("watermark embed on the CPU (one thread; cached pattern, two saturating adds per frame):", file=out)
    for size, numbers in report["embed"].items():
        print(f"  {size:>9}: {numbers['embed_ms_p50']:.2f} ms per frame (p99 {numbers['embed_ms_p99']:.2f}); "
              f"pattern made once per stream, size and hour in {numbers['pattern_make_ms']:.0f} ms", file=out)
    detect = report["detect"]
    print(f"verify: {detect['verify_s']:.1f} s for {detect['seconds_of_720p']:.0f} s of 720p "
          f"({'found' if detect['found'] else 'NOT found'})", file=out)
    if live:
        report["live"] = runs = measure_live(config, seconds, err)
        rows = [("output fps", "fps_out_per_session", ".1f"), ("server latency p50 ms", "server_latency_p50_ms", ".1f"),
                ("server latency p99 ms", "server_latency_p99_ms", ".1f"), ("loopback round trip p50 ms", "rtt_p50_ms", ".0f"),
                ("server CPU ms per frame out", "server_cpu_ms_per_frame_out", ".1f"),
                ("server CPU cores", "server_cpu_cores", ".2f")]
        print(f"live session (640x480, 1 aiortc peer, {seconds:.0f} s each):{'watermark off':>16}{'watermark on':>16}", file=out)
        for name, key, spec in rows:
            cells = "".join(f"{_fmt(runs[label][key], spec):>16}" for label in ("off", "on"))
            print(f"  {name:<44}{cells}", file=out)
    if as_json:
        print(json.dumps(report), file=out)
    out.flush()
    return 0


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)
