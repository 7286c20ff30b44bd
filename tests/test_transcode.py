"""Offline transcode: frame count, timing, audio and sync survive; bad input fails cleanly."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
from av.video.reformatter import Interpolation
from media_fixtures import corrupt_copy, write_test_video

from streamer.media.errors import VideoError
from streamer.media.transcode import TranscodeReport, transcode_video
from streamer.samples import astronaut, grace_hopper, moving_face_frames

FPS = 25
COUNT = 40  # 1.6 s at 25 fps
BEEP_FRAME = 20
ACCURATE = Interpolation.BILINEAR | Interpolation.ACCURATE_RND | Interpolation.FULL_CHR_H_INT


def identity(frame: np.ndarray, seconds: float) -> np.ndarray:
    return frame


def invert(frame: np.ndarray, seconds: float) -> np.ndarray:
    np.subtract(255, frame, out=frame)  # in place, as a swap may do
    return frame


# --- probes: what a player would see -------------------------------------------------------


def frame_pts(path: Path) -> tuple[list[int], av.video.stream.VideoStream]:
    """Decoded frames' pts in display order, and the stream's time base and average rate."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = [frame.pts for frame in container.decode(stream)]
        return pts, (stream.time_base, stream.average_rate, stream.width, stream.height)


def frame_times(path: Path) -> list[float]:
    with av.open(str(path)) as container:
        return [frame.time for frame in container.decode(video=0)]


def decoded_frames(path: Path) -> list[np.ndarray]:
    """RGB frames, converted with accurate rounding (swscale's default path darkens)."""
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24", interpolation=ACCURATE) for frame in container.decode(video=0)]


def audio_span(path: Path) -> tuple[str, float, float]:
    """Audio codec and the first packet's start and last packet's end, in seconds."""
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        packets = [p for p in container.demux(stream) if p.dts is not None]
        start = packets[0].pts * stream.time_base
        end = (packets[-1].pts + packets[-1].duration) * stream.time_base
        return stream.codec_context.codec.canonical_name, float(start), float(end)


def beep_onset(path: Path) -> float:
    """Time of the first decoded audio sample louder than the background tone."""
    with av.open(str(path)) as container:
        for frame in container.decode(audio=0):
            samples = frame.to_ndarray().astype(np.float64)
            if frame.format.is_planar:
                left = samples[0]
            else:
                left = samples.reshape(-1, len(frame.layout.channels))[:, 0]
            if frame.format.name.startswith("s16"):
                left /= 32768.0
            loud = np.flatnonzero(np.abs(left) > 0.5)
            if loud.size:
                return frame.time + loud[0] / frame.sample_rate
    raise AssertionError(f"{path}: no beep found")


def sync_offset(path: Path) -> float:
    """Beep onset minus the display time of the frame it was laid under."""
    return beep_onset(path) - frame_times(path)[BEEP_FRAME]


# --- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def frames() -> list[np.ndarray]:
    return moving_face_frames(astronaut(), COUNT, (320, 240))


@pytest.fixture(scope="module")
def media(tmp_path_factory: pytest.TempPathFactory, frames: list[np.ndarray]) -> dict[str, Path]:
    """Input files shared by the tests (read-only): name -> path."""
    folder = tmp_path_factory.mktemp("media")
    specs = {
        "aac.mp4": {"audio_codec": "aac"},
        "opus.mkv": {"audio_codec": "opus", "audio_offset_s": 0.3},
        "mp3.mkv": {"audio_codec": "mp3"},
        "flac.mkv": {"audio_codec": "flac"},
        "vfr.mkv": {"audio_codec": "opus", "vfr": True},
        "silent.mp4": {"audio": False},
    }
    paths = {}
    for name, options in specs.items():
        paths[name] = folder / name
        write_test_video(paths[name], frames, fps=FPS, beep_on_frames={BEEP_FRAME}, **options)
    return paths


# --- timing and audio ----------------------------------------------------------------------


