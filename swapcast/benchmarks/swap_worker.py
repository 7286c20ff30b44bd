"""Swaps for the realism bench, by the code of this checkout or of another one.

``swap_all`` registers every source and swaps it onto its stills and clips the way
``swapcast swap`` and a live session do (``FrameSwapper``). It imports only ``gpu`` and
``streamer``, so the same file runs as a script against another checkout's code
(``python swap_worker.py --code DIR ...``: that checkout's ``gpu``/``streamer`` are imported
instead of this one's), which is how ``bench quality --realism --baseline DIR`` puts the old
swap beside the new one in one run, scored by the same measurements.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class SwapJobs:
    """What to swap: sources by name, stills (source, target, image) and clips (source, clip, frames)."""

    swapper: str
    sources: dict[str, np.ndarray]
    stills: list[tuple[str, str, np.ndarray]] = field(default_factory=list)
    clips: list[tuple[str, str, list[np.ndarray]]] = field(default_factory=list)


@dataclass
class SwapOutputs:
    """The swapped images, keyed like the jobs, the time per frame and the sources that failed to register."""

    stills: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    clips: dict[tuple[str, str], list[np.ndarray]] = field(default_factory=dict)
    ms: dict[tuple[str, str], float] = field(default_factory=dict)  # per still, per clip (median frame)
    refused: dict[str, str] = field(default_factory=dict)  # source -> why it could not be registered


def swap_all(jobs: SwapJobs) -> SwapOutputs:
    from gpu.engine import EngineSettings, FaceEngine
    from gpu.errors import SwapcastError
    from gpu.options import SwapOptions
    from streamer.pipeline.frame_swapper import FrameSwapper

    engine = FaceEngine(EngineSettings(swapper=jobs.swapper))
    outputs = SwapOutputs()
    try:
        registered = {}
        for name, image in jobs.sources.items():
            try:
                registered[name] = engine.register_source(image, index=0, label=name)
            except SwapcastError as exc:
                outputs.refused[name] = str(exc)
        for source, target, image in jobs.stills:
            if source not in registered:
                continue
            swapper = FrameSwapper(engine, registered[source], SwapOptions(smoothing=False))
            output = image.copy()
            started = time.perf_counter()
            swapper.process_still(output)
            outputs.ms[(source, target)] = (time.perf_counter() - started) * 1000
            swapper.close()
            outputs.stills[(source, target)] = output
        for source, clip, frames in jobs.clips:
            if source not in registered:
                continue
            swapper = FrameSwapper(engine, registered[source], SwapOptions())
            swapped, times = [], []
            for index, frame in enumerate(frames):
                output = frame.copy()
                started = time.perf_counter()
                swapper.process(output, index / 30.0)
                times.append((time.perf_counter() - started) * 1000)
                swapped.append(output)
            swapper.close()
            outputs.clips[(source, clip)] = swapped
            outputs.ms[(source, clip)] = float(np.median(times))
    finally:
        engine.close()
    return outputs


def swap_in_checkout(jobs: SwapJobs, code: Path, scratch: Path) -> SwapOutputs:
    """``swap_all`` run by another checkout's code, in a child process."""
    import subprocess

    scratch.mkdir(parents=True, exist_ok=True)
    request, answer = scratch / "jobs.npz", scratch / "outputs.npz"
    _write_jobs(jobs, request)
    command = [sys.executable, str(Path(__file__).resolve()), "--code", str(code), str(request), str(answer)]
    subprocess.run(command, check=True)
    return _read_outputs(answer)


def _write_jobs(jobs: SwapJobs, path: Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    manifest: dict = {"swapper": jobs.swapper, "sources": [], "stills": [], "clips": []}
    for index, (name, image) in enumerate(jobs.sources.items()):
        arrays[f"source{index}"] = image
        manifest["sources"].append(name)
    for index, (source, target, image) in enumerate(jobs.stills):
        arrays[f"still{index}"] = image
        manifest["stills"].append([source, target])
    for index, (source, clip, frames) in enumerate(jobs.clips):
        arrays[f"clip{index}"] = np.stack(frames)
        manifest["clips"].append([source, clip])
    arrays["manifest"] = np.array(json.dumps(manifest))
    np.savez(path, **arrays)


def _read_jobs(path: Path) -> SwapJobs:
    with np.load(path) as archive:
        manifest = json.loads(str(archive["manifest"]))
        sources = {name: archive[f"source{i}"] for i, name in enumerate(manifest["sources"])}
        stills = [(s, t, archive[f"still{i}"]) for i, (s, t) in enumerate(manifest["stills"])]
        clips = [(s, c, list(archive[f"clip{i}"])) for i, (s, c) in enumerate(manifest["clips"])]
    return SwapJobs(manifest["swapper"], sources, stills, clips)


def _write_outputs(outputs: SwapOutputs, path: Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    manifest: dict = {"stills": [], "clips": [], "ms": [[*key, value] for key, value in outputs.ms.items()],
                      "refused": outputs.refused}
    for index, (key, image) in enumerate(outputs.stills.items()):
        arrays[f"still{index}"] = image
        manifest["stills"].append(list(key))
    for index, (key, frames) in enumerate(outputs.clips.items()):
        arrays[f"clip{index}"] = np.stack(frames)
        manifest["clips"].append(list(key))
    arrays["manifest"] = np.array(json.dumps(manifest))
    np.savez(path, **arrays)


def _read_outputs(path: Path) -> SwapOutputs:
    with np.load(path) as archive:
        manifest = json.loads(str(archive["manifest"]))
        return SwapOutputs(
            stills={tuple(key): archive[f"still{i}"] for i, key in enumerate(manifest["stills"])},
            clips={tuple(key): list(archive[f"clip{i}"]) for i, key in enumerate(manifest["clips"])},
            ms={(a, b): float(value) for a, b, value in manifest["ms"]},
            refused=dict(manifest["refused"]),
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="swap the jobs in IN with the code in --code, write OUT")
    parser.add_argument("--code", required=True, help="a checkout whose gpu/ and streamer/ do the swaps")
    parser.add_argument("jobs")
    parser.add_argument("outputs")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(args.code).resolve()))
    _write_outputs(swap_all(_read_jobs(Path(args.jobs))), Path(args.outputs))
    return 0


if __name__ == "__main__":
    sys.path.pop(0)  # this file's own folder: its modules are not the checkout's
    raise SystemExit(main())
