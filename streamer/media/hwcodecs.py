"""NVIDIA hardware video codecs: are NVDEC / NVENC usable on this node, and if not, why.

"Listed" is not "usable": PyAV's FFmpeg may be built with ``h264_nvenc`` / ``h264_cuvid``
while the machine has no NVIDIA driver, or a GPU without the engine. So each is opened for
real: the encoder encodes one tiny frame, the decoder opens its context (that creates the
CUDA context cuvid needs). NVIDIA's PyNvVideoCodec is reported when it imports.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any
from dataclasses import dataclass

ENCODER = "h264_nvenc"
DECODER = "h264_cuvid"


@dataclass(frozen=True)
class CodecStatus:
    name: str
    usable: bool
    reason: str


@dataclass(frozen=True)
class HardwareCodecs:
    nvenc: CodecStatus
    nvdec: CodecStatus
    pynvvideocodec: CodecStatus

    @property
    def encode_path(self) -> str:
        if self.nvenc.usable:
            return f"NVENC ({ENCODER} through PyAV)"
        return f"software x264 / VP8 (NVENC: {self.nvenc.reason})"

    @property
    def decode_path(self) -> str:
        if self.nvdec.usable:
            return f"NVDEC ({DECODER} through PyAV)"
        return f"software (FFmpeg; NVDEC: {self.nvdec.reason})"


def _probe(codec: str, trial: Callable[[Any], str | None], success: str) -> CodecStatus:
    """Is ``codec`` listed by PyAV's FFmpeg, and does ``trial(av)`` open it? ``trial``
    returns None on success or why it did not work."""
    try:
        import av
    except Exception as exc:
        return CodecStatus(codec, False, f"PyAV does not import ({exc})")
    if codec not in av.codecs_available:
        return CodecStatus(codec, False, f"this FFmpeg build (PyAV {av.__version__}) has no {codec}")
    try:
        failure = trial(av)
    except Exception as exc:  # av.error.* on a machine without the driver or the engine
        return CodecStatus(codec, False, f"listed, but opening it failed ({type(exc).__name__}: {_short(exc)})")
    return CodecStatus(codec, failure is None, failure or success)


def probe_nvenc(codec: str = ENCODER) -> CodecStatus:
    def encode_a_frame(av) -> str | None:
        import numpy as np

        context = av.CodecContext.create(codec, "w")
        context.width, context.height = 256, 144  # NVENC's minimum is around 145x49; keep it safe
        context.pix_fmt = "yuv420p"
        context.time_base = _fraction(1, 30)
        context.open()
        frame = av.VideoFrame.from_ndarray(np.zeros((144 * 3 // 2, 256), np.uint8), format="yuv420p")
        frame.pts = 0
        packets = list(context.encode(frame)) + list(context.encode(None))
        return None if packets else "opened but produced no packet"

    return _probe(codec, encode_a_frame, "opened and encoded a test frame")


def probe_nvdec(codec: str = DECODER) -> CodecStatus:
    def open_decoder(av) -> None:
        av.CodecContext.create(codec, "r").open()  # cuvid creates its CUDA context and parser here

    return _probe(codec, open_decoder, "opened a decoder context")


def probe_pynvvideocodec() -> CodecStatus:
    try:
        module = importlib.import_module("PyNvVideoCodec")
    except Exception as exc:
        reason = "not installed" if isinstance(exc, ImportError) else f"does not import ({type(exc).__name__}: {_short(exc)})"
        return CodecStatus("PyNvVideoCodec", False, reason)
    return CodecStatus("PyNvVideoCodec", True, f"imports (version {getattr(module, '__version__', 'unknown')})")


def detect_hardware_codecs() -> HardwareCodecs:
    return HardwareCodecs(probe_nvenc(), probe_nvdec(), probe_pynvvideocodec())


def _fraction(num: int, den: int):
    from fractions import Fraction

    return Fraction(num, den)


def _short(exc: Exception, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
