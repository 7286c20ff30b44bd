"""``swapcast provenance verify FILE_OR_URL``: is the watermark there, what does it say, and
does the file's C2PA manifest validate. Exit codes for scripts: 0 marked, 1 no mark found,
2 bad input, 3 a C2PA manifest that fails validation."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from gpu.errors import SwapcastError
from streamer.provenance.verify import DEFAULT_SECONDS, verify
from swapcast.commands.common import config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "provenance",
        help="verify swapcast's watermark and Content Credentials",
        description="Read back the invisible watermark swapcast puts in every swapped frame and the C2PA "
        "manifest of its files. Exit 0: marked; 1: no mark found; 2: bad input; 3: C2PA manifest invalid.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    check = actions.add_parser("verify", help="verify an image, a video file, a recording or a stream URL (rtmp://...)")
    check.add_argument("source", metavar="FILE_OR_URL")
    check.add_argument("--json", action="store_true", help="one JSON object on stdout")
    check.add_argument("--seconds", type=float, default=DEFAULT_SECONDS, metavar="S",
                       help=f"video read from the start, or from a stream (default {DEFAULT_SECONDS:g})")
    check.add_argument("--key-file", metavar="FILE", help="watermark key (default: provenance.key of the config, "
                                                          "env SWAPCAST_PROVENANCE__KEY, else the public key)")
    check.add_argument("--trust", metavar="PEM", help="CA certificates to trust for C2PA (default: provenance.c2pa_trust_anchors)")
    check.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    if args.seconds <= 0:
        raise SwapcastError("--seconds must be positive")
    settings = config_from_args(args).provenance.settings()
    if args.key_file:
        settings = replace(settings, key=_read(args.key_file, "key file").strip())
    if args.trust:
        _read(args.trust, "trust file")
        settings = replace(settings, c2pa_trust_anchors=Path(args.trust))
    verdict = verify(args.source, settings, seconds=args.seconds)
    print(json.dumps(verdict.to_dict()) if args.json else verdict.summary())
    return verdict.exit_code


def _read(path: str, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SwapcastError(f"{what} {path}: {exc.strerror or exc}") from None
    if not data.strip():
        raise SwapcastError(f"{what} {path} is empty")
    return data
