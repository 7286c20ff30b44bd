"""``swapcast score``: identity distances that tell whether a swap worked.

dlib descriptors: under 0.6 means "same person". A good swap puts the output under 0.6
from the source and closer to the source than to the original target."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.engine import FaceEngine
from gpu.errors import NoFaceError, SwapcastError
from streamer.media.frames import sample_frames
from streamer.media.images import is_image_path, is_video_path, read_image
from swapcast.commands.common import config_from_args


@dataclass
class Score:
    frames_scored: int
    frames_without_face: int
    output_to_source: float  # median over scored frames
    output_to_target: float | None

    @property
    def passed(self) -> bool:
        closer = self.output_to_target is None or self.output_to_source < self.output_to_target
        return self.frames_scored > 0 and self.output_to_source < SAME_PERSON_DISTANCE and closer


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("score", help="identity distances of a swap (dlib, same person < 0.6)")
    parser.add_argument("--source", required=True, metavar="FACE", help="the source photo used for the swap")
    parser.add_argument("--source-face-index", type=int, metavar="I", help="face of the source photo (0 = largest)")
    parser.add_argument("--output", required=True, metavar="OUT", help="the swapped image or video")
    parser.add_argument("--target", metavar="IN", help="the original target, to compare against")
    parser.add_argument("--frames", type=int, default=8, metavar="N", help="video frames to score (default 8)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("--check", action="store_true", help="exit 1 unless the swap passes the identity rule")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    engine = FaceEngine(config_from_args(args).engine.settings())
    source = read_image(args.source)
    source_identity = engine.identity(source, engine.pick_face(source, args.source_face_index, f"source {args.source}"))
    score = score_files(engine, source_identity, Path(args.output), Path(args.target) if args.target else None, args.frames)
    if args.json:
        print(json.dumps({**asdict(score), "passed": score.passed}))
    else:
        print(f"frames scored:        {score.frames_scored} ({score.frames_without_face} without a face)")
        print(f"d(output, source):    {score.output_to_source:.3f}   (same person < {SAME_PERSON_DISTANCE})")
        if score.output_to_target is not None:
            print(f"d(output, target):    {score.output_to_target:.3f}")
        print("verdict:              " + ("swap reads as the source" if score.passed else "swap does NOT read as the source"))
    return 1 if args.check and not score.passed else 0


def score_files(engine: FaceEngine, source_identity: np.ndarray, output: Path, target: Path | None, frames: int) -> Score:
    outputs = _frames(output, frames)
    targets = _frames(target, frames) if target is not None else None
    if targets is not None and len(targets) != len(outputs):
        raise SwapcastError(f"target {target} and output {output} differ in frame count")
    to_source, to_target, missing = [], [], 0
    for index, frame in enumerate(outputs):
        faces = engine.analyse_image(frame)
        if not faces:
            missing += 1
            continue
        identity = engine.identity(frame, faces[0])
        to_source.append(identity_distance(identity, source_identity))
        if targets is not None:
            target_faces = engine.analyse_image(targets[index])
            if target_faces:
                to_target.append(identity_distance(identity, engine.identity(targets[index], target_faces[0])))
    if not to_source:
        raise NoFaceError(f"output {output}: no face found in the scored frame(s)")
    return Score(
        frames_scored=len(to_source),
        frames_without_face=missing,
        output_to_source=float(np.median(to_source)),
        output_to_target=float(np.median(to_target)) if to_target else None,
    )


def _frames(path: Path, count: int) -> list[np.ndarray]:
    if is_image_path(path):
        return [read_image(path)]
    if is_video_path(path):
        return [frame for _, frame in sample_frames(path, count)]
    raise SwapcastError(f"{path}: unknown file type; use an image or a video")
