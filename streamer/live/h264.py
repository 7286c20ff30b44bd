"""H.264 for live streams: bitstream framing (Annex B <-> AVCC, the avcC record) and a
low-latency decoder/encoder pair around PyAV.

RTMP/FLV carries AVCC (4-byte length before each NAL unit, parameters in an avcC record);
libx264 emits Annex B (start codes, SPS/PPS in-band on keyframes)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import av
import numpy as np
from av.video.frame import PictureType

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


class H264Decoder:
    """Decodes AVCC samples after an avcC sequence header; slice threading only, so no
    frame of delay is added by the decoder itself."""

    def __init__(self) -> None:
        self._context: av.CodecContext | None = None

    @property
    def configured(self) -> bool:
        return self._context is not None

    def configure(self, avcc_record: bytes) -> None:
        context = av.CodecContext.create("h264", "r")
        context.extradata = avcc_record
        context.thread_type = "SLICE"
        self._context = context

    def decode(self, sample: bytes, dts: int, composition_offset: int = 0) -> list[av.VideoFrame]:
        """Frames (pts in ms) the sample completes; [] before the first sequence header."""
        if self._context is None:
            return []
        packet = av.Packet(sample)
        packet.dts, packet.pts, packet.time_base = dts, dts + composition_offset, MS
        return list(self._context.decode(packet))


class H264Encoder:
    """libx264 tuned for live: the given preset with zerolatency (no lookahead, no B-frames,
    one packet out per frame in), CBR-like bitrate, and keyframes forced by *time* so the
    interval stays exact however many frames the latency policy drops."""

    def __init__(self, width: int, height: int, *, preset: str = "ultrafast", bitrate_kbps: int = 2500,
                 keyframe_interval_s: float = 2.0, fps_hint: float = 30.0) -> None:
        self.width, self.height = width - width % 2, height - height % 2
        self.keyframe_interval_ms = int(keyframe_interval_s * 1000)
        context = av.CodecContext.create("libx264", "w")
        context.width, context.height, context.pix_fmt = self.width, self.height, "yuv420p"
        context.time_base = MS
        # x264's rate control budgets bits per frame from the frame rate, not from the
        # millisecond time base (which it would read as 1000 fps)
        context.framerate = Fraction(fps_hint).limit_denominator(1001)
        context.bit_rate = bitrate_kbps * 1000
        context.options = {
            "preset": preset,
            "tune": "zerolatency",
            # keyframes come from force_keyframe (by time); x264's own ones only as a fallback
            "x264-params": f"keyint=600:min-keyint=1:scenecut=0:vbv-maxrate={bitrate_kbps}:vbv-bufsize={bitrate_kbps}",
        }
        self._context = context
        self._last_keyframe: int | None = None
        self.sequence_header: bytes | None = None  # avcC, known from the first keyframe

    def encode(self, rgb: np.ndarray, pts: int) -> list[EncodedVideo]:
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb[: self.height, : self.width]), format="rgb24")
        frame = frame.reformat(format="yuv420p")
        frame.pts, frame.time_base = pts, MS
        if self._last_keyframe is None or pts - self._last_keyframe >= self.keyframe_interval_ms:
            frame.pict_type = PictureType.I
            self._last_keyframe = pts
        return [self._packet(packet) for packet in self._context.encode(frame)]

    def _packet(self, packet: av.Packet) -> EncodedVideo:
        units = split_annexb(bytes(packet))
        if packet.is_keyframe and self.sequence_header is None:
            sps = next(u for u in units if u[0] & 0x1F == NAL_SPS)
            pps = next(u for u in units if u[0] & 0x1F == NAL_PPS)
            self.sequence_header = avc_decoder_config(sps, pps)
        # parameter sets travel in the sequence header; access unit delimiters are not needed
        body = [u for u in units if u[0] & 0x1F not in (NAL_SPS, NAL_PPS, NAL_AUD)]
        return EncodedVideo(to_avcc(body), int(packet.pts), int(packet.dts), bool(packet.is_keyframe))
