"""Offline video transcode for ``swapcast swap``: decode, transform every frame, encode H.264.

Guarantees, and the choices behind them:

* **Timing**: every decoded frame is encoded exactly once with its own pts, in the input
  stream's time base, so the frame count, variable frame rates and the average rate survive.
  A missing or non-increasing pts (broken input) becomes previous + 1 tick, because the
  encoder refuses it otherwise.
* **Audio** (first audio stream): packets are copied untouched when the codec is one the
  output container plays (``COPYABLE_AUDIO``), else decoded and encoded to AAC at the same
  rate and layout. Copied packets keep their pts; re-encoded audio starts at the first
  decoded audio frame's time and then counts samples, so the start offset and sync survive
  (a gap inside the audio track is closed up rather than kept).
* **Geometry**: yuv420p needs even sizes, so an odd width/height loses its last column/row
  (cropping 1 px is invisible; padding would add a coloured edge and change the aspect).
  The decoder's display-matrix rotation (multiples of 90°) is applied before the transform,
  so faces are upright for the swap, and the output is written upright with no rotation tag;
  mirror flips in the matrix and non-square sample aspect ratios are not carried over.
* **Colour**: frames are converted to RGB with the input's colour tags and back to BT.709
  limited range, which the encoder tags in the stream.
* **Failure**: the output goes to a hidden temp file next to the destination and is renamed
  only on success, so a failed run never leaves a half file. A decoding error anywhere
  (damaged data the decoder rejects) stops the run with ``VideoError`` saying how many
  frames were done: skipping frames would break the frame-count and sync guarantees.
* **Speed**: decode, each transform stage and encode overlap on threads of their own
  (frames in order, so the output is the one a frame-by-frame loop writes); the encoder's
  own threads take the cores left free.
* **Memory**: frames are streamed; only the codecs' own delay buffers and a few frames
  between the stages are held. A picture
  size over ``picture_limits.MAX_SIDE`` a side, declared by the container or by a header in
  the stream (an H.264 SPS, a VP8 keyframe), stops the run with ``VideoError`` before the
  decoder reads that header (and allocates pictures of that size).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
from av.video.reformatter import ColorRange, Colorspace, Interpolation

from streamer.media.decode_budget import DecodeBudget, DecodeBudgetExceeded
from streamer.media.errors import VideoError
from streamer.media.hwcodecs import scale_threads
from streamer.media.stream_guard import bound_decoder, check_video_input
from streamer.pipeline.stage_threads import run_stages

# (RGB frame, its presentation time in seconds) -> frame; the time drives temporal smoothing.
Transform = Callable[[np.ndarray, float], np.ndarray]
# One step of a transform split in steps: (what the step before returned, or the RGB frame
# for the first; the frame's time) -> what the next step takes (the RGB frame after the last).
Stage = Callable[[Any, float], Any]
Progress = Callable[[int, int | None], None]

MUXERS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska"}
# Audio codecs copied as-is into each container: the ones common players handle there.
COPYABLE_AUDIO = {
    "mp4": frozenset({"aac", "mp3", "alac", "opus", "flac", "ac3", "eac3"}),
    "mov": frozenset({"aac", "mp3", "alac", "ac3", "eac3", "pcm_s16le", "pcm_s16be", "pcm_s24le", "pcm_f32le"}),
    "matroska": frozenset(
        {"aac", "mp3", "opus", "vorbis", "flac", "alac", "ac3", "eac3", "pcm_s16le", "pcm_s24le", "pcm_f32le"}
    ),
}
# BT.709 coefficients (the HD norm), MPEG range (1) for the RGB -> YUV conversion and the tags.
_OUT_COLORSPACE = Colorspace.ITU709
_OUT_RANGE = ColorRange.MPEG
# swscale's default YUV -> RGB path truncates: every frame comes out ~1.4 levels darker.
# Accurate rounding removes the bias (+~0.8 ms per 640x480 frame); on the RGB -> YUV side
# the same flags are unbiased and even a little faster than the default.
_TO_RGB_FLAGS = Interpolation.BILINEAR | Interpolation.ACCURATE_RND | Interpolation.FULL_CHR_H_INT
_TO_YUV_FLAGS = Interpolation.BILINEAR | Interpolation.ACCURATE_RND | Interpolation.FULL_CHR_H_INP


@dataclass(frozen=True)
class TranscodeReport:
    """What a transcode did; ``duration_s`` is the output video's first-to-last-frame-end span."""

    frames_in: int
    frames_out: int
    width: int
    height: int
    duration_s: float
    audio_codec: str | None
    seconds: float


