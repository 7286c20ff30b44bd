"""Real-time video encoding for aiortc senders, without forking aiortc.

aiortc's ``H264Encoder`` runs x264 at preset *medium* (150 fps/core at 640x480, 71 at 720p)
and clamps the congestion controller's bitrate to 0.5-3 Mbps; its ``Vp8Encoder`` clamps to
0.25-1.5 Mbps. Both create their codec context inside ``encode``. The subclasses here
create that context themselves, just before the base class would, with the options we
want (x264 ``ultrafast`` + ``zerolatency``, or NVENC in its low-latency mode when
``live.video_encoder`` chose it; libvpx ``deadline=realtime`` with a high ``cpu-used``);
the base class then finds a context that matches the frame and the target bitrate and uses
it as its own. The bitrate bounds come from ``config.webrtc``.

aiortc's senders build their encoder with ``aiortc.rtcrtpsender.get_encoder(codec)``;
:func:`install` swaps that one name for :func:`realtime_encoder`, process-wide (every
``RTCPeerConnection`` of the process, ours and test clients alike). Frames are encoded at
the resolution the peer sent; nothing is scaled. It also swaps the receivers'
``get_decoder`` for :func:`bounded_decoder`: aiortc's decoders with the node's codec threads
(``gpu.threads``), like the encoders here, instead of FFmpeg's pool per context.
"""

from __future__ import annotations

import fractions
import multiprocessing
from dataclasses import dataclass
from typing import Literal

import aiortc.rtcrtpreceiver
import aiortc.rtcrtpsender
from aiortc.codecs import get_capabilities, get_decoder, get_encoder
from aiortc.codecs.base import Decoder, Encoder
from aiortc.codecs.h264 import H264Encoder
from aiortc.codecs.vpx import Vp8Encoder, number_of_threads
from aiortc.rtcrtpparameters import RTCRtpCodecCapability, RTCRtpCodecParameters
import av

from gpu.threads import current as current_threads
from streamer.media.hwcodecs import (
    SOFTWARE_ENCODE,
    CodecChoice,
    SoftwareFallback,
    bounded_threads,
    choose_video_encoder,
    nvenc_live_options,
    scale_threads,
)

VideoCodec = Literal["h264", "vp8"]


@dataclass(frozen=True)
class EncoderTuning:
    codec: VideoCodec = "h264"  # preferred codec when the peer offers both
    min_bitrate_bps: int = 500_000
    max_bitrate_bps: int = 4_000_000
    x264_preset: str = "ultrafast"  # always with tune=zerolatency
    vp8_cpu_used: int = 8  # 0 (best) .. 16 (fastest) in libvpx's realtime mode
    h264_encoder: CodecChoice = SOFTWARE_ENCODE  # x264, or NVENC (live.video_encoder)

    @property
    def start_bitrate_bps(self) -> int:
        """Where a new encoder starts before the congestion controller speaks: 1 Mbps
        (aiortc's H.264 default) kept within the bounds."""
        return self.clamp(1_000_000)

    def clamp(self, bitrate: int) -> int:
        return max(self.min_bitrate_bps, min(int(bitrate), self.max_bitrate_bps))

    @classmethod
    def from_config(cls, webrtc, live=None) -> EncoderTuning:
        """From ``config.webrtc`` (codec, bitrate bounds) and ``config.live`` (x264 preset,
        H.264 encoder: this raises when ``video_encoder: nvenc`` cannot be met)."""
        low, high = webrtc.min_bitrate_kbps * 1000, webrtc.max_bitrate_kbps * 1000
        return cls(
            codec=webrtc.codec,
            min_bitrate_bps=min(low, high),
            max_bitrate_bps=max(low, high),
            x264_preset=getattr(live, "preset", None) or "ultrafast",
            h264_encoder=choose_video_encoder(live.video_encoder) if live is not None else SOFTWARE_ENCODE,
        )


_tuning = EncoderTuning()


def current_tuning() -> EncoderTuning:
    return _tuning


class _BoundedBitrate:
    """``target_bitrate`` kept within the tuning's bounds (the congestion controller sets it)."""

    tuning: EncoderTuning

    def _init_bitrate(self) -> None:
        self.tuning = _tuning  # the tuning at creation time, for the encoder's whole life
        self._bounded_target = self.tuning.start_bitrate_bps

    @property
    def target_bitrate(self) -> int:
        return self._bounded_target

    @target_bitrate.setter
    def target_bitrate(self, bitrate: int) -> None:
        self._bounded_target = self.tuning.clamp(bitrate)


def _needs_new_context(codec, frame: av.VideoFrame, target: int) -> bool:
    # aiortc's own rule: a new context when the size changes or the bitrate moves > 10 %
    return codec is None or (
        frame.width != codec.width
        or frame.height != codec.height
        or abs(target - codec.bit_rate) / codec.bit_rate > 0.1
    )


