"""Join rendered chunks into the job's output without re-encoding, put the input's audio
back, and verify the result before it is renamed into place.

Rendered chunks carry the input's timestamps in the input's time base, so joining is a
copy of their packets in order; the input's first audio stream is copied alongside,
interleaved by decode time, without the packets an edit list cuts out of it (a file trimmed
by stream copy keeps audio from before the cut, flagged ``is_discard``, as its video):
the rendered video holds only the frames a player showed, and the audio that went with
them starts where they do. The container follows the audio: mp4 when the audio codec
plays there (or there is none), else mov, else Matroska.

Verification, against what the split measured on the input: exactly the input's frame
count, the video duration within one frame, and an audio stream when the input had one.
A result that fails it raises ``VideoError`` and is never left in place.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av

from streamer.jobs.timing import VideoTiming
from streamer.media.errors import VideoError
from streamer.media.transcode import COPYABLE_AUDIO

_SUFFIXES = {"mp4": ".mp4", "mov": ".mov", "matroska": ".mkv"}


@dataclass(frozen=True)
class Expected:
    """What the input measured at the split."""

    frames: int
    duration_s: float
    frame_s: float
    has_audio: bool


@dataclass(frozen=True)
class Assembled:
    path: Path
    frames: int
    duration_s: float
    audio_codec: str | None


def assemble(source: Path, rendered: list[Path], folder: Path, expected: Expected) -> Assembled:
    """Write ``folder/output.<ext>`` from the rendered chunks (in order) and the audio of
    ``source``; returns what was verified."""
    with av.open(str(source)) as original:
        in_video = original.streams.video[0]
        in_audio = original.streams.audio[0] if original.streams.audio else None
        muxer = _muxer_for(in_audio)
        output = folder / f"output{_SUFFIXES[muxer]}"
        temp = folder / f".output{_SUFFIXES[muxer]}.part"
        try:
            _join(original, in_video, in_audio, rendered, temp, muxer)
            result = verify(temp, expected)
            os.replace(temp, output)
        finally:
            temp.unlink(missing_ok=True)
    return Assembled(output, result.frames, result.duration_s, result.audio_codec)


def verify(path: Path, expected: Expected) -> Assembled:
    """Measure ``path`` and compare it with ``expected``; ``VideoError`` saying what differs."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        timing = VideoTiming(stream.time_base)
        for packet in container.demux(stream):
            timing.add(packet)
        audio = container.streams.audio[0].codec_context.name if container.streams.audio else None
    problems = []
    if timing.frames != expected.frames:
        problems.append(f"{timing.frames} frames instead of {expected.frames}")
    if abs(timing.duration_s - expected.duration_s) > expected.frame_s + 1e-6:
        problems.append(f"lasts {timing.duration_s:.3f} s instead of {expected.duration_s:.3f} s")
    if expected.has_audio and audio is None:
        problems.append("has no audio although the input has")
    if problems:
        raise VideoError("the joined output failed verification: " + "; ".join(problems))
    return Assembled(path, timing.frames, timing.duration_s, audio)


def _muxer_for(in_audio: av.audio.stream.AudioStream | None) -> str:
    if in_audio is None:
        return "mp4"
    codec = in_audio.codec_context.codec.canonical_name
    return next((m for m in ("mp4", "mov", "matroska") if codec in COPYABLE_AUDIO[m]), "matroska")


def _join(
    original: av.container.InputContainer,
    in_video: av.video.stream.VideoStream,
    in_audio: av.audio.stream.AudioStream | None,
    rendered: list[Path],
    temp: Path,
    muxer: str,
) -> None:
    time_base = in_video.time_base
    options = {}
    if muxer in ("mp4", "mov"):
        options["movflags"] = "+faststart"
        if time_base.numerator == 1:
            options["video_track_timescale"] = str(time_base.denominator)
    try:
        with av.open(str(temp), "w", format=muxer, options=options) as output:
            with av.open(str(rendered[0])) as first:
                out_video = output.add_stream_from_template(first.streams.video[0])
            out_video.time_base = time_base
            out_audio = output.add_stream_from_template(in_audio) if in_audio is not None else None
            streams = [_timed(_chunk_packets(rendered), out_video)]
            if in_audio is not None:
                streams.append(_timed(original.demux(in_audio), out_audio))
            for _, _, packet in heapq.merge(*streams, key=lambda item: (item[0], item[1])):
                output.mux(packet)
    except av.error.FFmpegError as exc:
        raise VideoError(f"joining the rendered chunks failed ({exc})") from None


def _chunk_packets(rendered: list[Path]) -> Iterator[av.Packet]:
    for path in rendered:
        with av.open(str(path)) as chunk:
            yield from chunk.demux(chunk.streams.video[0])


def _timed(packets: Iterator[av.Packet], stream: av.stream.Stream) -> Iterator[tuple[Fraction, int, av.Packet]]:
    """(decode time, stream order, packet) for the merge; packets re-pointed at ``stream``."""
    order = 0 if stream.type == "video" else 1
    for packet in packets:
        if packet.dts is None or packet.size == 0 or packet.is_discard:
            continue
        when = packet.dts * packet.time_base
        packet.stream = stream
        yield when, order, packet