@dataclass(frozen=True)
class _EncodeSettings:
    codec: str
    preset: str
    crf: int
    muxer: str


def transcode_video(
    source: str | os.PathLike[str],
    destination: str | os.PathLike[str],
    transform: Transform | Sequence[Stage],
    *,
    codec: str = "libx264",
    preset: str = "veryfast",
    crf: int = 18,
    progress: Progress | None = None,
    budget: DecodeBudget | None = None,
) -> TranscodeReport:
    """Run ``transform(frame, seconds)`` (RGB uint8 (H, W, 3) in and out, same shape) over every frame of
    ``source`` and write H.264/yuv420p plus the source's audio to ``destination``, whose
    extension (.mp4/.m4v/.mov/.mkv) picks the container. ``transform`` may be given as a
    sequence of ``Stage``s: each runs on a thread of its own, frames in order, overlapping
    with the other stages' work on the frames before and after. ``progress(done, total)`` is
    called after each frame is encoded (on the calling thread); ``total`` is the stream's
    frame count or an estimate from its duration and rate, or None. ``budget`` bounds the
    decode (every decoded frame and the wall time; a job's chunk has one). Raises
    ``VideoError`` for unusable input or output paths and for a decode over its budget."""
    started = time.perf_counter()
    source, destination = Path(source), Path(destination)
    muxer = _muxer_for(destination)
    settings = _EncodeSettings(codec=codec, preset=preset, crf=crf, muxer=muxer)
    with _open_input(source) as container, _atomic_output(destination) as temp:
        stages = [transform] if callable(transform) else list(transform)
        job = _Transcode(container, source, temp, settings, stages, progress, budget)
        job.run()
    return job.report(time.perf_counter() - started)


def _muxer_for(destination: Path) -> str:
    try:
        return MUXERS[destination.suffix.lower()]
    except KeyError:
        known = ", ".join(sorted(MUXERS))
        suffix = destination.suffix or "(no extension)"
        raise VideoError(f"{destination}: cannot write video as {suffix!r}; use one of {known}") from None


@contextlib.contextmanager
def _open_input(source: Path) -> Iterator[av.container.InputContainer]:
    """The input opened after its declared sizes are read (``check_video_input``): the open's
    own probe decodes a frame or more, 0.7 GB for one declaring 16000x16000."""
    if not source.is_file():
        raise VideoError(f"{source}: no such file")
    check_video_input(source, str(source))
    try:
        container = av.open(str(source))
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"{source}: not a readable media file ({exc})") from None
    with container:
        yield container


@contextlib.contextmanager
def _atomic_output(destination: Path) -> Iterator[Path]:
    """A temp path beside ``destination``, renamed onto it only if the block succeeds."""
    try:
        handle, name = tempfile.mkstemp(prefix=f".{destination.name}.", suffix=".part", dir=destination.parent)
    except OSError as exc:
        raise VideoError(f"{destination}: cannot write here ({exc.strerror or exc})") from None
    os.close(handle)
    temp = Path(name)
    try:
        yield temp
        os.replace(temp, destination)
    finally:
        temp.unlink(missing_ok=True)


@dataclass
class _Picture:
    """One decoded video frame on its way through the stages: ``payload`` is the upright
    RGB frame in, whatever each stage hands the next, and the RGB frame out."""

    payload: Any
    seconds: float  # presentation time, for the transform
    pts: int  # the output frame's pts, in the input stream's time base


