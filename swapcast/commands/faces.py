"""``swapcast faces scan``: list the people in a video or a photo (for ``swap --map``);
``swapcast faces add``: register a face on a server from photos of one person (its HTTP API,
as ``jobs`` talks to it)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from gpu.errors import SwapcastError
from streamer.media.images import is_image_path, is_video_path
from swapcast.commands.common import add_engine_flags, config_from_args
from swapcast.commands.jobs import DEFAULT_SERVER
from swapcast.commands.jobs import _Api as ServerApi
from swapcast.progress import ProgressBar


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("faces", help="the people in a video or photo (scan: map faces, each their own "
                                 "source); a face on a server from photos of one person (add)")
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
    add = actions.add_parser(
        "add", help="register a face on a server from photos of one person",
        description="Upload photos of one person to a server's face library as one face (several photos, say a left "
        "and a right profile, are merged: each fills what the others did not see, the identity comes from all), or "
        "add them to one of your faces (--to). Each photo must show exactly one face, the same person in all. "
        "Prints the face's id (for sessions, stream keys and 'jobs submit --face').")
    add.add_argument("photos", nargs="+", metavar="PHOTO", help="photos of the person (JPEG, PNG or WebP; at most "
                     "quotas.photos_per_face of the server in all, default 8)")
    add.add_argument("--name", help="the face's name (default: the first photo's name)")
    add.add_argument("--to", metavar="FACE_ID", help="add the photos to this face of yours instead of making a new one")
    add.add_argument("--server", metavar="URL", default=DEFAULT_SERVER, help=f"node or gateway (default {DEFAULT_SERVER})")
    add.add_argument("--token", default=os.environ.get("SWAPCAST_TOKEN"),
                     help="bearer token (JWT; default $SWAPCAST_TOKEN); the face belongs to its subject")
    add.set_defaults(run=_add)


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


def _add(args: argparse.Namespace) -> int:
    photos = [Path(photo) for photo in args.photos]
    for photo in photos:
        if not photo.is_file():
            raise SwapcastError(f"photo {photo}: no such file")
    if args.to and args.name:
        raise SwapcastError("--name names a new face; rename one with PATCH /api/v1/faces/{id} (not with --to)")
    face = asyncio.run(_upload(args, photos))
    print(face["id"])
    print(f"{face['name']} · made of {face['photos']} photo(s)")
    return 0


async def _upload(args: argparse.Namespace, photos: list[Path]) -> dict[str, Any]:
    """One multipart request, a field ``image`` per photo (each streamed from its file)."""
    path = f"/api/v1/faces/{quote(args.to, safe='')}/photos" if args.to else "/api/v1/faces"
    params = {"name": args.name} if args.name else None
    with contextlib.ExitStack() as files:
        form = aiohttp.FormData(quote_fields=False)  # file names as browsers send them ("a b.jpg", not "a%20b.jpg")
        for photo in photos:
            form.add_field("image", files.enter_context(photo.open("rb")), filename=photo.name)
        async with ServerApi(args.server, args.token) as api:
            return await api.call("POST", path, data=form, params=params)
