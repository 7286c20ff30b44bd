import cv2
import numpy as np

from gpu.kernels.warp import crop_faces, paste_back


def _frame() -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)


def test_crop_faces_uses_one_matrix_per_face():
    frame = _frame()
    matrices = np.stack([
        np.array([[1, 0, -10], [0, 1, -20]], np.float32),
        np.array([[0.5, 0, 0], [0, 0.5, 0]], np.float32),
    ])
    crops = crop_faces([frame, frame], matrices, 64)
    assert crops.shape == (2, 64, 64, 3)
    np.testing.assert_array_equal(crops[0], frame[20:84, 10:74])
    np.testing.assert_array_equal(crops[1], cv2.warpAffine(frame, matrices[1], (64, 64), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE))


def test_paste_back_touches_only_the_masked_region():
    frame = _frame()
    original = frame.copy()
    matrix = np.array([[1, 0, -100], [0, 1, -50]], np.float32)  # crop = frame[50:114, 100:164]
    crop = np.full((64, 64, 3), 255, np.uint8)
    mask = np.zeros((64, 64), np.float32)
    mask[16:48, 16:48] = 1.0
    paste_back(frame, crop, mask, matrix)
    assert (frame[66:98, 116:148] == 255).all()  # fully masked: the crop's pixels
    outside = np.ones(frame.shape[:2], bool)
    outside[64:100, 114:150] = False  # the mask region plus interpolation margin
    np.testing.assert_array_equal(frame[outside], original[outside])


def test_paste_back_blends_by_the_mask_value():
    frame = np.zeros((64, 64, 3), np.uint8)
    crop = np.full((64, 64, 3), 200, np.uint8)
    mask = np.full((64, 64), 0.25, np.float32)
    paste_back(frame, crop, mask, np.array([[1, 0, 0], [0, 1, 0]], np.float32))
    assert abs(int(frame[32, 32, 0]) - 50) <= 1


def test_paste_back_with_an_empty_mask_is_a_no_op():
    frame = _frame()
    original = frame.copy()
    paste_back(frame, np.zeros((32, 32, 3), np.uint8), np.zeros((32, 32), np.float32), np.eye(2, 3, dtype=np.float32))
    np.testing.assert_array_equal(frame, original)
