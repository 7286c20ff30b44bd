"""Cut an input video into chunks at keyframes, without re-encoding (a PyAV remux).

Two passes over the demuxed packets: the first indexes them (timestamps, keyframes, which
ones a player shows) and plans the cuts, the second copies each chunk's packets into its own
``.mov`` file. A chunk starts at a keyframe that closes its GOP (``closed_keyframes``), so it
decodes on its own; it is cut at the first keyframe at least ``chunk_seconds`` after its
start, unless that would leave a tail shorter than half a chunk (which then stays with the
last chunk), or a chunk that shows no frame. Frame counts are of shown frames
(``timing``): the lead packets an edit list cuts out of a trimmed file go into the first
chunk, which needs them to decode, and its copy keeps them cut out (the muxer writes the
edit list again), so the render and the count agree. Chunks keep the input's timestamps and time base
(mov stores the time base exactly, unlike Matroska's milliseconds), so rendered chunks can
later be joined by copying their packets as they are. Only the video is cut: the audio
is taken from the input when the result is assembled. A pass before them reads the picture
size the container and the stream's headers declare (``picture_limits``): one the node does
not take fails the job here, before anything is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from itertools import pairwise
from pathlib import Path

import av

from streamer.jobs.timing import VideoTiming
from streamer.media.errors import VideoError
from streamer.media.stream_guard import AV1_DECODERS, check_video_input

CHUNK_SUFFIX = ".mov"
MAX_FRAMES = 216_000  # the default of jobs.max_frames: 1 h at 60 fps
# The ISO muxer's mov mode refuses VP9 and AV1; its mp4 mode writes them (vpcC, av1C) and
# keeps the time base exactly too. Neither takes VP8: Matroska does, in the milliseconds
# its WebM source already counts in. The chunk files keep their suffix (FFmpeg reads by content).
_CHUNK_FORMATS = {"vp9": "mp4", **dict.fromkeys(AV1_DECODERS, "mp4"), "vp8": "matroska"}


@dataclass(frozen=True)
class Piece:
    index: int
    path: Path
    frames: int
    start_s: float  # from the start of the video
    duration_s: float


@dataclass(frozen=True)
class SplitResult:
    pieces: list[Piece]
    frames: int
    duration_s: float
    frame_s: float
    has_audio: bool


@dataclass(frozen=True)
class _Index:
    timing: VideoTiming  # of the shown packets
    pts: list[int]  # per counted packet, in decode order
    shown: list[bool]  # per counted packet: not cut out by an edit list
    keyframes: list[int]  # packet numbers (decode order) of keyframes
    time_base: Fraction
    has_audio: bool


def split_video(source: Path, folder: Path, chunk_seconds: float, *, label: str,
                max_frames: int = MAX_FRAMES) -> SplitResult:
    """Write ``folder/chunk-0000.mov``, ... and describe them; ``label`` names the input in
    errors (``VideoError`` for an unreadable, damaged or uncuttable input, and for one
    holding more than ``max_frames`` packets: a static picture costs a few bytes a frame, so
    an upload's size does not bound the work it asks for)."""
    check_video_input(source, label)
    index = _index(source, label, max_frames)
    cuts = plan_cuts(index.pts, index.keyframes, index.timing, chunk_seconds, index.shown)
    folder.mkdir(parents=True, exist_ok=True)
    pieces = _pieces(index, cuts, folder)
    _write(source, pieces, cuts, index.time_base, label)
    return SplitResult(
        pieces=pieces, frames=index.timing.frames, duration_s=index.timing.duration_s,
        frame_s=index.timing.frame_s, has_audio=index.has_audio,
    )


def plan_cuts(pts: list[int], keyframes: list[int], timing: VideoTiming, chunk_seconds: float,
              shown: list[bool] | None = None) -> list[int]:
    """Packet numbers where chunks start (the first is 0), see the module docstring;
    ``shown`` (default: all) marks the packets a player shows."""
    tb, end = timing.time_base, timing.end
    shown = shown if shown is not None else [True] * len(pts)
    cuts, chunk_start = [0], pts[0]
    for number in keyframes:
        if number == 0:
            continue
        at = pts[number]
        if ((at - chunk_start) * tb >= chunk_seconds and (end - at) * tb >= chunk_seconds / 2
                and any(shown[cuts[-1]:number])):
            cuts.append(number)
            chunk_start = at
    return cuts


def _reason(exc: Exception) -> str:
    """FFmpeg's words without the file name: errors go to users, who never saw the storage path."""
    return getattr(exc, "strerror", None) or str(exc)


def _counted(packet: av.Packet) -> bool:
    """The packets both passes count: real data with a timestamp (not the flush packet)."""
    return packet.size > 0 and (packet.pts is not None or packet.dts is not None)


def _index(source: Path, label: str, max_frames: int) -> _Index:
    try:
        container = av.open(str(source))
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"{label}: not a readable video file ({_reason(exc)})") from None
    with container:
        if not container.streams.video:
            raise VideoError(f"{label}: has no video stream")
        stream = container.streams.video[0]
        timing = VideoTiming(stream.time_base)
        pts: list[int] = []
        shown: list[bool] = []
        keyframes: list[int] = []
        try:
            for packet in container.demux(stream):
                if not _counted(packet):
                    continue
                if len(pts) >= max_frames:
                    raise VideoError(f"{label}: holds more than {max_frames:,} video frames, the most a job takes "
                                     "(jobs.max_frames)")
                if packet.is_keyframe:
                    keyframes.append(len(pts))
                shown.append(timing.add(packet))
                pts.append(packet.pts if packet.pts is not None else packet.dts)
        except av.error.FFmpegError as exc:
            raise VideoError(f"{label}: damaged data after {len(pts)} video frames ({_reason(exc)})") from None
        if not timing.frames:
            raise VideoError(f"{label}: has no video frames")
        return _Index(timing, pts, shown, closed_keyframes(pts, keyframes), stream.time_base,
                      bool(container.streams.audio))