def test_identity_mp4_keeps_every_frame_and_its_pts(media: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    report = transcode_video(media["aac.mp4"], out, identity)
    pts_in, (tb_in, rate_in, *_) = frame_pts(media["aac.mp4"])
    pts_out, (tb_out, rate_out, width, height) = frame_pts(out)
    assert len(pts_out) == len(pts_in) == COUNT
    assert pts_out == pts_in and tb_out == tb_in and rate_out == rate_in == FPS
    assert (width, height) == (320, 240)
    assert report.frames_in == report.frames_out == COUNT
    assert (report.width, report.height, report.audio_codec) == (320, 240, "aac")
    assert report.duration_s == pytest.approx(COUNT / FPS, abs=1 / FPS)
    assert report.seconds > 0


def test_identity_keeps_audio_codec_and_duration(media: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    transcode_video(media["aac.mp4"], out, identity)
    codec_in, start_in, end_in = audio_span(media["aac.mp4"])
    codec_out, start_out, end_out = audio_span(out)
    assert codec_out == codec_in == "aac"
    assert start_out == pytest.approx(start_in, abs=0.001)
    assert end_out - start_out == pytest.approx(end_in - start_in, abs=0.05)


@pytest.mark.parametrize(
    ("source", "suffix", "audio_codec"),
    [
        ("aac.mp4", ".mp4", "aac"),  # remux
        ("aac.mp4", ".mkv", "aac"),  # remux across containers
        ("opus.mkv", ".mp4", "opus"),  # remux: mp4 carries opus
        ("opus.mkv", ".mov", "aac"),  # transcode: QuickTime does not
        ("mp3.mkv", ".mp4", "mp3"),
        ("flac.mkv", ".mov", "aac"),
    ],
)
def test_audio_kept_and_in_sync(
    media: dict[str, Path], tmp_path: Path, source: str, suffix: str, audio_codec: str
) -> None:
    out = tmp_path / f"out{suffix}"
    report = transcode_video(media[source], out, identity)
    assert report.audio_codec == audio_codec
    codec, start, end = audio_span(out)
    _, start_in, end_in = audio_span(media[source])
    assert codec == audio_codec
    assert end - start == pytest.approx(end_in - start_in, abs=0.05)
    assert len(frame_times(out)) == COUNT
    # The beep under frame 20 still starts with frame 20 (to the millisecond).
    assert sync_offset(out) == pytest.approx(sync_offset(media[source]), abs=0.002)


def test_audio_start_offset_kept(media: dict[str, Path], tmp_path: Path) -> None:
    """The opus input's audio starts 0.3 s after the video; remuxed and re-encoded alike."""
    for suffix in (".mp4", ".mov"):
        out = tmp_path / f"out{suffix}"
        transcode_video(media["opus.mkv"], out, identity)
        assert beep_onset(out) - frame_times(out)[0] == pytest.approx(BEEP_FRAME / FPS, abs=0.002)
        with av.open(str(out)) as container:
            first_audio = next(container.decode(audio=0))
            assert first_audio.time == pytest.approx(0.3, abs=0.03)


def test_variable_frame_rate_keeps_pts(media: dict[str, Path], tmp_path: Path) -> None:
    times_in = frame_times(media["vfr.mkv"])
    steps = np.diff(times_in)
    assert steps.min() == pytest.approx(0.04) and steps.max() == pytest.approx(0.12)  # really VFR
    for suffix in (".mp4", ".mkv"):
        out = tmp_path / f"vfr{suffix}"
        report = transcode_video(media["vfr.mkv"], out, identity)
        assert frame_times(out) == pytest.approx(times_in, abs=1e-6)
        assert report.frames_out == COUNT
        assert report.duration_s == pytest.approx(times_in[-1] + 0.04, abs=0.001)


def test_video_without_audio(media: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.mkv"
    report = transcode_video(media["silent.mp4"], out, identity)
    assert report.audio_codec is None
    with av.open(str(out)) as container:
        assert not container.streams.audio
        assert container.streams.video[0].codec_context.codec.canonical_name == "h264"
    assert len(frame_times(out)) == COUNT


def test_output_is_h264_yuv420p_with_index_first(media: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.mp4"
    transcode_video(media["aac.mp4"], out, identity)
    with av.open(str(out)) as container:
        video = container.streams.video[0]
        assert video.codec_context.codec.canonical_name == "h264"
        assert video.codec_context.pix_fmt == "yuv420p"
    head = out.read_bytes()
    assert head.index(b"moov") < head.index(b"mdat")  # +faststart


# --- pixels --------------------------------------------------------------------------------


def test_transform_is_applied(media: dict[str, Path], frames: list[np.ndarray], tmp_path: Path) -> None:
    out = tmp_path / "inverted.mp4"
    transcode_video(media["aac.mp4"], out, invert)
    result = decoded_frames(out)
    for index in (0, COUNT // 2, COUNT - 1):
        assert result[index].mean() == pytest.approx(255 - frames[index].mean(), abs=3)
        assert np.abs(result[index].astype(np.int16) - (255 - frames[index].astype(np.int16))).mean() < 6


def test_identity_keeps_pixels_and_colours(media: dict[str, Path], frames: list[np.ndarray], tmp_path: Path) -> None:
    out = tmp_path / "same.mp4"
    transcode_video(media["aac.mp4"], out, identity)
    result = decoded_frames(out)
    for channel in range(3):  # no brightness drift from the RGB <-> YUV round trips
        assert result[10][..., channel].mean() == pytest.approx(frames[10][..., channel].mean(), abs=2)
    assert np.abs(result[10].astype(np.int16) - frames[10]).mean() < 6


def test_saturated_colours_survive(tmp_path: Path) -> None:
    """Colour bars expose a wrong YUV matrix or range, which greyish faces hide."""
    colours = [
        (255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0),
        (255, 255, 255), (16, 16, 16), (0, 255, 255), (255, 0, 255),
    ]
    bars = np.repeat(np.array(colours, np.uint8)[None, :, :], 240, axis=0).repeat(40, axis=1)
    source = tmp_path / "bars.mp4"
    write_test_video(source, [bars.copy() for _ in range(5)], audio=False)
    out = tmp_path / "bars_out.mkv"
    transcode_video(source, out, identity)
    result = decoded_frames(out)[2].astype(np.int16)
    for index, colour in enumerate(colours):
        centre = result[100:140, index * 40 + 12 : index * 40 + 28].reshape(-1, 3).mean(axis=0)
        assert np.abs(centre - colour).max() < 6, (colour, centre)


def test_odd_size_is_cropped_to_even(tmp_path: Path) -> None:
    odd = [frame[:121, :161].copy() for frame in moving_face_frames(grace_hopper(), 10, (162, 122))]
    source = tmp_path / "odd.mkv"
    with av.open(str(source), "w") as container:  # x264 refuses odd sizes: store lossless RGB
        stream = container.add_stream("ffv1", rate=FPS)
        stream.width, stream.height, stream.pix_fmt = 161, 121, "bgr0"
        for index, frame in enumerate(odd):
            video_frame = av.VideoFrame.from_ndarray(frame, format="rgb24")
            video_frame.pts = index
            container.mux(stream.encode(video_frame))
        container.mux(stream.encode(None))
    seen: list[tuple[int, ...]] = []
    out = tmp_path / "even.mp4"
    report = transcode_video(source, out, lambda f, t: seen.append(f.shape) or f)
    assert (report.width, report.height) == (160, 120)
    assert set(seen) == {(120, 160, 3)}
    result = decoded_frames(out)
    assert len(result) == 10 and result[0].shape == (120, 160, 3)
    assert np.abs(result[5].astype(np.int16) - odd[5][:120, :160]).mean() < 6  # cropped, not scaled


def test_rotation_is_applied_before_the_transform(frames: list[np.ndarray], tmp_path: Path) -> None:
    source = tmp_path / "portrait.mp4"
    write_test_video(source, frames[:5], rotation=90)
    shapes: list[tuple[int, ...]] = []
    out = tmp_path / "upright.mp4"
    report = transcode_video(source, out, lambda f, t: shapes.append(f.shape) or f)
    assert (report.width, report.height) == (240, 320)
    assert set(shapes) == {(320, 240, 3)}
    with av.open(str(out)) as container:
        first = next(container.decode(video=0))
        assert first.rotation == 0  # no tag left to rotate it a second time
        upright = first.to_ndarray(format="rgb24")
    assert np.abs(upright.astype(np.int16) - np.rot90(frames[0])).mean() < 6


def test_progress_counts_every_frame(media: dict[str, Path], tmp_path: Path) -> None:
    calls: list[tuple[int, int | None]] = []

    def record(done: int, total: int | None) -> None:
        calls.append((done, total))

    transcode_video(media["aac.mp4"], tmp_path / "out.mp4", identity, progress=record)
    assert [done for done, _ in calls] == list(range(1, COUNT + 1))
    assert {total for _, total in calls} == {COUNT}


def test_progress_total_is_estimated_without_a_frame_count(media: dict[str, Path], tmp_path: Path) -> None:
    totals: set[int | None] = set()
    transcode_video(media["mp3.mkv"], tmp_path / "out.mp4", identity, progress=lambda done, total: totals.add(total))
    (total,) = totals
    assert total is not None and abs(total - COUNT) <= 2


def test_encoder_settings_are_used(media: dict[str, Path], tmp_path: Path) -> None:
    small, large = tmp_path / "small.mp4", tmp_path / "large.mp4"
    transcode_video(media["silent.mp4"], small, identity, preset="ultrafast", crf=40)
    transcode_video(media["silent.mp4"], large, identity, preset="ultrafast", crf=10)
    assert small.stat().st_size * 3 < large.stat().st_size


# --- failures ------------------------------------------------------------------------------


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".part"))


def test_corrupt_input_raises_and_leaves_nothing(media: dict[str, Path], tmp_path: Path) -> None:
    damaged = tmp_path / "damaged.mp4"
    corrupt_copy(media["aac.mp4"], damaged)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    with pytest.raises(VideoError, match=r"damaged\.mp4.*decoding stopped after \d+ frames"):
        transcode_video(damaged, out_dir / "result.mp4", identity)
    assert list(out_dir.iterdir()) == []


def test_failed_run_keeps_the_previous_output(media: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "result.mp4"
    out.write_bytes(b"previous result")

    def explode(frame: np.ndarray, seconds: float) -> np.ndarray:
        raise RuntimeError("swap crashed")

    with pytest.raises(RuntimeError, match="swap crashed"):
        transcode_video(media["aac.mp4"], out, explode)
    assert out.read_bytes() == b"previous result"
    assert _leftovers(tmp_path) == []


def test_transform_must_keep_the_shape(media: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"transform must return uint8 \(240, 320, 3\)"):
        transcode_video(media["aac.mp4"], tmp_path / "out.mp4", lambda f, t: f[:100])
    assert list(tmp_path.iterdir()) == []


def test_non_media_file(tmp_path: Path) -> None:
    text = tmp_path / "holiday.mp4"
    text.write_text("not a video at all\n" * 100)
    with pytest.raises(VideoError, match=r"holiday\.mp4.*not a readable video file"):
        transcode_video(text, tmp_path / "out.mp4", identity)
    assert _leftovers(tmp_path) == [] and not (tmp_path / "out.mp4").exists()


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"nothere\.mp4.*no such file"):
        transcode_video(tmp_path / "nothere.mp4", tmp_path / "out.mp4", identity)


def test_audio_only_file_has_no_video(tmp_path: Path) -> None:
    song = tmp_path / "song.m4a"
    with av.open(str(song), "w", format="mp4") as container:
        stream = container.add_stream("aac", rate=48_000, layout="mono")
        frame = av.AudioFrame.from_ndarray(np.zeros((1, 4800), np.float32), format="fltp", layout="mono")
        frame.sample_rate, frame.pts = 48_000, 0
        container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    with pytest.raises(VideoError, match=r"song\.m4a.*no video stream"):
        transcode_video(song, tmp_path / "out.mp4", identity)
    assert _leftovers(tmp_path) == []


def test_unknown_output_container(media: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"out\.webm.*use one of"):
        transcode_video(media["aac.mp4"], tmp_path / "out.webm", identity)


def test_missing_output_folder(media: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(VideoError, match=r"out\.mp4.*cannot write"):
        transcode_video(media["aac.mp4"], tmp_path / "nope" / "out.mp4", identity)


def test_report_type(media: dict[str, Path], tmp_path: Path) -> None:
    report = transcode_video(media["silent.mp4"], tmp_path / "out.mov", identity)
    assert isinstance(report, TranscodeReport)
    assert report.frames_in == COUNT and report.audio_codec is None


def test_transform_gets_each_frames_time(media: dict[str, Path], tmp_path: Path) -> None:
    times: list[float] = []
    transcode_video(media["aac.mp4"], tmp_path / "out.mp4", lambda f, t: times.append(t) or f)
    assert len(times) > 2 and all(b > a for a, b in zip(times, times[1:]))
    assert times[1] - times[0] == pytest.approx(1 / FPS, abs=1e-3)


# --- a transform in stages -------------------------------------------------------------------


def test_a_transform_in_stages_writes_the_same_file(media: dict[str, Path], tmp_path: Path) -> None:
    """Stages on threads of their own, handing each other what they like, write the file a
    single transform writes: the same audio packets (bytes and times), the same video packet
    times in the same order, and the same pictures. Not the same video bytes: one frame's
    packet came out different once in a full run of the suite (x264 on two slice threads;
    not reproduced in 18 runs alone or beside two busy cores), which the pictures tolerate
    and a frame out of order or with a neighbour's level would not."""
    whole, staged = tmp_path / "whole.mkv", tmp_path / "staged.mkv"

    def both(frame: np.ndarray, seconds: float) -> np.ndarray:
        frame[: frame.shape[0] // 2] = 255 - frame[: frame.shape[0] // 2]
        frame[:, :8] = int(seconds * 100) % 256
        return frame

    def first(frame: np.ndarray, seconds: float) -> tuple[np.ndarray, int]:
        frame[: frame.shape[0] // 2] = 255 - frame[: frame.shape[0] // 2]
        return frame, int(seconds * 100) % 256

    def second(pair: tuple[np.ndarray, int], seconds: float) -> np.ndarray:
        frame, level = pair
        frame[:, :8] = level
        return frame

    transcode_video(media["opus.mkv"], whole, both)
    report = transcode_video(media["opus.mkv"], staged, [first, second])
    assert report.frames_out == COUNT
    got, expected = _packets(staged), _packets(whole)
    assert [(stream, pts, dts) for stream, pts, dts, _ in got] == [(stream, pts, dts) for stream, pts, dts, _ in expected]
    with av.open(str(whole)) as container:
        audio = container.streams.audio[0].index
    assert [data for stream, *_, data in got if stream == audio] == [data for stream, *_, data in expected if stream == audio]
    for mine, theirs in zip(_pictures(staged), _pictures(whole), strict=True):
        difference = np.abs(mine.astype(np.int16) - theirs)
        # the same picture, encoded alike; the next frame's level (4 codes off) would show in the strip
        assert difference.mean() < 0.5 and difference[:, :8].mean() < 1.5


def _packets(path: Path) -> list[tuple[int, int | None, int | None, bytes]]:
    with av.open(str(path)) as container:
        return [(p.stream.index, p.pts, p.dts, bytes(p)) for p in container.demux() if p.size]


def _pictures(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as container:
        return [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]


def test_a_stage_that_fails_stops_the_run_and_leaves_nothing(media: dict[str, Path], tmp_path: Path) -> None:
    stopped_at: list[int] = []

    def fail_at_ten(frame: np.ndarray, seconds: float) -> np.ndarray:
        if seconds * FPS >= 10:
            raise RuntimeError("model failed")
        return frame

    def stop_after_five(done: int, total: int | None) -> None:
        stopped_at.append(done)
        if done == 5:
            raise KeyboardInterrupt  # e.g. a worker told to stop: raised from the progress call

    with pytest.raises(RuntimeError, match="model failed"):
        transcode_video(media["aac.mp4"], tmp_path / "a.mp4", [identity, fail_at_ten])
    with pytest.raises(KeyboardInterrupt):
        transcode_video(media["aac.mp4"], tmp_path / "b.mp4", [identity, identity], progress=stop_after_five)
    assert stopped_at == [1, 2, 3, 4, 5]
    assert list(tmp_path.iterdir()) == []
