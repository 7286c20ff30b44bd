"""End-to-end tests of ``swapcast swap`` and ``swapcast score`` on real faces (the issue's
acceptance tests): images both directions, a video with audio (.mp4 and .mkv), pass-through
of face-less frames, and the swap options. The CLI runs in-process through ``main()``; the
installed console script is exercised in ``test_cli_misc.py``.

Identity rule (dlib, see ARCHITECTURE.md): a swap works when d(output, source) < 0.6 and
d(output, source) < d(output, target)."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import av
import cv2
import numpy as np
import pytest

from gpu.analysis.identity import SAME_PERSON_DISTANCE, identity_distance
from gpu.analysis.landmarks import OUTER_LIPS
from streamer.media.images import read_image, write_image
from streamer.samples import moving_face_frames
from swapcast.cli import main
from media_fixtures import write_test_video

pytestmark = pytest.mark.slow

VIDEO_FPS = 25
VIDEO_FRAMES = 32
VIDEO_SIZE = (320, 240)  # (width, height): small and fast, faces still found in every frame


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(*args: str | Path) -> Run:
    """``swapcast ARGS`` in-process with stdout/stderr captured (usable in module fixtures,
    where ``capsys`` is not available)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return Run(code, out.getvalue(), err.getvalue())


def assert_ok(run: Run) -> None:
    assert run.code == 0, f"exit {run.code}\nstdout: {run.out}\nstderr: {run.err}"
    assert "Traceback" not in run.err


# --------------------------------------------------------------------------- media


@pytest.fixture(scope="module")
def media(tmp_path_factory, astronaut_image, grace_image, two_faces) -> Path:
    """The sample faces as PNG files, the two-face picture and a face-less picture."""
    folder = tmp_path_factory.mktemp("cli_swap_media")
    write_image(folder / "astronaut.png", astronaut_image)
    write_image(folder / "grace.png", grace_image)
    write_image(folder / "two_faces.png", two_faces)
    from skimage import data

    write_image(folder / "coffee.png", np.ascontiguousarray(data.coffee()))
    return folder


@pytest.fixture(scope="module")
def image_swaps(media, tmp_path_factory) -> dict[str, tuple[Path, Path, Path, Run]]:
    """Both directions, default options: name -> (source, target, output, run)."""
    out = tmp_path_factory.mktemp("cli_swap_images")
    pairs = {"astronaut_onto_grace": ("astronaut", "grace"), "grace_onto_astronaut": ("grace", "astronaut")}
    result = {}
    for name, (src, tgt) in pairs.items():
        source, target, output = media / f"{src}.png", media / f"{tgt}.png", out / f"{name}.png"
        result[name] = (source, target, output, run_cli("swap", "--source", source, "--target", target, "--output", output))
    return result


@pytest.fixture(scope="module")
def video(media, grace_image) -> Path:
    """Grace Hopper moving in front of a webcam, H.264 + AAC audio, 32 frames at 320x240."""
    path = media / "grace_moving.mp4"
    write_test_video(path, moving_face_frames(grace_image, VIDEO_FRAMES, VIDEO_SIZE), fps=VIDEO_FPS, audio=True)
    return path


@pytest.fixture(scope="module")
def video_swaps(media, video, tmp_path_factory) -> dict[str, tuple[Path, Run]]:
    out = tmp_path_factory.mktemp("cli_swap_videos")
    result = {}
    for ext in ("mp4", "mkv"):
        output = out / f"swapped.{ext}"
        result[ext] = (output, run_cli("swap", "--source", media / "astronaut.png", "--target", video, "--output", output, "--no-progress"))
    return result


@dataclass
class VideoProbe:
    frames: int
    times: list[float]  # decoded frames' presentation times, seconds
    width: int
    height: int
    audio_codecs: list[str]
    audio_duration_s: float | None

    @property
    def span_s(self) -> float:
        """First frame start to last frame end (one nominal frame interval for the last)."""
        return self.times[-1] - self.times[0] + 1 / VIDEO_FPS


