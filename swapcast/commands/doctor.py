"""``swapcast doctor``: what this node has and what it will use, and why."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

from gpu.errors import ModelFileError, SwapcastError
from swapcast.commands.common import add_engine_flags, config_from_args


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("doctor", help="report devices, runtimes, codecs and models")
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import av
    import onnxruntime

    from gpu.device import detect_device

    config = config_from_args(args)
    device = detect_device()
    print(f"python        {sys.version.split()[0]} on {platform.platform()} ({os.cpu_count()} CPUs)")
    memory = f", {device.memory_gb:.0f} GiB" if device.memory_gb else ""
    print(f"device        {device.backend}: {device.name}{memory} ({device.reason})")
    for line in gpu_stack_lines():
        print(line)
    print(f"onnxruntime   {onnxruntime.__version__}, providers: {', '.join(onnxruntime.get_available_providers())}")
    codecs = {name: name in av.codecs_available for name in ("libx264", "h264_nvenc", "h264_cuvid", "aac", "libvpx")}
    print(f"pyav          {av.__version__}, " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in codecs.items()))
    hardware = _hardware_codecs()
    for status in (hardware.nvenc, hardware.nvdec, hardware.pynvvideocodec) if hardware else ():
        print(f"{_label(status.name):13} {'usable' if status.usable else 'not usable'}: {status.reason}")
    plan = plan_lines(config.engine.device, config.engine.runner, hardware,
                      video_encoder=config.live.video_encoder, video_decoder=config.live.video_decoder)
    for line in plan:
        print(line)
    # a setting this node cannot meet makes `serve` refuse to start: say so with the exit code too
    unmet = [line for line in plan if line.startswith(("will use      no ", "will use      nothing"))]
    for line in builtin_model_lines(config.engine.engine_cache_dir):
        print(line)
    if config.engine.models_dir:
        from gpu.models.user_models import UserModels

        found = UserModels.discover(config.engine.models_dir, prefer_fp16=config.engine.prefer_fp16)
        for role in ("detector", "embedder", "swapper", "occluder", "parser", "content_gate"):
            print(f"user model    {role:18} {getattr(found, role) or 'not found'}")
        print(f"user model    {'enhancers':18} {', '.join(map(str, found.enhancers)) or 'not found'}")
    try:
        from gpu.engine import FaceEngine

        engine = FaceEngine(config.engine.settings())
        print(f"engine        swapper={engine.swapper.name}, still-image detector={engine.detector_name}")
        for line in processor_lines(engine.processors.describe()):
            print(line)
    except SwapcastError as exc:
        print(f"engine        cannot start: {exc}")
        return 2
    return 2 if unmet else 0


def builtin_model_lines(cache_dir: Path | None) -> list[str]:
    """The built-in models and where they come from: the tracking models from the mediapipe
    wheel, or on a node without it (a GPU image) the converted ones that ``cache_dir``'s
    manifest lists, as the engine will load them; dlib's two."""
    from gpu.models.builtin import DlibModels, MediapipeFaceModels
    from gpu.models.converted_tracking import MANIFEST_NAME, converted_files

    lines = []
    try:
        wheel = MediapipeFaceModels.locate()
        tracking = {"blazeface_short": wheel.blazeface_short, "blazeface_full": wheel.blazeface_full,
                    "face_mesh": wheel.face_mesh}
        lines += [f"builtin       {name:18} {path}" for name, path in tracking.items()]
    except ModelFileError as absent:
        if cache_dir is None:
            lines.append(f"tracking      none: no mediapipe wheel ({absent.problem}) and engine.engine_cache_dir is not set")
        else:
            try:
                files = converted_files(cache_dir)
                lines += [f"converted     {tflite:18} {path} (by {MANIFEST_NAME}; no mediapipe wheel)"
                          for tflite, path in files.items()]
            except ModelFileError as exc:
                lines.append(f"tracking      not usable: {exc}")
    try:
        dlib = DlibModels.locate()
        lines += [f"builtin       dlib_{name:13} {path}" for name, path in vars(dlib).items()]
    except ModelFileError as exc:
        lines.append(f"builtin       dlib models not usable: {exc}")
    return lines