class _Transcode:
    """One pass over the input: demux, decode, transform, encode, mux.

    The decode (with the RGB conversion), each transform stage and the encode (with the
    YUV conversion and the mux) run on threads of their own, overlapping
    (``streamer.pipeline.stage_threads``); frames and audio packets keep their order, so the
    output is what a loop doing one thing after the other would write."""

    def __init__(
        self,
        container: av.container.InputContainer,
        source: Path,
        temp: Path,
        settings: _EncodeSettings,
        stages: Sequence[Stage],
        progress: Progress | None,
        budget: DecodeBudget | None = None,
    ) -> None:
        if not container.streams.video:
            raise VideoError(f"{source}: has no video stream")
        self.input, self.source, self.temp = container, source, temp
        self.settings, self.stages, self.progress, self.budget = settings, stages, progress, budget
        self.in_video = container.streams.video[0]
        context = self.in_video.codec_context  # its declared sizes were read before the open (``_open_input``)
        context.thread_type = "AUTO"
        bound_decoder(context)
        self.in_audio = container.streams.audio[0] if container.streams.audio else None
        self.total = _expected_frames(container, self.in_video)
        self.output: av.container.OutputContainer | None = None
        self.out_video: av.video.stream.VideoStream | None = None
        self.audio: _AudioCopy | _AudioToAac | None = None
        self.pending_audio: list[av.Packet] = []
        self.first_frame: av.VideoFrame | None = None  # the output's size and rotation come from it
        self.in_width = self.in_height = self.rotation_k = 0
        self.frames_decoded = 0  # by the reading thread
        self.frames_in = self.frames_out = 0  # by the writing thread
        self.first_pts: int | None = None
        self.last_pts: int | None = None
        self.last_duration = 0

    def run(self) -> None:
        try:
            run_stages(self._items(), [_on_pictures(stage) for stage in self.stages], self._write, name="transcode")
            if self.output is None:
                raise VideoError(f"{self.source}: no video frame could be decoded")
            self._mux(self.out_video.encode(None))
            if self.audio is not None:
                self.audio.flush()
            self.output.close()
        except av.error.FFmpegError as exc:
            target = f"{self.settings.codec}/{self.settings.muxer}"
            message = f"{self.source}: encoding to {target} failed after {self.frames_in} frames ({exc})"
            raise VideoError(message) from None
        finally:
            if self.output is not None:
                with contextlib.suppress(av.error.FFmpegError):
                    self.output.close()

    def report(self, seconds: float) -> TranscodeReport:
        time_base = self.in_video.time_base
        span = (self.last_pts - self.first_pts + self.last_duration) * time_base
        return TranscodeReport(
            frames_in=self.frames_in,
            frames_out=self.frames_out,
            width=self.out_video.width,
            height=self.out_video.height,
            duration_s=float(span),
            audio_codec=self.audio.codec_name if self.audio is not None else None,
            seconds=seconds,
        )

    # -- the reading thread: demux, decode, RGB ----------------------------------------------------

    def _items(self) -> Iterator[_Picture | av.Packet]:
        """Decoded frames as ``_Picture``s and audio packets, in demux order."""
        for packet in self._packets():
            if packet.stream is self.in_video:
                for frame in self._decode(self.in_video, packet):
                    self._charge(frame)
                    yield self._picture(frame)
            else:
                yield packet

    def _packets(self) -> Iterator[av.Packet]:
        """Demuxed packets of the video and first audio stream; read errors become VideoError."""
        streams = [s for s in (self.in_video, self.in_audio) if s is not None]
        packets = self.input.demux(streams)
        while True:
            try:
                packet = next(packets)
            except StopIteration:
                return
            except av.error.FFmpegError as exc:
                raise self._decode_error(exc) from None
            yield packet

    def _decode(self, stream: av.stream.Stream, packet: av.Packet) -> list[av.frame.Frame]:
        try:
            return stream.decode(packet)
        except av.error.FFmpegError as exc:
            raise self._decode_error(exc) from None

    def _picture(self, frame: av.VideoFrame) -> _Picture:
        if self.first_frame is None:
            self.in_width, self.in_height = frame.width, frame.height
            self.rotation_k = round((frame.rotation or 0) / 90) % 4
            self.first_frame = frame
        picture = _Picture(self._frame_rgb(frame), self._seconds(frame), self._pts(frame))
        self.frames_decoded += 1
        return picture

    def _seconds(self, frame: av.VideoFrame) -> float:
        """The frame's presentation time; frames without a pts get the stream's nominal rate."""
        if frame.time is not None:
            return float(frame.time)
        rate = self.in_video.average_rate or 25
        return self.frames_decoded / float(rate)

    def _charge(self, frame: av.VideoFrame) -> None:
        if self.budget is not None:
            try:
                self.budget.charge(frame.width, frame.height)
            except DecodeBudgetExceeded as exc:
                raise VideoError(f"{self.source}: stopped after {self.frames_decoded} frames: {exc}") from None

    def _decode_error(self, exc: Exception) -> VideoError:
        return VideoError(f"{self.source}: damaged data, decoding stopped after {self.frames_decoded} frames ({exc})")

    def _frame_rgb(self, frame: av.VideoFrame) -> np.ndarray:
        """Upright RGB at the first frame's size (a mid-stream size change is scaled back),
        cropped to even dimensions."""
        rgb = frame.to_ndarray(
            format="rgb24",
            width=self.in_width,
            height=self.in_height,
            src_color_range=frame.color_range,
            interpolation=_TO_RGB_FLAGS,
            threads=scale_threads(),
        )
        rgb = np.rot90(rgb, self.rotation_k)
        return np.ascontiguousarray(rgb[: rgb.shape[0] & ~1, : rgb.shape[1] & ~1])

    def _pts(self, frame: av.VideoFrame) -> int:
        pts = frame.pts
        if pts is None or (self.last_pts is not None and pts <= self.last_pts):
            pts = 0 if self.last_pts is None else self.last_pts + 1
        if self.first_pts is None:
            self.first_pts = pts
        self.last_pts = pts
        self.last_duration = frame.duration or _ticks_per_frame(self.in_video)
        return pts

    # -- the writing thread (the caller's): YUV, encode, mux ----------------------------------------

    def _write(self, item: _Picture | av.Packet) -> None:
        if isinstance(item, _Picture):
            self._video_frame(item)
        elif self.audio is not None:
            self.audio.packet(item)
        elif self.output is None:
            self.pending_audio.append(item)

    def _video_frame(self, picture: _Picture) -> None:
        if self.output is None:
            self._open_output()
        result = picture.payload
        if not isinstance(result, np.ndarray) or result.shape != (self.out_video.height, self.out_video.width, 3) \
                or result.dtype != np.uint8:
            got = f"{result.dtype} {result.shape}" if isinstance(result, np.ndarray) else type(result).__name__
            raise ValueError(f"transform must return uint8 {(self.out_video.height, self.out_video.width, 3)}, got {got}")
        # the array itself as the converter's input (from_ndarray would copy it first: 0.4 ms a 720p frame)
        out = av.VideoFrame.from_numpy_buffer(np.ascontiguousarray(result), format="rgb24")
        out = out.reformat(
            format="yuv420p", dst_colorspace=_OUT_COLORSPACE, dst_color_range=_OUT_RANGE, interpolation=_TO_YUV_FLAGS,
            threads=scale_threads(),
        )
        out.pts, out.time_base = picture.pts, self.in_video.time_base
        self._mux(self.out_video.encode(out))
        self.frames_in += 1
        if self.progress is not None:
            self.progress(self.frames_in, self.total)

    def _open_output(self) -> None:
        """Open the output once the first frame shows the real size and rotation."""
        first = self.first_frame
        upright = (first.height, first.width) if self.rotation_k % 2 == 0 else (first.width, first.height)
        height, width = upright[0] & ~1, upright[1] & ~1
        self.output = av.open(str(self.temp), "w", format=self.settings.muxer, options=self._muxer_options())
        self.out_video = _add_video_stream(self.output, self.in_video, self.settings, width, height)
        if self.in_audio is not None:
            self.audio = _audio_handler(self.output, self.in_audio, self.settings.muxer, self._decode)
        for packet in self.pending_audio:
            self.audio.packet(packet)
        self.pending_audio.clear()

    def _muxer_options(self) -> dict[str, str]:
        """mp4/mov: index up front (playback starts before the download ends) and the input's
        time base as the video timescale, which the muxer would otherwise pick itself."""
        if self.settings.muxer not in ("mp4", "mov"):
            return {}
        options = {"movflags": "+faststart"}
        if self.in_video.time_base.numerator == 1:
            options["video_track_timescale"] = str(self.in_video.time_base.denominator)
        return options

    def _mux(self, packets: list[av.Packet]) -> None:
        self.frames_out += len(packets)
        self.output.mux(packets)


