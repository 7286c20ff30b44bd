"""Reading a few frames out of a video (scoring, benchmarks, thumbnails)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import av
import numpy as np

from streamer.media.errors import VideoError
from streamer.media.stream_guard import bound_decoder, check_video_input


def read_frames(path: str | os.PathLike[str], limit: int | None = None) -> list[np.ndarray]:
    """Decode up to ``limit`` frames (all when None) as RGB uint8."""
    path = Path(path)
    frames: list[np.ndarray] = []
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path}: has no video stream")
            bound_decoder(container.streams.video[0].codec_context)
            for frame in container.decode(video=0):
                frames.append(frame.to_ndarray(format="rgb24"))
                if limit is not None and len(frames) >= limit:
                    break
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"{path}: cannot be decoded ({exc})") from None
    return frames


def sample_frames(path: str | os.PathLike[str], count: int) -> list[tuple[int, np.ndarray]]:
    """``count`` frames spread evenly over the whole video, with their frame numbers.

    Decodes the whole file once (robust for any codec and VFR) but keeps only the samples."""
    path = Path(path)
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path}: has no video stream")
            bound_decoder(container.streams.video[0].codec_context)
            total = container.streams.video[0].frames or 0
            if total <= 0:
                total = sum(1 for _ in container.decode(video=0))
                container.seek(0)
            wanted = set(np.linspace(0, max(total - 1, 0), num=min(count, max(total, 1))).round().astype(int).tolist())
            picked = []
            for index, frame in enumerate(container.decode(video=0)):
                if index in wanted:
                    picked.append((index, frame.to_ndarray(format="rgb24")))
            return picked
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"{path}: cannot be decoded ({exc})") from None


def iter_frames(path: str | os.PathLike[str]) -> Iterator[tuple[float, np.ndarray]]:
    """Every frame of a video as (presentation time in seconds, RGB uint8), decoded as
    they are read (a long video is never held in memory); its declared sizes are checked
    before anything is decoded."""
    path = Path(path)
    check_video_input(path, str(path))
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise VideoError(f"{path}: has no video stream")
            stream = container.streams.video[0]
            bound_decoder(stream.codec_context)
            base = float(stream.time_base) if stream.time_base else 1 / 90000
            for index, frame in enumerate(container.decode(video=0)):
                seconds = frame.pts * base if frame.pts is not None else index / float(stream.average_rate or 30)
                yield seconds, frame.to_ndarray(format="rgb24")
    except (av.error.FFmpegError, OSError) as exc:
        raise VideoError(f"{path}: cannot be decoded ({exc})") from None
