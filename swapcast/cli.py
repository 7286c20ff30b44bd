"""``swapcast`` command line: one parser, one sub-command module each.

Bad input (a ``SwapcastError``) ends with its message on stderr and exit code 2, never a
traceback; an interrupted run exits 130."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from gpu.errors import SwapcastError
from swapcast.config import ConfigError, load_config
from swapcast.logs import LogFormat, configure_logging

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    from swapcast.commands import (
        bench,
        doctor,
        faces,
        gateway,
        jobs,
        keys,
        models,
        provenance,
        score,
        serve,
        swap,
        token,
        worker,
    )

    parser = argparse.ArgumentParser(prog="swapcast", description="Real-time face-swap media server.")
    parser.add_argument("--config", metavar="FILE", help="YAML config file (default: embedded defaults; env SWAPCAST_CONFIG)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    parser.add_argument("--log-format", choices=["text", "json"],
                        help="text, or one JSON object per line (default: server.log_format of the config: "
                             "file, env SWAPCAST_SERVER__LOG_FORMAT)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in (serve, gateway, worker, jobs, swap, faces, score, provenance, keys, token, bench, doctor, models):
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    _quiet_native_logs()
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(logging.DEBUG if args.verbose else logging.INFO, args.log_format or _configured_log_format(args.config))
    try:
        return int(args.run(args) or 0)
    except SwapcastError as exc:
        print(f"swapcast {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _configured_log_format(path: str | None) -> LogFormat:
    """``server.log_format`` from the config file and environment: logging starts before
    a command builds its config. A config that does not load falls back to text here; the
    command then reports what is wrong with it."""
    try:
        return load_config(path).server.log_format
    except ConfigError:
        return "text"


def _quiet_native_logs() -> None:
    """mediapipe (glog/absl) and TensorFlow Lite print setup chatter to stderr; keep only errors."""
    os.environ.setdefault("GLOG_minloglevel", "2")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.ERROR)
    except ImportError:
        pass


if __name__ == "__main__":
    sys.exit(main())