def _on_pictures(stage: Stage) -> Callable[[_Picture | av.Packet], _Picture | av.Packet]:
    """A transform stage applied to the pictures; audio packets pass it untouched."""

    def run(item: _Picture | av.Packet) -> _Picture | av.Packet:
        if isinstance(item, _Picture):
            item.payload = stage(item.payload, item.seconds)
        return item

    return run


def _add_video_stream(
    output: av.container.OutputContainer,
    in_video: av.video.stream.VideoStream,
    settings: _EncodeSettings,
    width: int,
    height: int,
) -> av.video.stream.VideoStream:
    """H.264 stream in the input's time base, so input pts go through unchanged."""
    rate = in_video.average_rate or in_video.guessed_rate or Fraction(25)
    stream = output.add_stream(settings.codec, rate=rate, options={"preset": settings.preset, "crf": str(settings.crf)})
    stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
    stream.time_base = in_video.time_base
    context = stream.codec_context
    context.time_base = in_video.time_base
    context.colorspace, context.color_range = int(_OUT_COLORSPACE), int(_OUT_RANGE)
    return stream


class _AudioCopy:
    """Remux: the source's audio packets, untouched, with their own timestamps."""

    def __init__(self, output: av.container.OutputContainer, in_audio: av.audio.stream.AudioStream) -> None:
        self.output = output
        self.stream = output.add_stream_from_template(in_audio)
        self.codec_name = in_audio.codec_context.codec.canonical_name

    def packet(self, packet: av.Packet) -> None:
        if packet.dts is None:  # the demuxer's empty end-of-stream packet
            return
        packet.stream = self.stream
        self.output.mux(packet)

    def flush(self) -> None:
        """Nothing is buffered when copying."""


