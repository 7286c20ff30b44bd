"""``swapcast swap``: swap the faces of an image or a video file offline."""

from __future__ import annotations

import argparse
import math
import secrets
import sys
import time
from pathlib import Path

from gpu import threads
from gpu.engine import FaceEngine
from gpu.errors import ImageError, SwapcastError
from streamer.media.decode_budget import DecodeBudget
from streamer.media.images import is_image_path, is_video_path, read_image, write_image
from streamer.media.stream_guard import MAX_DECODED_PIXELS
from streamer.media.transcode import transcode_video
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.provenance.credentials import ContentCredentials
from streamer.provenance.payload import stream_hash
from swapcast.commands.common import add_engine_flags, add_swap_flags, config_from_args
from swapcast.progress import ProgressBar


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "swap",
        help="swap faces in an image or video file",
        description="Put the source face onto the faces of a target image or video. Videos keep "
        "their frame count, timing and audio; the output is H.264.",
    )
    parser.add_argument("--source", required=True, metavar="FACE", help="photo of the face to put in")
    parser.add_argument("--source-face-index", type=int, metavar="I", help="which face of the source photo (0 = largest) when it shows several")
    parser.add_argument("--target", required=True, metavar="IN", help="image (jpg/png/webp) or video (mp4/mov/mkv/webm/...)")
    parser.add_argument("--output", required=True, metavar="OUT", help="image for an image target; .mp4/.mov/.mkv for a video")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    add_swap_flags(parser)
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    # the node's pools, as `serve` and `worker` size them: a file's parallelism comes from
    # its decode, track, swap and encode overlapping (and x264's own threads), not from
    # every library spinning a pool over the same cores
    threads.apply(config.threads.budget(config.engine.runner_threads))
    target, output = Path(args.target), Path(args.output)
    _check_paths(target, output)
    options = config.swap.options()
    source_image = _read("source", args.source)
    reference_image = _read("reference", args.reference) if options.face_selection == "reference" and args.reference else None
    if options.face_selection == "reference" and reference_image is None:
        raise SwapcastError("--faces reference needs --reference IMAGE (a photo of the person to swap)")
    target_image = _read("target", target) if is_image_path(target) else None  # bad files fail before models load

    engine = FaceEngine(config.engine.settings())
    source = engine.register_source(source_image, args.source_face_index, label=f"source {args.source}")
    reference = None
    if reference_image is not None:
        face = engine.pick_face(reference_image, None, label=f"reference {args.reference}")
        reference = engine.identity(reference_image, face)
    provenance = config.provenance.settings()
    credentials = ContentCredentials(provenance)
    job_id = f"swap-{secrets.token_hex(6)}"  # what the watermark's stream hash is made from
    swapper = FrameSwapper(engine, source, options, reference=reference, marker=provenance.marker(job_id),
                           offline=True)

    started = time.perf_counter()
    if target_image is not None:
        times = swapper.process_still(target_image)
        write_image(output, target_image)
        if times.faces_swapped:
            credentials.sign(output, stream_id=job_id)
        print(f"{output}: {times.faces_swapped} of {times.faces_seen} face(s) swapped in {time.perf_counter() - started:.2f} s")
        _say_what_is_marked(provenance, job_id)
        return 0

    with ProgressBar(f"swapping {target.name}", enabled=args.progress and sys.stderr.isatty()) as bar:
        # the frame bound a job's video has (jobs.max_frames); the wall time is the caller's to end
        budget = DecodeBudget(max_frames=config.jobs.max_frames,
                              max_pixels=config.jobs.max_frames * MAX_DECODED_PIXELS, max_seconds=math.inf)
        report = transcode_video(
            target, output, swapper.file_stages(), codec=config.encode.codec, preset=config.encode.preset,
            crf=config.encode.crf, progress=bar.update, budget=budget,
        )
    credentials.sign(output, stream_id=job_id)
    fps = report.frames_out / report.seconds if report.seconds > 0 else 0.0
    audio = f", audio {report.audio_codec}" if report.audio_codec else ", no audio"
    print(f"{output}: {report.frames_out} frames ({report.width}x{report.height}, {report.duration_s:.2f} s{audio}) at {fps:.1f} frames/s")
    _say_what_is_marked(provenance, job_id)
    return 0


def _say_what_is_marked(provenance, job_id: str) -> None:
    """After the result, not before: a run that fails says one thing, its error."""
    print(f"{provenance.describe()}; this run is {job_id} (stream hash {stream_hash(job_id):06x})")


def _read(role: str, path: str | Path):
    """Read an image, saying which of the command's files is at fault when it cannot be read."""
    try:
        return read_image(path)
    except ImageError as exc:
        raise ImageError(f"{role} {exc}") from None


def _check_paths(target: Path, output: Path) -> None:
    if not target.is_file():
        raise SwapcastError(f"target {target}: no such file")
    if is_image_path(target):
        if not is_image_path(output):
            raise SwapcastError(f"output {output}: an image target needs an image output (.jpg, .png, .webp)")
    elif is_video_path(target):
        if output.suffix.lower() not in {".mp4", ".mov", ".mkv", ".m4v"}:
            raise SwapcastError(f"output {output}: a video target needs a .mp4, .mov or .mkv output")
    else:
        raise SwapcastError(f"target {target}: unknown file type {target.suffix or '(no extension)'}; use an image or a video")
    if output.resolve() == target.resolve():
        raise SwapcastError("output must not overwrite the target")
    if not output.parent.is_dir():
        raise SwapcastError(f"output {output}: folder {output.parent} does not exist")
