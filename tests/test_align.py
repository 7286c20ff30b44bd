import cv2
import numpy as np
import pytest

from gpu.align import ARCFACE_TEMPLATE_112, arcface_template, estimate_similarity, invert_affine, transform_points


def test_similarity_recovers_a_known_transform():
    rng = np.random.default_rng(1)
    points = rng.uniform(0, 200, (5, 2)).astype(np.float32)
    truth = cv2.getRotationMatrix2D((50, 60), 17.0, 1.3).astype(np.float32)
    truth[:, 2] += (12, -7)
    estimated = estimate_similarity(points, transform_points(points, truth))
    np.testing.assert_allclose(estimated, truth, atol=1e-3)


def test_inverse_round_trip():
    matrix = cv2.getRotationMatrix2D((10, 10), 30, 0.7).astype(np.float32)
    points = np.array([[1, 2], [30, 40]], np.float32)
    np.testing.assert_allclose(transform_points(transform_points(points, matrix), invert_affine(matrix)), points, atol=1e-4)


def test_arcface_templates():
    np.testing.assert_allclose(arcface_template(112), ARCFACE_TEMPLATE_112)
    np.testing.assert_allclose(arcface_template(128), ARCFACE_TEMPLATE_112 + [8, 0])  # insightface's rule
    np.testing.assert_allclose(arcface_template(256), (ARCFACE_TEMPLATE_112 + [8, 0]) * 2)
    with pytest.raises(ValueError):
        arcface_template(100)
