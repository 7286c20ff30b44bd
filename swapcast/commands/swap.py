"""``swapcast swap``: swap the faces of an image or a video file offline."""

from __future__ import annotations

import argparse
import math
import secrets
import time
from pathlib import Path

from gpu import threads
from gpu.analysis.people import People, Person
from gpu.engine import FaceEngine
from gpu.errors import ImageError, SwapcastError
from streamer.face_photos import merged, register_photos
from streamer.media.decode_budget import DecodeBudget
from streamer.media.images import is_image_path, is_video_path, read_image, write_image
from streamer.media.stream_guard import MAX_DECODED_PIXELS
from streamer.media.transcode import transcode_video
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.pipeline.people_map import KEEP, MappedSource, PeopleMap, Reference, describe_people, is_person_id
from streamer.pipeline.people_scan import SCAN_FILE, load_scan, scan_folder
from streamer.provenance.credentials import ContentCredentials
from streamer.provenance.payload import stream_hash
from swapcast.commands.common import add_engine_flags, add_map_flags, add_swap_flags, config_from_args, map_photos
from swapcast.progress import ProgressBar


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "swap",
        help="swap faces in an image or video file",
        description="Put the source face onto the faces of a target image or video, or give each person their own "
        "(--map). Videos keep their frame count, timing and audio; the output is H.264.",
    )
    parser.add_argument("--source", metavar="FACE", action="append", help="photo of the face to put in (with --map: on "
                        "the people it does not name; optional there); repeat it with more photos of the same person "
                        "(e.g. a left and a right profile): they are merged into one face")
    parser.add_argument("--source-face-index", type=int, metavar="I", help="which face of the source photo(s) (0 = largest) when they show several")
    parser.add_argument("--target", required=True, metavar="IN", help="image (jpg/png/webp) or video (mp4/mov/mkv/webm/...)")
    parser.add_argument("--output", required=True, metavar="OUT", help="image for an image target; .mp4/.mov/.mkv for a video")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress (neither the bar nor the periodic lines)")
    add_map_flags(parser, people_ids=True)
    parser.add_argument("--people", metavar="SCAN", help="with --map person-N: the scan that numbered them "
                        "(default: <target>.people/people.json, as 'swapcast faces scan' writes it)")
    add_swap_flags(parser)
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    photos = map_photos(args, people_ids=True)
    if not args.source and not photos:
        raise SwapcastError("give --source FACE (a photo of the face to put in), or --map WHO=FACE per person")
    if not args.source and args.unmapped == "source":
        raise SwapcastError("--unmapped source needs --source FACE (the face the people --map does not name wear)")
    if not args.source:
        args.unmapped = "keep"
    config = config_from_args(args)
    # the node's pools, as `serve` and `worker` size them: a file's parallelism comes from
    # its decode, track, swap and encode overlapping (and x264's own threads), not from
    # every library spinning a pool over the same cores
    threads.apply(config.threads.budget(config.engine.runner_threads))
    target, output = Path(args.target), Path(args.output)
    _check_paths(target, output)
    options = config.swap.options()
    scanned = _scanned_people(args, target, photos)
    source_images = [_read("source", path) for path in args.source or ()]
    reference_image = _read("reference", args.reference) if options.face_selection == "reference" and args.reference else None
    if options.face_selection == "reference" and reference_image is None:
        raise SwapcastError("--faces reference needs --reference IMAGE (a photo of the person to swap)")
    target_image = _read("target", target) if is_image_path(target) else None  # bad files fail before models load

    engine = FaceEngine(config.engine.settings())
    source = None
    if source_images:
        sources = register_photos(engine, source_images, [f"source {path}" for path in args.source],
                                  index=args.source_face_index)
        source = merged(engine, sources)
    mapping = _people_map(engine, photos, config.swap.unmapped, options.reference_threshold) if photos else None
    people = People(engine.frontal_identity, known=scanned) if mapping is not None else None
    reference = None
    if reference_image is not None:
        face = engine.pick_face(reference_image, None, label=f"reference {args.reference}")
        reference = engine.identity(reference_image, face)
    provenance = config.provenance.settings()
    credentials = ContentCredentials(provenance)
    job_id = f"swap-{secrets.token_hex(6)}"  # what the watermark's stream hash is made from
    swapper = FrameSwapper(engine, source, options, reference=reference, marker=provenance.marker(job_id),
                           offline=True, people=people, mapping=mapping)

    started = time.perf_counter()
    if target_image is not None:
        times = swapper.process_still(target_image)
        write_image(output, target_image)
        if times.faces_swapped:
            credentials.sign(output, stream_id=job_id)
        print(f"{output}: {times.faces_swapped} of {times.faces_seen} face(s) swapped in {time.perf_counter() - started:.2f} s")
        _say_what_is_marked(provenance, job_id)
        return 0

    with ProgressBar(f"swapping {target.name}", enabled=args.progress) as bar:
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
    if people is not None:
        for row in describe_people(people.snapshot(), mapping, ""):
            if row["frames"]:
                print(f"  {row['id']}: {row['first_seen_s']:.1f}-{row['last_seen_s']:.1f} s, {row['frames']} frame(s), wore {row['wears']}")
    _say_what_is_marked(provenance, job_id)
    return 0


def _scanned_people(args: argparse.Namespace, target: Path, photos: dict[str, str]) -> list[Person]:
    """The people of the target's scan, when ``--map`` names any by id; each named id must be there."""
    wanted = [who for who in photos if is_person_id(who)]
    if not wanted:
        return []
    path = Path(args.people) if args.people else scan_folder(target) / SCAN_FILE
    people = load_scan(path)
    known = {person.id for person in people}
    missing = [who for who in wanted if who not in known]
    if missing:
        raise SwapcastError(f"--map {missing[0]}: not in the scan {path} (it lists {', '.join(sorted(known)) or 'nobody'})")
    return people


def _people_map(engine: FaceEngine, photos: dict[str, str], unmapped: str, threshold: float) -> PeopleMap:
    """``--map`` as sources: reference photos by identity, scanned people by id."""
    named: dict[str, MappedSource | None] = {}
    references = []
    for who, face in photos.items():
        wears = None if face == KEEP else MappedSource(Path(face).name, engine.register_source(_read("--map face", face), None,
                                                                                                label=f"--map face {face}"))
        if is_person_id(who):
            named[who] = wears
        else:
            image = _read("--map reference", who)
            identity = engine.identity(image, engine.pick_face(image, None, label=f"--map reference {who}"))
            references.append(Reference(Path(who).name, identity, wears))
    return PeopleMap(named, tuple(references), keep_unmapped=unmapped == KEEP, threshold=threshold)


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
