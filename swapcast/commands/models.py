"""``swapcast models convert``: the mediapipe wheel's face models as ONNX graphs, ahead of time.

A node converts them at first start anyway (``gpu.models.tflite_onnx.convert_builtin``);
running this at image build time puts them in the cache the node will read, and shows
where they are and how long conversion takes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpu.errors import SwapcastError
from swapcast.commands.common import config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("models", help="convert the built-in face models to ONNX")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    convert = actions.add_parser("convert", help="convert (or find cached) the wheel's TFLite face models")
    convert.add_argument("--cache-dir", type=Path, metavar="DIR",
                         help="where converted models are cached (default: engine.engine_cache_dir of the config)")
    convert.set_defaults(run=run_convert)


def run_convert(args: argparse.Namespace) -> int:
    from gpu.models.tflite_onnx import convert_builtin

    cache_dir = args.cache_dir or config_from_args(args).engine.engine_cache_dir
    if cache_dir is None:
        raise SwapcastError("no cache folder: pass --cache-dir DIR or set engine.engine_cache_dir")
    started = time.perf_counter()
    converted = convert_builtin(cache_dir)
    for name, path in converted.items():
        print(f"{name:42} -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"{len(converted)} models ready in {time.perf_counter() - started:.2f} s")
    return 0