class _AudioToAac:
    """Re-encode to AAC at the source's rate and layout, starting at the source's first
    audio time and counting samples from there."""

    codec_name = "aac"

    def __init__(
        self,
        output: av.container.OutputContainer,
        in_audio: av.audio.stream.AudioStream,
        decode: Callable[[av.stream.Stream, av.Packet], list[av.frame.Frame]],
    ) -> None:
        self.output, self.in_audio, self.decode = output, in_audio, decode
        self.rate = in_audio.codec_context.sample_rate
        self.stream = output.add_stream("aac", rate=self.rate, layout=in_audio.codec_context.layout)
        self.stream.codec_context.time_base = Fraction(1, self.rate)
        self.next_pts: int | None = None

    def packet(self, packet: av.Packet) -> None:
        for frame in self.decode(self.in_audio, packet):
            if self.next_pts is None:
                self.next_pts = round((frame.time or 0.0) * self.rate)
            frame.pts, frame.time_base = self.next_pts, Fraction(1, self.rate)
            self.next_pts += frame.samples
            self.output.mux(self.stream.encode(frame))

    def flush(self) -> None:
        self.output.mux(self.stream.encode(None))


def _audio_handler(
    output: av.container.OutputContainer,
    in_audio: av.audio.stream.AudioStream,
    muxer: str,
    decode: Callable[[av.stream.Stream, av.Packet], list[av.frame.Frame]],
) -> _AudioCopy | _AudioToAac:
    if in_audio.codec_context.codec.canonical_name in COPYABLE_AUDIO[muxer]:
        return _AudioCopy(output, in_audio)
    return _AudioToAac(output, in_audio, decode)


def _ticks_per_frame(stream: av.video.stream.VideoStream) -> int:
    """One frame interval in the stream's time base (for the last frame's duration)."""
    rate = stream.average_rate or stream.guessed_rate or Fraction(25)
    return max(1, round(1 / (rate * stream.time_base)))


def _expected_frames(container: av.container.InputContainer, stream: av.video.stream.VideoStream) -> int | None:
    """The header's frame count, else duration × average rate, else None (unknown)."""
    if stream.frames:
        return stream.frames
    rate = stream.average_rate or stream.guessed_rate
    if rate is None:
        return None
    if stream.duration is not None:
        seconds = stream.duration * stream.time_base
    elif container.duration is not None:
        seconds = Fraction(container.duration, av.time_base)
    else:
        return None
    return max(1, round(seconds * rate))
