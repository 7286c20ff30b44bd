"""The picture sizes a video file declares, checked before anything of it is decoded: its
container's size, then every header of its video codec that sets a size (H.264 and HEVC
SPS, VP8 keyframes, any VP9 frame, AV1 sequence headers), packet by packet. Other codecs
(MPEG-4, MJPEG, ProRes, ...) are bounded by their decoder's ``max_pixels``, which
libavcodec checks before allocating any picture (``bound_decoder``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import av

from streamer.media.av1_sequence import Av1SizeGuard
from streamer.media.errors import VideoError
from streamer.media.hevc_sps import HevcSizeGuard
from streamer.media.picture_limits import (
    LIMITS,
    MAX_SIDE,
    FrameSizeError,
    H264SizeGuard,
    UnreadableHeader,
    check_vp8_frame,
)
from streamer.media.sample_tables import SampleTableError, check_sample_tables
from streamer.media.vp9_header import check_vp9_frame

# libavcodec refuses a picture over this many pixels (its width aligned up to 64) before
# allocating it; every side the node takes fits.
MAX_DECODED_PIXELS = MAX_SIDE * MAX_SIDE
AV1_DECODERS = frozenset({"av1", "libdav1d", "libaom-av1"})  # the names a demuxed AV1 stream's decoder goes by


def video_stream_guard(codec: str, width: int, height: int, extradata: bytes | None) -> Callable[[bytes], None]:
    """For a demuxed video stream (a file): ``FrameSizeError`` now when the size its container
    declares, or its extradata, is over ``MAX_SIDE``; then the returned check, for each
    packet before it is decoded."""
    if max(width, height) > MAX_SIDE:
        raise FrameSizeError(f"the video stream declares {width}x{height} pictures, "
                             f"which cannot be re-encoded: {LIMITS}")
    if codec == "h264":
        return H264SizeGuard(extradata or b"").check
    if codec == "hevc":
        return HevcSizeGuard(extradata or b"").check
    if codec in AV1_DECODERS:
        return Av1SizeGuard(extradata or b"").check
    if codec == "vp8":
        return check_vp8_frame
    if codec == "vp9":
        return check_vp9_frame
    return lambda packet: None


class PacketGuard:
    """``video_stream_guard`` over a demuxed stream's packets, renewed by any new extradata a
    packet carries (an MP4 with several sample descriptions switches to the next one so; the
    decoder then reads its SPS: 8192x8192 pictures decoded from a 64x64 file, measured)."""

    def __init__(self, stream: av.video.stream.VideoStream) -> None:
        context = stream.codec_context
        self.codec = context.name
        self._check = video_stream_guard(self.codec, context.width, context.height, context.extradata)

    def check(self, packet: av.Packet) -> None:
        if packet.has_sidedata("new_extradata"):
            self._check = video_stream_guard(self.codec, 0, 0, bytes(packet.get_sidedata("new_extradata")))
        self._check(bytes(packet))


def bound_decoder(context: av.codec.context.CodecContext) -> None:
    """Make ``context`` (not yet opened) refuse pictures over ``MAX_DECODED_PIXELS``."""
    context.options = {**context.options, "max_pixels": str(MAX_DECODED_PIXELS)}


def check_video_file(source: str | Path) -> None:
    """The picture size a video file's container and its video's headers declare, before
    anything is decoded: opened so that probing the streams decodes nothing either (a probe
    decodes a frame or more, 0.7 GB for one declaring 16000x16000), then demuxed through
    ``video_stream_guard``. Raises ``FrameSizeError``, ``UnreadableHeader``, or PyAV's and
    the OS's errors for a file it cannot read; a file without video passes (its reader says so).
    Before opening, ``SampleTableError`` for an MP4/MOV declaring more samples than the
    demuxer is let index (its open alone would allocate for each)."""
    check_sample_tables(source)
    with av.open(str(source), options={"skip_frame": "all"}) as container:
        if not container.streams.video:
            return
        stream = container.streams.video[0]
        guard = PacketGuard(stream)
        for packet in container.demux(stream):
            if packet.size:
                guard.check(packet)


def check_video_input(source: str | Path, label: str) -> None:
    """``check_video_file`` with each refusal a ``VideoError`` naming the input ``label``
    (the words only, never a storage path FFmpeg or the OS put in theirs)."""
    try:
        check_video_file(source)
    except (FrameSizeError, SampleTableError) as exc:
        raise VideoError(f"{label}: {exc}") from None
    except UnreadableHeader as exc:
        raise VideoError(f"{label}: damaged data ({_reason(exc)})") from None
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"{label}: not a readable video file ({_reason(exc)})") from None


def _reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or str(exc)
