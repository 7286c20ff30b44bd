"""Bad input to ``swapcast swap``: every case ends with exit code 2 and ONE line on stderr that
names the problem (and the file, where there is one), never a traceback, and leaves no
output file behind. The CLI runs in-process through ``main()`` with ``capsys``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from media_fixtures import corrupt_copy, write_test_video
from streamer.media.images import read_image, write_image
from streamer.samples import moving_face_frames
from swapcast.cli import main

pytestmark = pytest.mark.slow


@dataclass
class Media:
    folder: Path
    astronaut: Path
    grace: Path
    two_faces: Path
    no_face: Path
    not_an_image: Path
    empty: Path
    unknown_ext: Path
    video: Path
    corrupt_video: Path


@pytest.fixture(scope="module")
def media(tmp_path_factory, astronaut_image, grace_image, two_faces) -> Media:
    folder = tmp_path_factory.mktemp("cli_errors_media")
    paths = Media(
        folder=folder,
        astronaut=folder / "astronaut.png",
        grace=folder / "grace.png",
        two_faces=folder / "two_faces.png",
        no_face=folder / "gradient.png",
        not_an_image=folder / "notes.jpg",
        empty=folder / "empty.png",
        unknown_ext=folder / "grace.xyz",
        video=folder / "grace.mp4",
        corrupt_video=folder / "grace_corrupt.mp4",
    )
    write_image(paths.astronaut, astronaut_image)
    write_image(paths.grace, grace_image)
    write_image(paths.two_faces, two_faces)
    gradient = np.linspace(0, 255, 320, dtype=np.uint8)[None, :, None]
    write_image(paths.no_face, np.ascontiguousarray(np.broadcast_to(gradient, (240, 320, 3))))
    paths.not_an_image.write_text("these are meeting notes, not a JPEG\n")
    paths.empty.write_bytes(b"")
    paths.unknown_ext.write_bytes(paths.grace.read_bytes())
    write_test_video(paths.video, moving_face_frames(grace_image, 24, (320, 240)), fps=25, audio=True)
    corrupt_copy(paths.video, paths.corrupt_video)
    return paths


def swap(capsys, *args: str | Path, output: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["swap", *(str(a) for a in args), "--output", str(output), "--no-progress"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_bad_input(code: int, err: str, *needles: str, output: Path | None = None) -> None:
    """Exit 2, exactly one non-empty line on stderr containing every needle, no traceback,
    no output (nor a hidden temp file) left behind."""
    assert code == 2, f"exit {code}, stderr: {err!r}"
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"stderr should be one line, got {lines!r}"
    assert lines[0].startswith("swapcast swap: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    if output is not None:
        assert not output.exists(), f"{output} was left behind"
        leftovers = [p.name for p in output.parent.iterdir() if p.name.startswith(f".{output.name}")]
        assert leftovers == [], f"temp files left behind: {leftovers}"


# --------------------------------------------------------------------------- the source


def test_source_without_a_face(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.no_face, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(media.no_face), "no face", output=output)


def test_source_with_several_faces_needs_an_index(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.two_faces, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(media.two_faces), "2 faces", "--source-face-index", output=output)


def test_source_face_index_picks_one_of_several(media, tmp_path, capsys, grace_image):
    output = tmp_path / "out.png"
    code, out, err = swap(capsys, "--source", media.two_faces, "--source-face-index", "1", "--target", media.grace,
                          output=output)
    assert code == 0, err
    assert "Traceback" not in err
    assert "1 of 1 face(s) swapped" in out
    result = read_image(output)
    assert result.shape == grace_image.shape
    assert not np.array_equal(result, grace_image)


@pytest.mark.parametrize("index", ["2", "7", "-1"])
def test_source_face_index_out_of_range(index, media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.two_faces, "--source-face-index", index, "--target", media.grace,
                        output=output)
    assert_bad_input(code, err, str(media.two_faces), f"index {index}", "out of range", output=output)


def test_source_that_is_not_an_image(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.not_an_image, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(media.not_an_image), "not a readable image", output=output)


def test_source_missing(media, tmp_path, capsys):
    missing = tmp_path / "nobody.png"
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", missing, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(missing), "no such file", output=output)


def test_source_empty_file(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.empty, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(media.empty), "empty", output=output)


# --------------------------------------------------------------------------- the target and output


def test_target_missing(media, tmp_path, capsys):
    missing = tmp_path / "nothing.mp4"
    output = tmp_path / "out.mp4"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", missing, output=output)
    assert_bad_input(code, err, "target", str(missing), "no such file", output=output)


def test_target_with_an_unknown_extension(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.unknown_ext, output=output)
    assert_bad_input(code, err, "target", str(media.unknown_ext), "unknown file type", ".xyz", output=output)


def test_target_empty_image(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.empty, output=output)
    assert_bad_input(code, err, str(media.empty), "empty", output=output)


def test_corrupt_video_target_leaves_no_output(media, tmp_path, capsys):
    output = tmp_path / "out.mp4"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.corrupt_video, output=output)
    assert_bad_input(code, err, str(media.corrupt_video), output=output)
    assert list(tmp_path.iterdir()) == [], "the failed run left files in the output folder"


def test_image_target_with_a_video_output(media, tmp_path, capsys):
    output = tmp_path / "out.mp4"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(output), "image output", output=output)


def test_video_target_with_an_image_output(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.video, output=output)
    assert_bad_input(code, err, str(output), ".mp4", output=output)


def test_output_folder_missing(media, tmp_path, capsys):
    output = tmp_path / "no" / "such" / "folder" / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.grace, output=output)
    assert_bad_input(code, err, str(output.parent), "does not exist")
    assert not output.exists()


# --------------------------------------------------------------------------- engine and config


def test_models_directory_missing(media, tmp_path, capsys):
    models = tmp_path / "no_models_here"
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.grace, "--models", models, output=output)
    assert_bad_input(code, err, str(models), "not found", output=output)


def test_inswapper_without_models(media, tmp_path, capsys):
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.grace, "--swapper", "inswapper",
                        output=output)
    assert_bad_input(code, err, "inswapper", "--models", output=output)


def test_invalid_config_value_from_environment(media, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SWAPCAST_SWAP__BLEND", "3")
    output = tmp_path / "out.png"
    code, _, err = swap(capsys, "--source", media.astronaut, "--target", media.grace, output=output)
    assert_bad_input(code, err, "swap.blend", output=output)


def test_config_file_missing(media, tmp_path, capsys):
    config = tmp_path / "swapcast.yaml"
    output = tmp_path / "out.png"
    capsys.readouterr()
    code = main(["--config", str(config), "swap", "--source", str(media.astronaut), "--target", str(media.grace),
                 "--output", str(output)])
    err = capsys.readouterr().err
    assert_bad_input(code, err, str(config), "not found", output=output)
