import av
import numpy as np

from streamer.media.yuv import i420_frame, rgb_to_i420


def _smooth_rgb(height: int, width: int) -> np.ndarray:
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([(x * 255 // max(width - 1, 1)), (y * 255 // max(height - 1, 1)), ((x + y) % 256)], axis=-1).astype(np.uint8)


def test_same_conversion_as_pyav_swscale():
    rgb = _smooth_rgb(48, 64)
    ours = rgb_to_i420(rgb)
    theirs = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p").to_ndarray()
    assert ours.shape == theirs.shape == (72, 64)
    assert np.abs(ours[:48].astype(int) - theirs[:48]).max() <= 1  # luma
    assert np.abs(ours[48:].astype(int) - theirs[48:]).max() <= 3  # chroma (its own 2x2 filter)


def test_studio_range_levels_survive_a_decode_and_back():
    # the live benchmark's frame counter: luma 16 and 235 must come back as 16 and 235
    planes = np.full((36, 32), 128, np.uint8)
    planes[:24, :16], planes[:24, 16:] = 16, 235
    rgb = i420_frame(planes).to_ndarray(format="rgb24")
    back = rgb_to_i420(rgb)
    assert back[:24, :16].min() == back[:24, :16].max() == 16
    assert back[:24, 16:].min() == back[:24, 16:].max() == 235


def test_odd_sides_lose_their_last_row_and_column():
    planes = rgb_to_i420(_smooth_rgb(49, 65))
    frame = i420_frame(planes)
    assert (frame.width, frame.height, frame.format.name) == (64, 48, "yuv420p")
