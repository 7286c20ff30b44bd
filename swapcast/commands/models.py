"""``swapcast models convert``: the mediapipe wheel's face models as ONNX graphs, ahead of time.
``swapcast models export --triton DIR``: a Triton model repository for the swap model (and the tracking graphs).

A node with the mediapipe wheel converts them at first start anyway
(``gpu.models.tflite_onnx.convert_builtin``); one without it (a GPU image, a device machine)
loads a folder this command wrote, by the manifest written beside the models
(``gpu.models.converted_tracking``). The image's build stage runs it. The export writes the
swap model the config's engine runs (``gpu.models.triton_repository``) for nodes with ``engine.runner: triton``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from gpu.errors import SwapcastError
from swapcast.commands.common import config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("models", help="convert the built-in face models to ONNX; export a Triton repository")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    convert = actions.add_parser("convert", help="convert (or find cached) the wheel's TFLite face models, "
                                 "with the manifest a node without mediapipe loads them by")
    convert.add_argument("--cache-dir", type=Path, metavar="DIR",
                         help="where converted models are cached (default: engine.engine_cache_dir of the config)")
    convert.set_defaults(run=run_convert)
    export = actions.add_parser("export", help="write a Triton model repository for the swap model of the config")
    export.add_argument("--triton", type=Path, metavar="DIR", required=True, help="the model repository folder to write")
    export.add_argument("--instances", type=int, default=1, metavar="N", help="model instances per GPU (default 1)")
    export.add_argument("--kind", choices=("gpu", "cpu"), default="gpu", help="instance kind (default gpu)")
    export.set_defaults(run=run_export)


def run_convert(args: argparse.Namespace) -> int:
    from gpu.models.tflite_onnx import convert_builtin
    from gpu.models.converted_tracking import TrackingManifest

    cache_dir = args.cache_dir or config_from_args(args).engine.engine_cache_dir
    if cache_dir is None:
        raise SwapcastError("no cache folder: pass --cache-dir DIR or set engine.engine_cache_dir")
    started = time.perf_counter()
    converted = convert_builtin(cache_dir)
    for name, path in converted.items():
        print(f"{name:42} -> {path} ({path.stat().st_size / 1e6:.1f} MB)")
    print(f"{len(converted)} models ready in {time.perf_counter() - started:.2f} s; "
          f"manifest {TrackingManifest.path(cache_dir)}")
    return 0


def run_export(args: argparse.Namespace) -> int:
    from gpu.models.triton_repository import BatchingPlan, swap_model, write_repository

    if args.instances < 1:
        raise SwapcastError(f"--instances must be at least 1 (got {args.instances})")
    engine = config_from_args(args).engine
    models = [swap_model(engine.swapper, engine.models_dir, engine.prefer_fp16)]
    if engine.tracker == "graphs":
        models += tracking_models(engine.engine_cache_dir)
    plan = BatchingPlan(engine.max_batch, engine.max_queue_delay_ms, args.instances, args.kind)
    for folder in write_repository(args.triton, models, plan, engine.crop_size):
        print(f"{folder.name:32} -> {folder} (ONNX Runtime backend; TensorRT variant: {folder}_trt, see BUILD.txt)")
    return 0


def tracking_models(cache_dir: Path | None) -> list:
    """The converted tracking graphs the node's tracker runs (``engine.tracker: graphs``),
    named after their TFLite files, for a repository that serves every model of a node
    (the node itself still runs them in process: see docs/operations/gpu-nodes.md).
    Without the mediapipe wheel, from ``cache_dir``'s converted folder."""
    import onnx

    from gpu.models.converted_tracking import tracking_models as converted_models

    return [(Path(name).stem, model if isinstance(model, onnx.ModelProto) else onnx.load(str(model)))
            for name, model in converted_models(cache_dir).items()]