def closed_keyframes(pts: list[int], keyframes: list[int]) -> list[int]:
    """The keyframes a chunk can start at: those no packet after them (in decode order, up
    to the next keyframe) comes before in time. An open GOP's keyframe (HEVC's CRA, x265's
    default; x264's open-gop) is followed by leading pictures that predict from the GOP
    before it, which a decoder starting there drops: a chunk cut there rendered 6 frames of
    its 9 and failed its frame count. Such a file is cut at its closed keyframes only (all
    in one chunk when it has none after the first)."""
    closed = []
    for number, start in enumerate(keyframes):
        end = keyframes[number + 1] if number + 1 < len(keyframes) else len(pts)
        if all(pts[later] >= pts[start] for later in range(start + 1, end)):
            closed.append(start)
    return closed


def _pieces(index: _Index, cuts: list[int], folder: Path) -> list[Piece]:
    """The chunks as a player sees them: their shown frames, from the first one shown."""
    tb, origin = index.time_base, index.timing.start
    bounds = [*cuts, len(index.pts)]
    shown = [[pts for pts, seen in zip(index.pts[a:b], index.shown[a:b], strict=True) if seen]
             for a, b in pairwise(bounds)]
    starts = [min(frames) for frames in shown]
    ends = [*starts[1:], index.timing.end]
    return [
        Piece(
            index=number, path=folder / f"chunk-{number:04d}{CHUNK_SUFFIX}", frames=len(frames),
            start_s=float((start - origin) * tb), duration_s=float((stop - start) * tb),
        )
        for number, (frames, start, stop) in enumerate(zip(shown, starts, ends, strict=True))
    ]


def _write(source: Path, pieces: list[Piece], cuts: list[int], time_base: Fraction, label: str) -> None:
    with av.open(str(source)) as container:
        stream = container.streams.video[0]
        codec = stream.codec_context.name
        chunk_format = _CHUNK_FORMATS.get(codec, "mov")
        exact = time_base.numerator == 1 and chunk_format != "matroska"  # the ISO muxer's own time scale
        options = {"video_track_timescale": str(time_base.denominator)} if exact else {}
        starts = dict(zip(cuts, pieces))
        output: av.container.OutputContainer | None = None
        out_stream = None
        number = 0
        try:
            for packet in container.demux(stream):
                if not _counted(packet):
                    continue
                if number in starts:
                    if output is not None:
                        output.close()
                    output = av.open(str(starts[number].path), "w", format=chunk_format,
                                     options=options)
                    out_stream = output.add_stream_from_template(stream, opaque=True)  # a copy: no encoder needed
                packet.stream = out_stream
                output.mux(packet)
                number += 1
        except av.error.FFmpegError as exc:
            raise VideoError(
                f"{label}: cannot cut its {codec} video into chunks without re-encoding ({_reason(exc)})"
            ) from None
        finally:
            if output is not None:
                output.close()
