"""``swapcast faces scan``: list the people in a video or a photo (for ``swap --map``)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpu.errors import SwapcastError
from streamer.media.images import is_image_path, is_video_path
from swapcast.commands.common import add_engine_flags, config_from_args
from swapcast.progress import ProgressBar


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("faces", help="the people in a video or photo (map faces: each their own source)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    scan = actions.add_parser(
        "scan", help="list the people in a video or photo, with a thumbnail each",
        description="Track the faces of a video (or find those of a photo), tell the people apart by identity "
        "(someone who leaves and comes back is one person) and list them: id, first and last time seen, frames, "
        "thumbnail. Writes the thumbnails and people.json into <target>.people/ (or --out); then "
        "'swapcast swap --map person-2=face.jpg' swaps by these ids.")
    scan.add_argument("target", metavar="VIDEO|IMAGE", help="the video or photo to scan")
    scan.add_argument("--out", metavar="DIR", help="where the thumbnails and people.json go (default: <target>.people/ beside it)")
    scan.add_argument("--json", action="store_true", help="print the listing as JSON")
    scan.add_argument("--no-progress", dest="progress", action="store_false", help="no progress (neither the bar nor the periodic lines)")
    add_engine_flags(scan)
    scan.set_defaults(run=_scan)


def _scan(args: argparse.Namespace) -> int:
    from gpu.engine import FaceEngine
    from streamer.pipeline.people_scan import listing_of, scan, scan_folder, write_scan

    target = Path(args.target)
    if not target.is_file():
        raise SwapcastError(f"target {target}: no such file")
    if not (is_image_path(target) or is_video_path(target)):
        raise SwapcastError(f"target {target}: unknown file type {target.suffix or '(no extension)'}; use a video or a photo")
    config = config_from_args(args)
    folder = Path(args.out) if args.out else scan_folder(target)
    engine = FaceEngine(config.engine.settings())
    with ProgressBar(f"scanning {target.name}", enabled=args.progress) as bar:
        result = scan(engine, target, progress=lambda frames: bar.update(frames, None))
    write_scan(result, folder)
    listing = listing_of(result, folder)
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    if not result.people:
        print(f"{target}: no people found in {result.frames} frame(s)")
        return 0
    print(f"{target}: {len(result.people)} people in {result.frames} frame(s); thumbnails in {folder}/")
    for row in listing["people"]:
        seen = "" if row["first_seen_s"] is None else f"  {row['first_seen_s']:.1f}-{row['last_seen_s']:.1f} s"
        print(f"  {row['id']:10}{seen}  {row['frames']} frame(s)  {row['thumbnail'] or '(no thumbnail)'}")
    print(f"map them: swapcast swap --target {target} --map {listing['people'][0]['id']}=FACE.jpg [--map ...] --output OUT")
    return 0
