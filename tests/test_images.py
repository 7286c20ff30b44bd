"""Still-image I/O: round trips, colour conversions, EXIF orientation and clear errors."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from gpu.errors import ImageError
from streamer.media.images import is_image_path, is_video_path, read_image, write_image
from streamer.samples import astronaut


@pytest.fixture(scope="module")
def face() -> np.ndarray:
    return astronaut()[::2, ::2].copy()


@pytest.mark.parametrize(
    ("ext", "max_error"), [(".png", 0.0), (".bmp", 0.0), (".jpg", 3.0), (".jpeg", 3.0), (".webp", 3.0)]
)
def test_round_trip(tmp_path: Path, face: np.ndarray, ext: str, max_error: float) -> None:
    path = tmp_path / f"face{ext}"
    write_image(path, face)
    back = read_image(path)
    assert back.shape == face.shape and back.dtype == np.uint8
    assert np.abs(back.astype(np.int16) - face).mean() <= max_error


def test_round_trip_keeps_channel_order(tmp_path: Path) -> None:
    red = np.zeros((8, 8, 3), np.uint8)
    red[..., 0] = 255
    write_image(tmp_path / "red.png", red)
    assert np.array_equal(read_image(tmp_path / "red.png"), red)
    # What another tool (OpenCV writes BGR) sees must be red too.
    assert cv2.imread(str(tmp_path / "red.png"))[0, 0].tolist() == [0, 0, 255]


def test_non_ascii_path(tmp_path: Path, face: np.ndarray) -> None:
    path = tmp_path / "visage-éà.png"
    write_image(path, face)
    assert np.array_equal(read_image(path), face)


def test_grayscale_becomes_rgb(tmp_path: Path) -> None:
    gray = np.tile(np.arange(0, 256, 4, dtype=np.uint8), (16, 1))
    cv2.imwrite(str(tmp_path / "gray.png"), gray)
    rgb = read_image(tmp_path / "gray.png")
    assert rgb.shape == (16, 64, 3)
    assert all(np.array_equal(rgb[..., c], gray) for c in range(3))


def test_rgba_drops_alpha(tmp_path: Path) -> None:
    rgba = np.zeros((10, 12, 4), np.uint8)
    rgba[..., 1] = 200  # green
    rgba[..., 3] = 50  # mostly transparent: colour is kept, alpha dropped
    Image.fromarray(rgba, "RGBA").save(tmp_path / "rgba.png")
    rgb = read_image(tmp_path / "rgba.png")
    assert rgb.shape == (10, 12, 3)
    assert rgb[0, 0].tolist() == [0, 200, 0]


def test_sixteen_bit_png_becomes_eight_bit(tmp_path: Path) -> None:
    deep = np.full((6, 6, 3), 65535, np.uint16)
    cv2.imwrite(str(tmp_path / "deep.png"), deep)
    rgb = read_image(tmp_path / "deep.png")
    assert rgb.dtype == np.uint8 and rgb.min() == 255


def test_exif_orientation_is_applied(tmp_path: Path) -> None:
    stored = np.zeros((40, 80, 3), np.uint8)
    stored[:, :40] = 255  # left half white as stored
    image = Image.fromarray(stored)
    exif = image.getexif()
    exif[0x0112] = 6  # display rotated 90° clockwise
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", exif=exif.tobytes())
    (tmp_path / "rotated.jpg").write_bytes(buffer.getvalue())
    upright = read_image(tmp_path / "rotated.jpg")
    assert upright.shape == (80, 40, 3)
    assert upright[:30].mean() > 240 and upright[50:].mean() < 15  # white moved to the top


def _truncated(data: bytes) -> bytes:
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    ("name", "content"),
    [
        ("empty.jpg", b""),
        ("notes.png", b"this is a shopping list, not a picture\n" * 20),
        ("truncated.jpg", "jpg"),
        ("truncated.png", "png"),
    ],
)
def test_bad_image_raises_naming_the_file(tmp_path: Path, face: np.ndarray, name: str, content: bytes | str) -> None:
    if isinstance(content, str):
        content = _truncated(cv2.imencode(f".{content}", face)[1].tobytes())
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ImageError, match=name):
        read_image(path)


def test_missing_image_raises_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match="nowhere.jpg.*no such file"):
        read_image(tmp_path / "nowhere.jpg")


def test_directory_is_not_an_image(tmp_path: Path) -> None:
    folder = tmp_path / "album.png"
    folder.mkdir()
    with pytest.raises(ImageError, match="album.png"):
        read_image(folder)


def test_write_unknown_extension_raises(tmp_path: Path, face: np.ndarray) -> None:
    with pytest.raises(ImageError, match=r"face\.tiff.*unknown image extension"):
        write_image(tmp_path / "face.tiff", face)
    assert not (tmp_path / "face.tiff").exists()


def test_write_into_missing_folder_raises(tmp_path: Path, face: np.ndarray) -> None:
    with pytest.raises(ImageError, match="missing"):
        write_image(tmp_path / "missing" / "face.png", face)


def test_write_rejects_non_rgb_arrays(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="RGB uint8"):
        write_image(tmp_path / "x.png", np.zeros((4, 4), np.uint8))


@pytest.mark.parametrize("name", ["a.jpg", "b.JPEG", "c.png", "d.webp", "e.bmp"])
def test_image_paths(name: str) -> None:
    assert is_image_path(name) and not is_video_path(name)


@pytest.mark.parametrize("name", ["a.mp4", "b.MOV", "c.mkv", "d.webm", "e.avi", "f.flv", "g.m4v"])
def test_video_paths(name: str) -> None:
    assert is_video_path(name) and not is_image_path(name)


@pytest.mark.parametrize("name", ["a.txt", "b", "c.gif.bak"])
def test_other_paths(name: str) -> None:
    assert not is_image_path(name) and not is_video_path(name)
