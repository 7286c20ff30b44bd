"""H.264 for live streams: bitstream framing (Annex B <-> AVCC, the avcC record) and a
low-latency decoder/encoder pair around PyAV, in software or on NVDEC / NVENC
(``streamer.media.hwcodecs`` chooses; ``live.video_decoder`` / ``live.video_encoder``).

RTMP/FLV carries AVCC (4-byte length before each NAL unit, parameters in an avcC record);
libx264 and NVENC emit Annex B (start codes, SPS/PPS in-band on keyframes)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.frame import PictureType

from streamer.media.hwcodecs import (
    SOFTWARE_DECODE,
    SOFTWARE_ENCODE,
    CodecChoice,
    SoftwareFallback,
    nvenc_live_options,
)
from streamer.media.picture_limits import H264SizeGuard, check_frame_size
from streamer.media.stream_guard import bound_decoder
from streamer.media.yuv import i420_frame, rgb_to_i420
from streamer.rtmp.flv import avc_decoder_config, split_annexb

MS = Fraction(1, 1000)
NAL_SPS, NAL_PPS, NAL_AUD = 7, 8, 9


def to_avcc(units: list[bytes]) -> bytes:
    """NAL units framed with 4-byte lengths, as FLV NALU packets carry them."""
    return b"".join(len(unit).to_bytes(4, "big") + unit for unit in units)


@dataclass(frozen=True)
class EncodedVideo:
    """One encoded frame in AVCC framing, times in milliseconds."""

    data: bytes
    pts: int
    dts: int
    keyframe: bool


class H264Decoder(SoftwareFallback):
    """Decodes AVCC samples after an avcC sequence header without adding a frame of delay:
    FFmpeg's h264 with slice threading only, or NVDEC (h264_cuvid) with no display delay
    when ``codec`` chose it. If cuvid cannot open or fails, the stream goes on with FFmpeg's
    decoder from the sample that failed (``fallback_reason`` says why). An SPS, in the
    sequence header or in-band, that declares a picture size the node does not take raises
    ``FrameSizeError`` before either decoder reads it (and allocates that size), one that
    cannot be read ``UnreadableHeader``."""

    def __init__(self, codec: CodecChoice = SOFTWARE_DECODE) -> None:
        self.codec_choice = codec
        self._context: av.CodecContext | None = None
        self._record = b""
        self._sizes = H264SizeGuard()

    @property
    def configured(self) -> bool:
        return self._context is not None

    def configure(self, avcc_record: bytes) -> None:
        self._sizes = H264SizeGuard(avcc_record)
        self._record = avcc_record
        self._context = self._open()

    def decode(self, sample: bytes, dts: int, composition_offset: int = 0) -> list[av.VideoFrame]:
        """Frames (pts in ms) the sample completes; [] before the first sequence header."""
        if self._context is None:
            return []
        self._sizes.check(sample)
        packet = av.Packet(sample)
        packet.dts, packet.pts, packet.time_base = dts, dts + composition_offset, MS
        try:
            return list(self._context.decode(packet))
        except av.error.InvalidDataError:
            raise  # a damaged sample: the stream's fault, whichever decoder reads it
        except av.error.FFmpegError as exc:
            self._fall_back(exc)
            self._context = self._open()
            return list(self._context.decode(packet))

    def flush(self) -> list[av.VideoFrame]:
        """The frames the decoder still holds (a stream with B-frames keeps the last ones back
        for reordering): at the end of a publish every frame sent comes out. The decoder is
        then ready for a new run of samples from a keyframe."""
        if self._context is None:
            return []
        try:
            frames = list(self._context.decode(None))
        except av.error.FFmpegError:  # a decoder in a bad state has nothing to give back
            frames = []
        self._context = self._open()
        return frames

    def _open(self) -> av.CodecContext:
        context = av.CodecContext.create(self.codec_name, "r")
        context.extradata = self._record
        bound_decoder(context)  # behind the SPS guard: no picture over 4096x4096 is ever allocated
        if not self.codec_choice.hardware:
            context.thread_type = "SLICE"
            return context  # opens on its first packet
        context.options = {**context.options, "flags": "+low_delay"}  # cuvid: hand each frame out as soon as it is decoded
        return self._opened(context, self._open)


class H264Encoder(SoftwareFallback):
    """H.264 tuned for live: x264 at the given preset with zerolatency, or NVENC in its
    low-latency mode when ``codec`` chose it (``nvenc_live_options``); either way no
    lookahead or B-frames (one packet out per frame in), CBR-like bitrate, and keyframes
    forced by *time* so the interval stays exact however many frames the latency policy
    drops. If NVENC cannot open or fails mid-stream (driver gone, session limit reached),
    x264 takes over from the frame that failed, re-encoded as a keyframe
    (``fallback_reason`` says why; ``sequence_header`` changes with it)."""

    def __init__(self, width: int, height: int, *, preset: str = "ultrafast", bitrate_kbps: int = 2500,
                 keyframe_interval_s: float = 2.0, fps_hint: float = 30.0, codec: CodecChoice = SOFTWARE_ENCODE) -> None:
        check_frame_size(width, height)
        self.width, self.height = width - width % 2, height - height % 2
        self.keyframe_interval_ms = int(keyframe_interval_s * 1000)
        self.codec_choice = codec
        self._preset, self._bitrate_kbps, self._fps_hint = preset, bitrate_kbps, fps_hint
        self._context = self._open()
        self._last_keyframe: int | None = None
        self.sequence_header: bytes | None = None  # avcC, from the latest keyframe's SPS/PPS

    def encode(self, rgb: np.ndarray, pts: int) -> list[EncodedVideo]:
        frame = i420_frame(rgb_to_i420(rgb[: self.height, : self.width]))
        frame.pts, frame.time_base = pts, MS
        if self._last_keyframe is None or pts - self._last_keyframe >= self.keyframe_interval_ms:
            frame.pict_type = PictureType.I
            self._last_keyframe = pts
        try:
            packets = self._context.encode(frame)
        except av.error.FFmpegError as exc:
            self._fall_back(exc)
            self._context = self._open()
            frame.pict_type, self._last_keyframe = PictureType.I, pts  # the new encoder starts on a keyframe
            packets = self._context.encode(frame)
        return [self._packet(packet) for packet in packets]

    def _open(self) -> av.CodecContext:
        context = av.CodecContext.create(self.codec_name, "w")
        context.width, context.height, context.pix_fmt = self.width, self.height, "yuv420p"
        context.time_base = MS
        # the encoders' rate control budgets bits per frame from the frame rate, not from
        # the millisecond time base (which they would read as 1000 fps)
        context.framerate = Fraction(self._fps_hint).limit_denominator(1001)
        kbps = self._bitrate_kbps
        context.bit_rate = kbps * 1000
        if self.codec_choice.hardware:
            # keyframes come from the forced ones (by time); NVENC's own only every 600 frames
            context.options = {**nvenc_live_options(kbps * 1000), "g": "600"}
        else:
            context.options = {
                "preset": self._preset,
                "tune": "zerolatency",
                # keyframes come from force_keyframe (by time); x264's own ones only as a fallback
                "x264-params": f"keyint=600:min-keyint=1:scenecut=0:vbv-maxrate={kbps}:vbv-bufsize={kbps}",
            }
        return self._opened(context, self._open)

    def _packet(self, packet: av.Packet) -> EncodedVideo:
        units = split_annexb(bytes(packet))
        if packet.is_keyframe:
            sps = next((u for u in units if u[0] & 0x1F == NAL_SPS), None)
            pps = next((u for u in units if u[0] & 0x1F == NAL_PPS), None)
            if sps is not None and pps is not None:
                self.sequence_header = avc_decoder_config(sps, pps)
        # parameter sets travel in the sequence header; access unit delimiters are not needed
        body = [u for u in units if u[0] & 0x1F not in (NAL_SPS, NAL_PPS, NAL_AUD)]
        return EncodedVideo(to_avcc(body), int(packet.pts), int(packet.dts), bool(packet.is_keyframe))
