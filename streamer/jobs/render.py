"""Render one chunk: the same path as ``swapcast swap`` on a video (``transcode_video`` with a
``FrameSwapper``'s file stages, whose face rows go through the engine's micro-batcher), plus the checks a
piece of a bigger video needs.

Offline renders must swap every frame: the live policy of sending a frame on unswapped
when the batcher is saturated would leave unswapped frames in the output, so the wait for a
batch is long and a chunk with any such frame fails (and is retried) instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpu.analysis.people import People
from gpu.engine import FaceEngine, SourceFace
from gpu.options import SwapOptions
from streamer.media.decode_budget import DecodeBudget
from streamer.media.errors import VideoError
from streamer.media.stream_guard import MAX_DECODED_PIXELS
from streamer.media.transcode import TranscodeReport, transcode_video
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.pipeline.people_map import PeopleMap

BATCH_TIMEOUT_S = 120.0
CHUNK_TIMEOUT_S = 600.0  # the default of jobs.chunk_timeout_s


@dataclass(frozen=True)
class Encoding:
    """The encoder settings of rendered chunks (the config's ``encode`` section)."""

    codec: str = "libx264"
    preset: str = "veryfast"
    crf: int = 18


class Abandoned(Exception):
    """The render was stopped from outside: the job ended, the task was taken over, or the
    worker is stopping."""


class UnswappedFrames(RuntimeError):
    """Some frames could not get through the batcher in time; the chunk is tried again."""


def render_chunk(
    engine: FaceEngine,
    source: SourceFace | None,
    options: SwapOptions,
    chunk: Path,
    output: Path,
    *,
    expected_frames: int,
    encoding: Encoding,
    stopped: Callable[[], bool],
    label: str,
    session_id: str,
    marker: Callable[[np.ndarray], None] | None = None,
    max_seconds: float = CHUNK_TIMEOUT_S,
    mapping: PeopleMap | None = None,
) -> TranscodeReport:
    """Swap every frame of ``chunk`` into ``output`` (same timestamps, H.264). ``stopped`` is
    polled after each frame (``Abandoned``). ``label`` names the chunk in errors, e.g. "the
    video between 3.0 s and 6.0 s": damaged data becomes a ``VideoError`` saying where. The
    decode is bounded (``DecodeBudget``): no more frames than the chunk shows, no longer
    than ``max_seconds``. ``mapping`` names people by identity, so each chunk finds the same
    people again."""

    people = People(engine.frontal_identity) if mapping is not None and mapping.names_people else None
    swapper = FrameSwapper(engine, source, options, session_id=session_id, batch_timeout_s=BATCH_TIMEOUT_S,
                           marker=marker, offline=True, people=people, mapping=mapping)

    def progress(done: int, total: int | None) -> None:
        if stopped():
            raise Abandoned

    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        budget = DecodeBudget(max_frames=expected_frames, max_pixels=expected_frames * MAX_DECODED_PIXELS,
                              max_seconds=max_seconds)
        report = transcode_video(  # track, prepare and swap overlap with decode and encode (``file_stages``)
            chunk, output, swapper.file_stages(), codec=encoding.codec, preset=encoding.preset, crf=encoding.crf,
            progress=progress, budget=budget,
        )
    except VideoError as exc:
        raise VideoError(f"{label}: {str(exc).removeprefix(f'{chunk}: ')}") from None
    finally:
        swapper.close()
    if swapper.frames_dropped_by_batcher:
        raise UnswappedFrames(f"{swapper.frames_dropped_by_batcher} frames of {label} could not be swapped in time")
    if report.frames_out != expected_frames:
        raise VideoError(
            f"{label}: rendered {report.frames_out} frames where the input has {expected_frames} "
            "(frames that depend on an earlier chunk cannot be cut out without re-encoding)"
        )
    return report
