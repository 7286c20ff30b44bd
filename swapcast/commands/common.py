"""What several commands share: building the config from flags and the engine from it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpu.errors import SwapcastError

from swapcast.config import Config, SwapConfig, load_config


def add_engine_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("engine")
    group.add_argument("--swapper", choices=["auto", "mesh", "mesh3d", "inswapper"], help="swap model (default: auto)")
    group.add_argument("--models", metavar="DIR", help="folder with user-supplied ONNX models (det_10g, w600k_r50, inswapper_128)")
    group.add_argument("--fp16", action="store_true", default=None, help="prefer inswapper_128_fp16.onnx")


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TLS (config section tls; a remote browser needs HTTPS for its camera)")
    group.add_argument("--tls-cert", metavar="PEM", help="certificate (chain): serve HTTPS; SIGHUP reloads it")
    group.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    group.add_argument("--rtmps-port", type=int, help="also accept RTMPS (RTMP over TLS) here, same certificate (0 = any free)")
    group.add_argument("--http-redirect-port", type=int, help="plain-HTTP port that only redirects to HTTPS")


def tls_overrides(args: argparse.Namespace) -> dict[str, Any]:
    get = lambda name: getattr(args, name, None)  # noqa: E731 - flags absent from a command are None
    return {"tls": {"cert_file": get("tls_cert"), "key_file": get("tls_key"),
                    "http_redirect_port": get("http_redirect_port")},
            "rtmp": {"tls_port": get("rtmps_port")}}


def add_swap_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("swap options")
    group.add_argument("--faces", choices=["all", "largest", "reference"], help="which target faces to swap (default: all)")
    group.add_argument("--reference", metavar="IMAGE", help="with --faces reference: a photo of the person to swap")
    group.add_argument("--reference-threshold", type=float, metavar="D", help="identity distance for --faces reference (default 0.6)")
    group.add_argument("--mouth-mask", action="store_true", default=None, help="keep the target's own mouth")
    group.add_argument("--blend", type=float, metavar="0..1", help="swap strength (default 1)")
    group.add_argument("--feather", type=float, metavar="F", help="mask edge softness, fraction of the face crop (default 0.06)")
    group.add_argument("--no-colour-match", dest="colour_match", action="store_false", default=None, help="keep the source's own skin colour")
    group.add_argument("--no-smoothing", dest="smoothing", action="store_false", default=None, help="no temporal landmark smoothing")
    group.add_argument("--occlusion", choices=["auto", "objects", "off"], help="keep what is in front of a face (hand, cup, the "
                       "glasses it wears; objects: not its glasses) in front "
                       f"(default: {SwapConfig.model_fields['occlusion'].default})")
    group.add_argument("--eyes", choices=["target", "source"], help="mesh3d: the source's eyes (default) or the target's own (its gaze)")


def add_map_flags(parser: argparse.ArgumentParser, people_ids: bool) -> None:
    """``--map WHO=FACE`` (repeatable) and ``--unmapped``: map faces (docs: guides/map-faces)."""
    group = parser.add_argument_group("map faces (each person their own source)")
    who = "a reference photo of the person, or the id 'swapcast faces scan' reported (person-2)" if people_ids \
        else "a reference photo of the person"
    group.add_argument("--map", action="append", default=[], metavar="WHO=FACE",
                       help=f"WHO wears FACE (a photo, or 'keep': stays as they are); WHO is {who}; repeatable")
    group.add_argument("--unmapped", choices=["source", "keep"],
                       help="with --map: people it does not name wear --source (default when given) or stay as they are "
                            "(keep; the default without --source)")


def map_photos(args: argparse.Namespace, people_ids: bool = False) -> dict[str, str]:
    """``--map WHO=FACE`` entries as {who: face} (photo paths, person ids, ``keep``),
    checked: a clear error naming the bad entry."""
    from streamer.pipeline.people_map import KEEP, is_person_id

    out: dict[str, str] = {}
    for entry in getattr(args, "map", None) or []:
        who, sep, face = entry.partition("=")
        who, face = who.strip(), face.strip()
        if not sep or not who or not face:
            raise SwapcastError(f"--map {entry!r}: expected WHO=FACE, e.g. --map ref.jpg=face.jpg or --map ref.jpg=keep")
        if is_person_id(who):
            if not people_ids:
                raise SwapcastError(f"--map {entry!r}: name the person by a reference photo here (person ids "
                                    "hold only within one file)")
        elif not Path(who).is_file():
            raise SwapcastError(f"--map {entry!r}: {who} is no file (a reference photo of the person"
                                f"{', or a person id such as person-2' if people_ids else ''})")
        if face != KEEP and not Path(face).is_file():
            raise SwapcastError(f"--map {entry!r}: {face} is no file (a photo of the face to wear, or 'keep')")
        if who in out:
            raise SwapcastError(f"--map names {who} twice")
        out[who] = face
    return out


def swap_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The swap options given as flags (None = not given)."""
    get = lambda name: getattr(args, name, None)  # noqa: E731 - flags absent from a command are None
    values = {
        "face_selection": get("faces"),
        "reference_threshold": get("reference_threshold"),
        "mouth_mask": get("mouth_mask"),
        "blend": get("blend"),
        "feather": get("feather"),
        "colour_match": get("colour_match"),
        "smoothing": get("smoothing"),
        "occlusion": get("occlusion"),
        "eyes": get("eyes"),
        "unmapped": get("unmapped"),
    }
    return {key: value for key, value in values.items() if value is not None}


def config_from_args(args: argparse.Namespace) -> Config:
    """Defaults < config file < environment < these flags."""
    get = lambda name: getattr(args, name, None)  # noqa: E731 - flags absent from a command are None
    tls = tls_overrides(args)
    overrides: dict[str, Any] = {
        "engine": {"swapper": get("swapper"), "models_dir": get("models"), "prefer_fp16": get("fp16")},
        "swap": swap_overrides(args),
        "server": {"host": get("host"), "port": get("port")},
        "rtmp": {"port": get("rtmp_port"), **tls["rtmp"]},
        "tls": tls["tls"],
        "cluster": {"redis_url": get("redis"), "advertise": get("advertise"), "node_id": get("node_id")},
    }
    return load_config(args.config, overrides=overrides)
