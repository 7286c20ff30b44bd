"""NVIDIA hardware video codecs: are NVDEC / NVENC usable on this node, and if not, why;
and which H.264 codec a live stream opens (``live.video_encoder`` / ``live.video_decoder``).

"Listed" is not "usable": PyAV's FFmpeg may be built with ``h264_nvenc`` / ``h264_cuvid``
while the machine has no NVIDIA driver, or a GPU without the engine. So each is opened for
real: the encoder encodes one tiny frame, the decoder opens its context (that creates the
CUDA context cuvid needs). NVIDIA's PyNvVideoCodec is reported when it imports.

A probe opens a codec, so the live paths probe at most once per process, and only when a
setting asks for the hardware codec (``auto`` or ``nvenc`` / ``nvdec``); ``software``
never probes. An explicit hardware setting that cannot be met is an error, never a silent
fall back (the same policy as ``engine.device: cuda``).
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from gpu.errors import SwapcastError

ENCODER = "h264_nvenc"
DECODER = "h264_cuvid"
SOFTWARE_ENCODER = "libx264"
SOFTWARE_DECODER = "h264"  # FFmpeg's own decoder

EncoderPreference = Literal["auto", "software", "nvenc"]
DecoderPreference = Literal["auto", "software", "nvdec"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodecStatus:
    name: str
    usable: bool
    reason: str


@dataclass(frozen=True)
class CodecChoice:
    """The H.264 codec a live stream opens (a PyAV codec name), and why that one."""

    name: str
    hardware: bool
    reason: str

    @property
    def label(self) -> str:
        return _LABELS.get(self.name, self.name)

    def describe(self) -> str:
        return f"{self.label} ({self.reason})"

    def fall_back(self, exc: Exception) -> CodecChoice:
        """The software codec that takes over one stream after this hardware one failed
        (driver gone, NVENC session limit reached); logs the one warning that says why."""
        software = _SOFTWARE_FOR[self.name]
        reason = f"{self.name} failed ({type(exc).__name__}: {_short(exc)}); {software} took over"
        log.warning("a live stream's %s", reason)
        return CodecChoice(software, False, reason)


class SoftwareFallback:
    """A live codec that runs on ``codec_choice`` and, when that hardware codec fails (at
    open or mid-stream: driver gone, NVENC session limit), moves to software for good;
    ``fallback_reason`` says why."""

    codec_choice: CodecChoice
    fallback_reason: str | None = None

    @property
    def codec_name(self) -> str:
        return self.codec_choice.name

    def _fall_back(self, exc: Exception) -> None:
        """After ``exc`` from the codec: switch to software; re-raise ``exc`` when already
        there (a software codec's failure is the stream's own, not the hardware's)."""
        if not self.codec_choice.hardware:
            raise exc
        self.codec_choice = self.codec_choice.fall_back(exc)
        self.fallback_reason = self.codec_choice.reason

    def _opened(self, context: Any, reopen: Callable[[], Any]) -> Any:
        """``context`` opened (a software one with the thread budget's threads); when the
        hardware codec cannot open, software's from ``reopen`` (which builds it again for
        the new ``codec_choice``)."""
        import av

        if not self.codec_choice.hardware:
            bounded_threads(context)
        try:
            context.open()
        except av.error.FFmpegError as exc:
            self._fall_back(exc)
            return reopen()
        return context


def bounded_threads(context: Any) -> Any:
    """A software codec context (not yet open) with the node's thread budget per context
    (``gpu.threads``): each session already has its own codec threads, so a pool per
    context sized to the machine only oversubscribes it. Budget 0 leaves FFmpeg's default."""
    from gpu.threads import current

    threads = current().codec_threads
    if threads:
        context.thread_count = threads
    return context


def scale_threads() -> int:
    """``threads=`` for PyAV's ``reformat`` / ``to_ndarray``: the budget's codec threads.
    PyAV's default (0, auto) has swscale start and join a pool sized to the machine in
    every new frame's converter, i.e. for every frame of a stream: on 2 cores 2 threads
    created per conversion and 0.8 ms more CPU per 640x480 frame (RGB -> I420 and back)."""
    from gpu.threads import current

    return current().codec_threads


_LABELS = {
    ENCODER: f"NVENC ({ENCODER} through PyAV)",
    DECODER: f"NVDEC ({DECODER} through PyAV)",
    SOFTWARE_ENCODER: f"software x264 ({SOFTWARE_ENCODER})",
    SOFTWARE_DECODER: f"software FFmpeg {SOFTWARE_DECODER}",
}
_SOFTWARE_FOR = {ENCODER: SOFTWARE_ENCODER, DECODER: SOFTWARE_DECODER}
SOFTWARE_ENCODE = CodecChoice(SOFTWARE_ENCODER, False, "software")
SOFTWARE_DECODE = CodecChoice(SOFTWARE_DECODER, False, "software")


class HardwareCodecUnavailableError(SwapcastError):
    """``live.video_encoder: nvenc`` or ``live.video_decoder: nvdec`` on a node where that
    codec cannot be used."""


@dataclass(frozen=True)
class HardwareCodecs:
    nvenc: CodecStatus
    nvdec: CodecStatus
    pynvvideocodec: CodecStatus

    def encoder(self, preference: EncoderPreference = "auto") -> CodecChoice:
        return choose_video_encoder(preference, self.nvenc)

    def decoder(self, preference: DecoderPreference = "auto") -> CodecChoice:
        return choose_video_decoder(preference, self.nvdec)

    @property
    def encode_path(self) -> str:
        """What ``live.video_encoder: auto`` opens here, and why."""
        return self.encoder().describe()

    @property
    def decode_path(self) -> str:
        """What ``live.video_decoder: auto`` opens here, and why."""
        return self.decoder().describe()


def choose_video_encoder(preference: EncoderPreference = "auto", status: CodecStatus | None = None) -> CodecChoice:
    """``live.video_encoder``: NVENC when asked for (``auto``, ``nvenc``) and usable, else
    x264. ``status`` is NVENC's probe when the caller has one; else the process's cached
    probe runs, unless the preference is ``software``."""
    return _choose("video_encoder", preference, "nvenc", SOFTWARE_ENCODER, lambda: status or nvenc_status())


def choose_video_decoder(preference: DecoderPreference = "auto", status: CodecStatus | None = None) -> CodecChoice:
    """``live.video_decoder``: NVDEC (cuvid) when asked for and usable, else FFmpeg's h264."""
    return _choose("video_decoder", preference, "nvdec", SOFTWARE_DECODER, lambda: status or nvdec_status())


def _choose(setting: str, preference: str, hardware: str, software: str, probe: Callable[[], CodecStatus]) -> CodecChoice:
    if preference == "software":
        return CodecChoice(software, False, f"live.{setting}=software")
    if preference not in ("auto", hardware):
        raise SwapcastError(f"live.{setting} must be auto, software or {hardware} (got {preference!r})")
    status = probe()
    if status.usable:
        return CodecChoice(status.name, True, f"live.{setting}={preference}: {status.reason}")
    if preference == "auto":
        return CodecChoice(software, False, f"live.{setting}=auto, {status.name} not usable: {status.reason}")
    raise HardwareCodecUnavailableError(
        f"live.{setting} '{hardware}' was asked for but {status.name} cannot be used: {status.reason}; "
        f"set live.{setting} to auto or software"
    )


def nvenc_live_options(bitrate_bps: int) -> dict[str, str]:
    """h264_nvenc for live streams: the fastest preset with ultra-low-latency tuning, no
    B-frames, reordering, lookahead or output delay (one packet out per frame in), CBR
    with a one-second buffer, and forced keyframes as IDR, so each carries SPS/PPS
    in-band as x264's do."""
    return {
        "preset": "p1", "tune": "ull", "zerolatency": "1", "delay": "0", "bf": "0", "rc-lookahead": "0",
        "rc": "cbr", "bufsize": str(bitrate_bps), "forced-idr": "1",
    }


@functools.cache
def nvenc_status() -> CodecStatus:
    """NVENC's probe, once per process (it opens an encoder session)."""
    return probe_nvenc()


@functools.cache
def nvdec_status() -> CodecStatus:
    """NVDEC's probe, once per process (it creates a CUDA context)."""
    return probe_nvdec()


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
    return HardwareCodecs(nvenc_status(), nvdec_status(), probe_pynvvideocodec())


def _fraction(num: int, den: int):
    from fractions import Fraction

    return Fraction(num, den)


def _short(exc: Exception, limit: int = 160) -> str:
    text = " ".join(str(exc).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
