"""Jobs on videos trimmed by stream copy (``ffmpeg -ss 2.5 -i in.mp4 -t 3 -c copy``, what
phone and desktop editors do too): the file keeps the packets from the keyframe before the
cut, and an edit list that starts playback at the cut. Round 3: such a clip failed every
time, "rendered 62 frames where the input has 122". The split and the count now use the
frames a player shows, and the result plays with its audio where it was: each flash of the
picture lands with its beep, at the times the trimmed input plays them."""

from __future__ import annotations

import subprocess
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from gpu.options import SwapOptions
from streamer.jobs.assemble import Expected, assemble
from streamer.jobs.render import Encoding, render_chunk
from streamer.jobs.split import split_video
from streamer.samples import grace_hopper, moving_face_frames

FPS, RATE, SECONDS = 25, 48_000, 6
FLASHES_S = (1, 2, 3, 4, 5)  # a white frame and a 2 kHz beep at each whole second


def flash_clip(path: Path) -> None:
    """A moving face with a white frame and a beep each second; keyframes every 2 s, B-frames."""
    faces = moving_face_frames(grace_hopper(), FPS, (320, 240))
    with av.open(str(path), "w") as container:
        video = container.add_stream("libx264", rate=FPS, options={"preset": "veryfast", "g": str(2 * FPS),
                                                                   "keyint_min": str(2 * FPS), "sc_threshold": "0"})
        video.width, video.height, video.pix_fmt = 320, 240, "yuv420p"
        video.codec_context.time_base = Fraction(1, FPS)
        sound = container.add_stream("aac", rate=RATE, layout="mono")
        for number in range(SECONDS * FPS):
            picture = np.full((240, 320, 3), 255, np.uint8) if number % FPS == 0 and number else faces[number % FPS]
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts, frame.time_base = number, Fraction(1, FPS)
            container.mux(video.encode(frame))
        container.mux(video.encode(None))
        t = np.arange(SECONDS * RATE) / RATE
        samples = 0.05 * np.sin(2 * np.pi * 440 * t)
        for second in FLASHES_S:
            burst = slice(second * RATE, second * RATE + RATE // 50)
            samples[burst] = 0.8 * np.sin(2 * np.pi * 2000 * t[burst])
        for start in range(0, len(samples), 1024):
            block = samples[start:start + 1024].astype(np.float32)[None, :]
            frame = av.AudioFrame.from_ndarray(block, format="fltp", layout="mono")
            frame.sample_rate, frame.pts, frame.time_base = RATE, start, Fraction(1, RATE)
            container.mux(sound.encode(frame))
        container.mux(sound.encode(None))


def played(path: Path) -> tuple[int, list[float], list[float]]:
    """As a player shows it: the frame count, the flash times and the beep onsets (s)."""
    with av.open(str(path)) as container:
        frames = [(float(f.time), f.to_ndarray(format="rgb24").mean()) for f in container.decode(video=0)]
    with av.open(str(path)) as container:
        chunks = [(float(f.time), f.to_ndarray()[0]) for f in container.decode(audio=0)]
    start, samples = chunks[0][0], np.concatenate([c for _, c in chunks])
    window = RATE // 200
    energy = np.abs(samples[: len(samples) // window * window]).reshape(-1, window).max(axis=1)
    loud = energy > 0.5
    beeps = [start + i * window / RATE for i in np.nonzero(loud & ~np.r_[False, loud[:-1]])[0]]
    return len(frames), [t for t, mean in frames if mean > 230], beeps


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("trimmed")
    flash_clip(folder / "in.mp4")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-ss", "2.5", "-i", str(folder / "in.mp4"),
                    "-t", "3", "-c", "copy", str(folder / "trimmed.mp4")], check=True, timeout=60)
    return folder / "trimmed.mp4"


def test_a_clip_trimmed_by_stream_copy_renders_the_frames_it_shows_with_its_audio_in_sync(
        engine, astronaut_image, trimmed, tmp_path):
    with av.open(str(trimmed)) as container:
        packets = sum(1 for p in container.demux(container.streams.video[0]) if p.size)
    shown, flashes, beeps = played(trimmed)
    assert packets > shown and len(flashes) == len(beeps) == 3  # an edit list cuts lead packets out

    result = split_video(trimmed, tmp_path / "split", 1.0, label="trimmed.mp4")
    assert result.frames == shown == sum(p.frames for p in result.pieces)
    source = engine.register_source(astronaut_image)
    rendered = []
    for piece in result.pieces:
        out = tmp_path / "rendered" / piece.path.name
        report = render_chunk(engine, source, SwapOptions(), piece.path, out, expected_frames=piece.frames,
                              encoding=Encoding(), stopped=lambda: False, label="chunk", session_id="edit-list")
        assert report.frames_out == piece.frames
        rendered.append(out)
    output = assemble(trimmed, rendered, tmp_path, Expected(result.frames, result.duration_s, result.frame_s, True))

    frames, out_flashes, out_beeps = played(output.path)
    frame_s = 1 / FPS
    assert frames == shown == output.frames
    assert np.allclose(out_flashes, flashes, atol=frame_s / 2), (out_flashes, flashes)
    assert np.allclose(out_beeps, beeps, atol=frame_s / 2), (out_beeps, beeps)
    assert np.allclose(out_flashes, out_beeps, atol=frame_s), (out_flashes, out_beeps)  # lips stay in sync
