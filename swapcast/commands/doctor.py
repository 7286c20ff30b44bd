"""``swapcast doctor``: what this node has and what it will use, and why."""

from __future__ import annotations

import argparse
import os
import platform
import sys

from gpu.errors import SwapcastError
from swapcast.commands.common import add_engine_flags, config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("doctor", help="report devices, runtimes, codecs and models")
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import av
    import onnxruntime

    from gpu.device import detect_device
    from gpu.models.builtin import BuiltinModels

    config = config_from_args(args)
    device = detect_device()
    print(f"python        {sys.version.split()[0]} on {platform.platform()} ({os.cpu_count()} CPUs)")
    memory = f", {device.memory_gb:.0f} GiB" if device.memory_gb else ""
    print(f"device        {device.backend}: {device.name}{memory} ({device.reason})")
    print(f"onnxruntime   {onnxruntime.__version__}, providers: {', '.join(onnxruntime.get_available_providers())}")
    print("tensorrt      not installed (the TensorRT runner is for production GPU nodes that have it)" if not _has("tensorrt") else "tensorrt      installed")
    codecs = {name: name in av.codecs_available for name in ("libx264", "h264_nvenc", "h264_cuvid", "aac", "libvpx")}
    print(f"pyav          {av.__version__}, " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in codecs.items()))
    models = BuiltinModels.locate()
    for name, path in vars(models).items():
        print(f"builtin       {name:18} {path}")
    if config.engine.models_dir:
        from gpu.models.user_models import UserModels

        found = UserModels.discover(config.engine.models_dir, prefer_fp16=config.engine.prefer_fp16)
        for role in ("detector", "embedder", "swapper"):
            print(f"user model    {role:18} {getattr(found, role) or 'not found'}")
    try:
        from gpu.engine import FaceEngine

        engine = FaceEngine(config.engine.settings())
        print(f"engine        swapper={engine.swapper.name}, still-image detector={engine.detector_name}")
    except SwapcastError as exc:
        print(f"engine        cannot start: {exc}")
        return 2
    return 0


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
