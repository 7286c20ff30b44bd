"""``swapcast faces scan``: the people in a video or a photo, before a swap maps them.

A video is tracked as a swap would track it (the engine's tracker, ``gpu.analysis.people``
re-identifying people the tracker lost and found again), then the people are clustered
over the whole file (``People.consolidated``) and numbered by first appearance. What is
written beside the video (``<name>.people/``): a thumbnail per person and ``people.json``
with their identity descriptors, so ``swapcast swap --map person-2=face.jpg`` names the
same people in a second pass over the file (by identity, not by frame)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu.analysis.people import People, Person
from gpu.engine import FaceEngine
from gpu.errors import SwapcastError
from streamer.media.frames import iter_frames
from streamer.media.images import is_image_path, read_image, write_image

SCAN_FILE = "people.json"
SCAN_VERSION = 1


@dataclass(frozen=True)
class Scan:
    target: str
    frames: int
    seconds: float
    people: list[Person]


def scan(engine: FaceEngine, target: Path, progress: Callable[[int], None] | None = None) -> Scan:
    """The people in ``target`` (a video or an image)."""
    if is_image_path(target):
        image = read_image(target)
        people = People(engine.frontal_identity)
        faces = engine.analyse_image(image)
        people.identify_still(image, faces)
        return Scan(str(target), 1, 0.0, people.consolidated())
    people = People(engine.frontal_identity)
    tracker = engine.tracker()
    frames, seconds = 0, 0.0
    try:
        for seconds, frame in iter_frames(target):
            people.update(frame, tracker.process(frame, seconds), seconds)
            frames += 1
            if progress is not None:
                progress(frames)
    finally:
        tracker.close()
    return Scan(str(target), frames, seconds, people.consolidated())


def scan_folder(target: Path) -> Path:
    """Where a scan of ``target`` is written by default: ``<name>.people/`` beside it."""
    return target.with_name(f"{target.name}.people")


def write_scan(result: Scan, folder: Path) -> Path:
    """Thumbnails (``person-N.jpg``) and ``people.json`` into ``folder``; the JSON's path."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = listing_of(result, folder)
    for person, row in zip(result.people, listing["people"], strict=True):
        if person.thumbnail is not None:
            write_image(Path(row["thumbnail"]), person.thumbnail)
        row["identity"] = [[round(float(v), 6) for v in exemplar] for exemplar in person.exemplars]
    path = folder / SCAN_FILE
    path.write_text(json.dumps(listing, indent=1), encoding="utf-8")
    return path


def listing_of(result: Scan, folder: Path) -> dict:
    """The scan as listed (``--json``): no descriptors."""
    return {
        "version": SCAN_VERSION, "target": result.target, "frames": result.frames, "seconds": round(result.seconds, 3),
        "people": [{"id": p.id, "first_seen_s": _round(p.first_seen), "last_seen_s": _round(p.last_seen),
                    "frames": p.frames, "thumbnail": str(folder / f"{p.id}.jpg") if p.thumbnail is not None else None}
                   for p in result.people],
    }


def load_scan(path: Path) -> list[Person]:
    """The people a scan wrote (ids and descriptors): a clear error for anything else."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        people = [Person(row["id"], [np.asarray(e, np.float32) for e in row["identity"]],
                         row.get("first_seen_s"), row.get("last_seen_s"), frames=0) for row in data["people"]]
    except FileNotFoundError:
        raise SwapcastError(f"{path}: no such scan; run 'swapcast faces scan' on the target first") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SwapcastError(f"{path}: not a people scan ({exc})") from None
    if any(len(p.exemplars) == 0 or any(e.shape != (128,) for e in p.exemplars) for p in people):
        raise SwapcastError(f"{path}: not a people scan (identity descriptors missing or malformed)")
    return people


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