def processor_lines(described: list[dict]) -> list[str]:
    """What each loaded processor will do (``Processors.describe``)."""
    if not described:
        return ["processors    none (no occluder, parser, enhancer or content gate file in the models folder)"]
    lines = []
    for entry in described:
        kind, model = entry["kind"], entry["model"]
        if kind == "parser":
            what = f"keeps {', '.join(entry['keep_regions'])}"
        elif kind == "enhancer":
            weight = f", weight {entry['weight']}" if "weight" in entry else ""
            what = (f"{entry['size']} px, blend {entry['blend']}{weight}; offline jobs and swap"
                    + (f" and live sessions within {entry['live_budget_ms']} ms a frame" if entry["live"]
                       else " (live sessions: engine.processors.enhancer: live)"))
        elif kind == "content_gate":
            what = f"refuses above {entry['threshold']}, one frame per {entry['sample_s']} s of streams and jobs"
        else:
            what = "what covers a face stays the target's"
        lines.append(f"processor     {kind:13} {model}: {what}")
    return lines


def gpu_stack_lines() -> list[str]:
    """CUDA, CuPy, PyTorch and TensorRT: versions, or why each is missing."""
    lines = []
    try:
        import cupy

        try:
            runtime = cupy.cuda.runtime.runtimeGetVersion()
            driver = cupy.cuda.runtime.driverGetVersion()
            cuda = f"CUDA runtime {runtime // 1000}.{runtime % 1000 // 10}, driver supports {driver // 1000}.{driver % 1000 // 10}"
        except Exception as exc:  # no driver
            cuda = f"no usable CUDA driver ({_one_line(exc)})"
        lines.append(f"cupy          {cupy.__version__}; {cuda}")
    except ImportError:
        lines.append("cupy          not installed (device arrays stay NumPy; GPU nodes install cupy-cuda13x)")
    except Exception as exc:
        lines.append(f"cupy          does not import ({_one_line(exc)})")
    if _has("torch"):
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            where = f"CUDA {torch.version.cuda}, {props.name}, {props.total_memory / 2**30:.0f} GiB"
        else:
            where = "CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda} build, no device visible"
        onnx2torch = "onnx2torch installed" if _has("onnx2torch") else "onnx2torch missing (only the built-in mesh graph converts)"
        lines.append(f"torch         {torch.__version__} ({where}); {onnx2torch}")
    else:
        lines.append("torch         not installed (the torch runner needs pip install 'swapcast[gpu]')")
    from gpu.runners.tensorrt import tensorrt_version

    version = tensorrt_version() if _has("tensorrt") else None
    if version is None:
        lines.append(
            "tensorrt      not installed: the TensorRT runner is for production GPU nodes that have it, "
            "and is not exercised by this repo's CI or GPU checks"
        )
    else:
        lines.append(f"tensorrt      {version} (the TensorRT runner is not exercised by this repo's CI or GPU checks)")
    return lines


def plan_lines(device_setting: str, runner_setting: str, hardware, *, video_encoder: str = "auto",
               video_decoder: str = "auto") -> list[str]:
    """What the node will use and why: device, runner, and the live H.264 decoder and
    encoder (``live.video_decoder`` / ``live.video_encoder`` against the probes)."""
    from gpu.device import resolve_device
    from gpu.runners.select import choose_runner

    lines = []
    try:
        device = resolve_device(device_setting)
        lines.append(f"will use      device {device.kind} (engine.device={device_setting}: {device.reason})")
    except SwapcastError as exc:
        return [f"will use      nothing: engine.device={device_setting} cannot be met: {exc}"]
    try:
        choice = choose_runner(device, runner_setting)
        lines.append(f"will use      runner {choice.runner} on {choice.device} (engine.runner={runner_setting}: {choice.reason})")
    except SwapcastError as exc:
        lines.append(f"will use      no runner: engine.runner={runner_setting} cannot be met: {exc}")
    if hardware is not None:
        lines.append(_codec_line("decode", "decoder", lambda: hardware.decoder(video_decoder)))
        lines.append(_codec_line("encode", "encoder", lambda: hardware.encoder(video_encoder)))
    return lines


def _codec_line(verb: str, noun: str, choose) -> str:
    try:
        return f"will use      {verb} {choose().describe()}"
    except SwapcastError as exc:  # an explicit nvenc / nvdec this node cannot open
        return f"will use      no {noun}: {exc}"


def _hardware_codecs():
    try:
        from streamer.media.hwcodecs import detect_hardware_codecs

        return detect_hardware_codecs()
    except Exception as exc:  # a probe must never stop the doctor
        print(f"nvenc/nvdec   probe failed ({_one_line(exc)})")
        return None


def _label(name: str) -> str:
    return {"h264_nvenc": "nvenc", "h264_cuvid": "nvdec", "PyNvVideoCodec": "pynvvideocodec"}.get(name, name)


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())[:160]


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
