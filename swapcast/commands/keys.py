"""``swapcast keys add | list | revoke``: stream keys for RTMP and WHIP publishers."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpu.errors import SwapcastError
from signaling.stream_keys import KEEP_PHOTO, StreamKeyStore
from swapcast.commands.common import add_map_flags, add_swap_flags, config_from_args, map_photos, swap_overrides


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("keys", help="stream keys for OBS/ffmpeg (RTMP) and WHIP publishers")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="create a stream key (printed once)")
    add.add_argument("--source", metavar="FACE", action="append", help="photo of the face to put on the stream (with "
                     "--map: on the people it does not name; optional there); repeat it with more photos of the same "
                     "person: they are merged into one face")
    add.add_argument("--source-face-index", type=int, metavar="I", help="which face of the photo(s) (0 = largest)")
    add.add_argument("--name", help="a label for lists (default: the photo's name)")
    add.add_argument("--push", action="append", default=[], metavar="URL", help="re-publish to rtmp://host/app/key (repeatable)")
    add.add_argument("--record", metavar="PATH", help="record the swapped stream to this file or folder")
    add_map_flags(add, people_ids=False)
    add_swap_flags(add)
    add.set_defaults(run=_add)
    listing = actions.add_parser("list", help="list stream keys (ids, names, state)")
    listing.set_defaults(run=_list)
    revoke = actions.add_parser("revoke", help="revoke a stream key by id; its publisher is refused from now on")
    revoke.add_argument("key_id")
    revoke.set_defaults(run=_revoke)


def _store(args: argparse.Namespace) -> StreamKeyStore:
    return StreamKeyStore(config_from_args(args).server.data_dir)


def _add(args: argparse.Namespace) -> int:
    from gpu.engine import FaceEngine
    from streamer.face_photos import register_photos
    from streamer.media.images import read_image

    photos = map_photos(args)
    sources = args.source or [wears for wears in photos.values() if wears != KEEP_PHOTO][:1]
    if not sources:
        raise SwapcastError("keys add needs --source FACE, or --map REF=FACE with at least one face to wear")
    swap = swap_overrides(args)
    if photos and not args.source:
        swap.setdefault("unmapped", "keep")  # no --source: the people the map does not name stay themselves
    config = config_from_args(args)  # validates the swap flags
    # A key must carry usable faces: check them now, not when OBS connects.
    engine = FaceEngine(config.engine.settings())
    register_photos(engine, [read_image(path) for path in sources], [f"source {path}" for path in sources],
                    index=args.source_face_index if args.source else None)
    for reference, wears in photos.items():
        engine.pick_face(read_image(reference), None, f"--map reference {reference}")
        if wears != KEEP_PHOTO:
            engine.register_source(read_image(wears), None, f"--map face {wears}")
    name = args.name or Path(sources[0]).stem
    key, record = StreamKeyStore(config.server.data_dir).add(
        name, sources[0], swap=swap, push=tuple(args.push), record=args.record, map_photos=photos,
        more_source_faces=sources[1:],
    )
    print(key)
    print(f"id {record.key_id} · {name} · publish to rtmp://<server>/live/<key> or WHIP with 'Authorization: Bearer <key>'")
    print(f"play the swapped stream at rtmp://<server>/live/{record.play_token}")
    return 0


def _list(args: argparse.Namespace) -> int:
    keys = _store(args).list()
    if not keys:
        print("no stream keys (create one with 'swapcast keys add --source FACE.jpg')")
    for record in keys:
        state = "active" if record.active else f"revoked {time.strftime('%Y-%m-%d %H:%M', time.localtime(record.revoked))}"
        push = f" push={','.join(record.stream.push)}" if record.stream.push else ""
        record_to = f" record={record.stream.record}" if record.stream.record else ""
        mapped = len(record.stream.map_photos) + len(record.stream.swap.get("faces_map") or {})
        map_note = f" map={mapped} people" if mapped else ""
        photos = len(record.stream.source_photos)
        photos_note = f" photos={photos}" if photos > 1 else ""
        print(f"{record.key_id}  {record.stream.name:20}  {state}  play={record.play_token}{push}{record_to}{map_note}"
              f"{photos_note}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    record = _store(args).revoke(args.key_id)
    print(f"revoked {record.key_id} ({record.stream.name})")
    return 0
