"""Real media files for the tests, written with PyAV: H.264 video plus a real audio track.

The audio is a quiet 440 Hz tone; ``beep_on_frames`` adds a loud 2 kHz tone exactly over
those frames' display intervals, so a test can check audio/video sync by finding the beep.
"""

from __future__ import annotations

import asyncio
import math
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

SAMPLE_RATE = 48_000
BEEP_HZ = 2_000.0
TONE_HZ = 440.0
# Encoder names for the audio codecs a test may ask for.
_AUDIO_ENCODERS = {"aac": "aac", "opus": "libopus", "mp3": "libmp3lame", "flac": "flac", "alac": "alac"}
# Frame intervals (in 1/fps units) cycled through for variable-frame-rate files.
_VFR_STEPS = (1, 2, 1, 1, 3)


def frame_pts(count: int, fps: int, vfr: bool) -> list[int]:
    """Display times of ``count`` frames in 1/(fps) ticks; irregular steps when ``vfr``."""
    steps = _VFR_STEPS if vfr else (1,)
    pts, t = [], 0
    for i in range(count):
        pts.append(t)
        t += steps[i % len(steps)]
    return pts


def write_test_video(
    path: str | Path,
    frames: list[np.ndarray],
    fps: int = 25,
    audio: bool = True,
    audio_codec: str = "aac",
    beep_on_frames: set[int] | None = None,
    vfr: bool = False,
    audio_offset_s: float = 0.0,
    rotation: int = 0,
) -> list[float]:
    """Write ``frames`` (RGB uint8, all the same even size) as H.264 with an optional audio
    track starting ``audio_offset_s`` after the first frame, tagged to be displayed rotated
    ``rotation`` degrees counter-clockwise; the container follows the extension. Returns the
    frames' display times in seconds."""
    path = Path(path)
    height, width = frames[0].shape[:2]
    ticks = frame_pts(len(frames), fps, vfr)
    end_tick = ticks[-1] + (_VFR_STEPS[(len(frames) - 1) % len(_VFR_STEPS)] if vfr else 1)
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=fps, options={"preset": "ultrafast", "crf": "20"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        video.codec_context.time_base = Fraction(1, fps)
        if rotation:
            video.set_display_rotation(rotation)
        sound = None
        if audio:
            sound = container.add_stream(_AUDIO_ENCODERS[audio_codec], rate=SAMPLE_RATE, layout="stereo")
        for frame_rgb, tick in zip(frames, ticks):
            frame = av.VideoFrame.from_ndarray(frame_rgb, format="rgb24")
            frame.pts, frame.time_base = tick, Fraction(1, fps)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        if sound is not None:
            bounds = [*ticks, end_tick]
            beeps = [(bounds[i] / fps, bounds[i + 1] / fps) for i in sorted(beep_on_frames or ())]
            _write_audio(container, sound, audio_offset_s, end_tick / fps, beeps)
    return [tick / fps for tick in ticks]


def _write_audio(
    container: av.container.OutputContainer,
    stream: av.audio.stream.AudioStream,
    start_s: float,
    end_s: float,
    beeps: list[tuple[float, float]],
) -> None:
    """Tone from ``start_s`` to ``end_s`` in 1024-sample frames; loud beeps over ``beeps``."""
    first = round(start_s * SAMPLE_RATE)
    total = max(round(end_s * SAMPLE_RATE) - first, 0)
    for offset in range(0, total, 1024):
        n = min(1024, total - offset)
        t = (first + offset + np.arange(n)) / SAMPLE_RATE
        samples = 0.1 * np.sin(2 * math.pi * TONE_HZ * t)
        for begin, end in beeps:
            inside = (t >= begin) & (t < end)
            samples[inside] = 0.8 * np.sin(2 * math.pi * BEEP_HZ * t[inside])
        planar = np.stack([samples, samples]).astype(np.float32)
        frame = av.AudioFrame.from_ndarray(planar, format="fltp", layout="stereo")
        frame.sample_rate, frame.pts, frame.time_base = SAMPLE_RATE, first + offset, Fraction(1, SAMPLE_RATE)
        container.mux(stream.encode(frame))
    container.mux(stream.encode(None))


def corrupt_copy(src: str | Path, dst: str | Path, fraction: float = 0.3, seed: int = 0) -> None:
    """Copy ``src`` to ``dst`` with the middle ``fraction`` of its bytes replaced by random
    noise: the header and index survive, the coded pictures in between do not."""
    data = bytearray(Path(src).read_bytes())
    size = int(len(data) * fraction)
    start = (len(data) - size) // 2
    data[start : start + size] = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8).tobytes()
    Path(dst).write_bytes(bytes(data))


def camera_messages(grace_image, count: int, start_ms: int = 0) -> list:
    """An OBS-like stream as RTMP messages: AVC sequence header, then one frame per 40 ms."""
    from streamer.live.h264 import H264Encoder
    from streamer.rtmp.flv import VideoPacketType, build_video_tag
    from streamer.rtmp.handler import MediaMessage
    from streamer.samples import moving_face_frames

    encoder = H264Encoder(320, 240, bitrate_kbps=800, keyframe_interval_s=1.0, fps_hint=25)
    frames = [p for i, f in enumerate(moving_face_frames(grace_image, count, (320, 240))) for p in encoder.encode(f, start_ms + 40 * i)]
    header = build_video_tag(encoder.sequence_header, keyframe=True, packet_type=VideoPacketType.SEQUENCE_HEADER)
    return [MediaMessage("video", start_ms, header)] + [
        MediaMessage("video", p.dts, build_video_tag(p.data, keyframe=p.keyframe)) for p in frames
    ]


async def publish(url: str, messages: list, pace_s: float = 0.04, close: bool = True):
    """Publish like OBS: connect, send paced messages, and close unless asked to stay."""
    from streamer.rtmp.client import RtmpPublishClient

    client = RtmpPublishClient(url, timeout=10)
    await client.connect()
    for message in messages:
        await client.send(message)
        await asyncio.sleep(pace_s)
    if close:
        await client.close()
    return client


def encoded_noise(encoder_name: str, width: int, height: int, pix_fmt: str, options: dict[str, str],
                  frames: int) -> list[bytes]:
    """The packets ``encoder_name`` makes of ``frames`` frames of seeded noise (the encoder
    flushed): a small real stream whose headers a reader can be checked against."""
    encoder = av.CodecContext.create(encoder_name, "w")
    encoder.width, encoder.height, encoder.pix_fmt, encoder.time_base = width, height, pix_fmt, Fraction(1, 25)
    encoder.options = options
    rng = np.random.default_rng(0)
    packets = []
    for index in range(frames):
        frame = av.VideoFrame.from_ndarray(rng.integers(0, 255, (height, width, 3), np.uint8), format="rgb24")
        frame = frame.reformat(format=pix_fmt)
        frame.pts = index
        packets += [bytes(p) for p in encoder.encode(frame)]
    return packets + [bytes(p) for p in encoder.encode(None)]