class RealtimeH264Encoder(SoftwareFallback, _BoundedBitrate, H264Encoder):
    """aiortc's H.264 packetiser with x264 ultrafast/zerolatency, or NVENC in its
    low-latency mode, Baseline either way (WebRTC's packetization-mode 1). If NVENC cannot
    open or fails, x264 takes over this sender from the frame that failed, sent as a
    keyframe (``fallback_reason`` says why)."""

    def __init__(self) -> None:
        H264Encoder.__init__(self)
        self._init_bitrate()
        self.codec_choice = self.tuning.h264_encoder

    def _encode_frame(self, frame: av.VideoFrame, force_keyframe: bool):
        if _needs_new_context(self.codec, frame, self.target_bitrate):
            self.buffer_data = b""
            self.buffer_pts = None
            self.codec = self._open(frame)
        # the base class encodes lazily (a generator): run it here, where a failure is caught
        try:
            return list(super()._encode_frame(frame, force_keyframe))
        except av.error.FFmpegError as exc:
            self._fall_back(exc)
            self.codec = self._open(frame)
            return list(super()._encode_frame(frame, True))

    def _open(self, frame: av.VideoFrame) -> av.CodecContext:
        codec = av.CodecContext.create(self.codec_name, "w")
        codec.width = frame.width
        codec.height = frame.height
        codec.bit_rate = self.target_bitrate
        codec.pix_fmt = "yuv420p"
        codec.framerate = fractions.Fraction(30, 1)
        codec.time_base = fractions.Fraction(1, 30)
        if self.codec_choice.hardware:
            self.applied_options = {**nvenc_live_options(self.target_bitrate), "profile": "baseline"}
        else:
            self.applied_options = {"preset": self.tuning.x264_preset, "tune": "zerolatency", "level": "31"}
            codec.profile = "Baseline"
        codec.options = dict(self.applied_options)  # PyAV empties this dict once the codec opens
        return self._opened(codec, lambda: self._open(frame))


class RealtimeVp8Encoder(_BoundedBitrate, Vp8Encoder):
    """aiortc's VP8 packetiser with libvpx in realtime mode at a high ``cpu-used``."""

    def __init__(self) -> None:
        Vp8Encoder.__init__(self)
        self._init_bitrate()

    def encode(self, frame, force_keyframe: bool = False):
        if frame.format.name != "yuv420p":
            frame = frame.reformat(format="yuv420p", threads=scale_threads())
        target = self.target_bitrate
        if _needs_new_context(self.codec, frame, target):
            codec = av.CodecContext.create("libvpx", "w")
            codec.width = frame.width
            codec.height = frame.height
            codec.bit_rate = target
            codec.pix_fmt = "yuv420p"
            codec.gop_size = 3000
            codec.qmin = 2
            codec.qmax = 56
            self.applied_options = {  # aiortc's CBR settings, with our speed
                "bufsize": str(target),
                "cpu-used": str(-self.tuning.vp8_cpu_used),  # negative = fixed speed
                "deadline": "realtime",
                "lag-in-frames": "0",
                "minrate": str(target),
                "maxrate": str(target),
                "noise-sensitivity": "4",
                "overshoot-pct": "15",
                "partitions": "0",
                "static-thresh": "1",
                "undershoot-pct": "100",
            }
            codec.options = dict(self.applied_options)
            budget = current_threads().codec_threads
            codec.thread_count = budget or number_of_threads(frame.width * frame.height, multiprocessing.cpu_count())
            self.codec = codec
        return super().encode(frame, force_keyframe)


def realtime_encoder(codec: RTCRtpCodecParameters) -> Encoder:
    """Drop-in for ``aiortc.codecs.get_encoder``: tuned video encoders, aiortc's audio ones."""
    mime = codec.mimeType.lower()
    if mime == "video/h264":
        return RealtimeH264Encoder()
    if mime == "video/vp8":
        return RealtimeVp8Encoder()
    return get_encoder(codec)


def bounded_decoder(codec: RTCRtpCodecParameters) -> Decoder:
    """Drop-in for ``aiortc.codecs.get_decoder``: aiortc's decoder, its FFmpeg context (made
    in its constructor, opened at the first frame) held to the thread budget."""
    decoder = get_decoder(codec)
    context = getattr(decoder, "codec", None)
    if context is not None:
        bounded_threads(context)
    return decoder


def install(tuning: EncoderTuning) -> None:
    """Make every aiortc sender of this process use the tuned encoders, and every receiver
    the bounded decoders (idempotent; the latest tuning applies to encoders created from
    now on)."""
    global _tuning
    _tuning = tuning
    aiortc.rtcrtpsender.get_encoder = realtime_encoder
    aiortc.rtcrtpreceiver.get_decoder = bounded_decoder


def video_codec_preferences(preferred: VideoCodec) -> list[RTCRtpCodecCapability]:
    """aiortc's video codecs with ``preferred`` first, for ``setCodecPreferences``: the
    answer keeps the preferred codec when the offer has it, and falls back to the others."""
    codecs = get_capabilities("video").codecs
    name = {"h264": "video/h264", "vp8": "video/vp8"}[preferred]
    return sorted(codecs, key=lambda c: c.mimeType.lower() != name)