def probe(path: Path) -> VideoProbe:
    """Decode every video frame with PyAV and list the audio streams."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        times = [float(frame.pts * frame.time_base) for frame in container.decode(stream)]
        audio = [s.codec_context.name for s in container.streams.audio]
        audio_duration = None
        if container.streams.audio:
            a = container.streams.audio[0]
            if a.duration is not None and a.time_base is not None:
                audio_duration = float(a.duration * a.time_base)
        return VideoProbe(len(times), times, stream.width, stream.height, audio, audio_duration)


def region_mask(shape: tuple[int, ...], points: np.ndarray) -> np.ndarray:
    mask = np.zeros(shape[:2], np.uint8)
    cv2.fillPoly(mask, [np.round(points).astype(np.int32)], 1)
    return mask.astype(bool)


def box_slice(box, shape, grow: float = 0.0) -> tuple[slice, slice]:
    """Pixel slices of a face box (x0, y0, x1, y1), grown by ``grow`` of its size each side."""
    x0, y0, x1, y1 = (float(v) for v in box)
    dx, dy = (x1 - x0) * grow, (y1 - y0) * grow
    height, width = shape[:2]
    return (
        slice(max(0, int(y0 - dy)), min(height, int(np.ceil(y1 + dy)))),
        slice(max(0, int(x0 - dx)), min(width, int(np.ceil(x1 + dx)))),
    )


# --------------------------------------------------------------------------- 1. images


@pytest.mark.parametrize("name", ["astronaut_onto_grace", "grace_onto_astronaut"])
def test_swap_image_reads_as_the_source(name, image_swaps, identity_of):
    source, target, output, run = image_swaps[name]
    assert_ok(run)
    assert output.is_file()
    assert "1 of 1 face(s) swapped" in run.out
    target_pixels, out_pixels = read_image(target), read_image(output)
    assert out_pixels.shape == target_pixels.shape
    assert not np.array_equal(out_pixels, target_pixels)

    out_id = identity_of(out_pixels)
    to_source = identity_distance(out_id, identity_of(read_image(source)))
    to_target = identity_distance(out_id, identity_of(target_pixels))
    assert to_source < SAME_PERSON_DISTANCE, f"{name}: d(output, source) {to_source:.3f}"
    assert to_source < to_target, f"{name}: d(output, source) {to_source:.3f} >= d(output, target) {to_target:.3f}"


@pytest.mark.parametrize("name", ["astronaut_onto_grace", "grace_onto_astronaut"])
def test_score_check_json_on_image(name, image_swaps, identity_of, capsys):
    source, target, output, run = image_swaps[name]
    assert_ok(run)
    capsys.readouterr()
    code = main(["score", "--source", str(source), "--output", str(output), "--target", str(target), "--check", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report["passed"] is True
    assert report["frames_scored"] == 1 and report["frames_without_face"] == 0
    assert report["output_to_source"] < SAME_PERSON_DISTANCE
    assert report["output_to_source"] < report["output_to_target"]
    # the same numbers the test computes itself with the same dlib metric
    out_id = identity_of(read_image(output))
    assert report["output_to_source"] == pytest.approx(identity_distance(out_id, identity_of(read_image(source))), abs=0.02)
    assert report["output_to_target"] == pytest.approx(identity_distance(out_id, identity_of(read_image(target))), abs=0.02)


def test_score_check_fails_on_an_unswapped_image(media, capsys):
    """--check is a real gate: the untouched target does not read as the source (exit 1)."""
    code = main(["score", "--source", str(media / "astronaut.png"), "--output", str(media / "grace.png"), "--check", "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 1
    assert report["passed"] is False
    assert report["output_to_source"] > SAME_PERSON_DISTANCE


# --------------------------------------------------------------------------- 2. video


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
def test_swap_video_keeps_frames_audio_and_duration(ext, video, video_swaps):
    output, run = video_swaps[ext]
    assert_ok(run)
    assert output.is_file()
    assert f"{VIDEO_FRAMES} frames" in run.out and "audio aac" in run.out
    before, after = probe(video), probe(output)
    assert before.frames == VIDEO_FRAMES
    assert after.frames == before.frames
    assert (after.width, after.height) == VIDEO_SIZE
    assert after.audio_codecs, "the output lost the audio stream"
    assert abs(after.span_s - before.span_s) <= 1 / VIDEO_FPS
    # frame intervals survive (Matroska may shift the whole file by the AAC priming delay,
    # ~21 ms, audio included, so compare times relative to the first frame)
    relative = lambda times: [t - times[0] for t in times]  # noqa: E731
    assert relative(after.times) == pytest.approx(relative(before.times), abs=2e-3), "frame timing changed"
    if after.audio_duration_s is not None:
        assert abs(after.audio_duration_s - VIDEO_FRAMES / VIDEO_FPS) <= 1 / VIDEO_FPS
    # no temp files left beside the output
    assert sorted(p.name for p in output.parent.iterdir() if p.name.startswith(".")) == []


@pytest.mark.parametrize("ext", ["mp4", "mkv"])
def test_score_check_on_video(ext, media, video, video_swaps, capsys):
    output, run = video_swaps[ext]
    assert_ok(run)
    capsys.readouterr()
    code = main(["score", "--source", str(media / "astronaut.png"), "--output", str(output), "--target", str(video),
                 "--frames", "6", "--check", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report["passed"] is True
    assert report["frames_scored"] == 6 and report["frames_without_face"] == 0
    assert report["output_to_source"] < SAME_PERSON_DISTANCE
    assert report["output_to_source"] < report["output_to_target"]


def test_several_source_photos_of_one_person_swap_a_video(media, video, tmp_path, astronaut_image, capsys):
    """``--source`` repeated: photos of one person (here a photo and its mirror image) merged
    into one face that the swapped video reads as."""
    mirrored = tmp_path / "astronaut_mirrored.png"
    write_image(mirrored, np.ascontiguousarray(astronaut_image[:, ::-1]))
    output = tmp_path / "two_photos.mp4"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--source", str(mirrored), "--target", str(video),
                 "--output", str(output), "--no-progress"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert probe(output).frames == VIDEO_FRAMES
    code = main(["score", "--source", str(media / "astronaut.png"), "--output", str(output), "--target", str(video),
                 "--frames", "4", "--check", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert report["output_to_source"] < SAME_PERSON_DISTANCE < report["output_to_target"]


def test_a_source_photo_of_someone_else_is_refused(media, tmp_path, capsys):
    output = tmp_path / "mixed.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--source", str(media / "grace.png"),
                 "--target", str(media / "grace.png"), "--output", str(output)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"source {media / 'grace.png'} shows someone else than the photos before it" in err
    assert not output.exists()


# --------------------------------------------------------------------------- 3. pass-through


def test_image_without_a_face_passes_through_unchanged(media, tmp_path, capsys):
    output = tmp_path / "coffee_out.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--target", str(media / "coffee.png"), "--output", str(output)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "0 of 0 face(s) swapped" in captured.out
    assert np.array_equal(read_image(output), read_image(media / "coffee.png"))


# --------------------------------------------------------------------------- 4. options


def test_blend_zero_leaves_target_unchanged(media, tmp_path, capsys):
    output = tmp_path / "blend0.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--target", str(media / "grace.png"),
                 "--output", str(output), "--blend", "0"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "0 of 1 face(s) swapped" in captured.out
    assert np.array_equal(read_image(output), read_image(media / "grace.png"))


@pytest.fixture(scope="module")
def two_face_boxes(engine, two_faces, astronaut_image) -> dict[str, tuple]:
    """Face boxes in the two-face picture, by who is there (astronaut left, Grace right)."""
    faces = engine.analyse_image(two_faces)
    assert len(faces) == 2
    split = astronaut_image.shape[1]
    named = {("astronaut" if face.center[0] < split else "grace"): face for face in faces}
    assert set(named) == {"astronaut", "grace"}
    largest = "astronaut" if named["astronaut"].area > named["grace"].area else "grace"
    return {"largest": largest, **{k: v.box for k, v in named.items()}}


def _changed(before: np.ndarray, after: np.ndarray, box) -> float:
    rows, cols = box_slice(box, before.shape)
    return float(np.abs(after[rows, cols].astype(np.int16) - before[rows, cols]).mean())


def test_faces_largest_swaps_only_the_larger_face(media, two_faces, two_face_boxes, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWAPCAST_PROVENANCE__WATERMARK", "false")  # its mark covers the whole picture
    output = tmp_path / "largest.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--target", str(media / "two_faces.png"),
                 "--output", str(output), "--faces", "largest"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 of 2 face(s) swapped" in captured.out
    result = read_image(output)
    larger = two_face_boxes["largest"]
    other = "grace" if larger == "astronaut" else "astronaut"
    assert _changed(two_faces, result, two_face_boxes[larger]) > 1.0, "the larger face was not swapped"
    rows, cols = box_slice(two_face_boxes[other], two_faces.shape, grow=0.2)
    assert np.array_equal(result[rows, cols], two_faces[rows, cols]), f"the smaller face ({other}) changed"


def test_faces_reference_swaps_only_that_person(media, two_faces, two_face_boxes, astronaut_image, identity_of,
                                                 tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWAPCAST_PROVENANCE__WATERMARK", "false")  # its mark covers the whole picture
    output = tmp_path / "reference.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--target", str(media / "two_faces.png"),
                 "--output", str(output), "--faces", "reference", "--reference", str(media / "grace.png")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 of 2 face(s) swapped" in captured.out
    result = read_image(output)
    assert _changed(two_faces, result, two_face_boxes["grace"]) > 1.0, "Grace's face was not swapped"
    rows, cols = box_slice(two_face_boxes["astronaut"], two_faces.shape, grow=0.2)
    assert np.array_equal(result[rows, cols], two_faces[rows, cols]), "the astronaut's face changed"
    # Grace's half of the picture now reads as the source
    split = astronaut_image.shape[1]
    swapped_half = np.ascontiguousarray(result[:, split:])
    assert identity_distance(identity_of(swapped_half), identity_of(astronaut_image)) < SAME_PERSON_DISTANCE


def test_faces_reference_needs_a_reference_image(media, tmp_path, capsys):
    output = tmp_path / "noref.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--target", str(media / "two_faces.png"),
                 "--output", str(output), "--faces", "reference"])
    captured = capsys.readouterr()
    assert code == 2
    assert "--reference" in captured.err
    assert "Traceback" not in captured.err
    assert not output.exists()


def test_mouth_mask_keeps_the_targets_mouth(media, image_swaps, engine, tmp_path, capsys):
    _, target, default_output, run = image_swaps["astronaut_onto_grace"]
    assert_ok(run)
    output = tmp_path / "mouth_mask.png"
    code = main(["swap", "--source", str(media / "astronaut.png"), "--target", str(target), "--output", str(output),
                 "--mouth-mask"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    target_pixels = read_image(target)
    faces = engine.analyse_image(target_pixels)
    assert faces and faces[0].mesh is not None
    mouth = region_mask(target_pixels.shape, faces[0].mesh[list(OUTER_LIPS)])
    assert mouth.sum() > 100

    def error(image: np.ndarray) -> float:
        return float(np.abs(image[mouth].astype(np.int16) - target_pixels[mouth]).mean())

    default, masked = read_image(default_output), read_image(output)
    assert float(np.abs(masked[mouth].astype(np.int16) - default[mouth]).mean()) > 1.0, "--mouth-mask changed nothing at the mouth"
    assert error(masked) < error(default), f"mouth: masked {error(masked):.2f} vs default {error(default):.2f} from the target"
    assert error(masked) < 0.5 * error(default)

