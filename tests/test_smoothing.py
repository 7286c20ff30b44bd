import numpy as np

from gpu.analysis.smoothing import OneEuroFilter


def test_still_noisy_points_are_steadied():
    rng = np.random.default_rng(0)
    truth = rng.uniform(0, 500, (468, 2)).astype(np.float32)
    smoother = OneEuroFilter()
    outputs = [smoother(truth + rng.normal(0, 1.0, truth.shape), t / 30) for t in range(120)]
    raw_error = 1.0 * np.sqrt(2)
    smoothed_error = np.sqrt(((np.stack(outputs[30:]) - truth) ** 2).sum(-1)).mean()
    assert smoothed_error < raw_error / 3


def test_fast_motion_is_followed_without_lag():
    smoother = OneEuroFilter()
    point = np.zeros((1, 2), np.float32)
    for t in range(60):  # 300 px/s sweep
        out = smoother(point + [10.0 * t, 0.0], t / 30)
    assert abs(out[0, 0] - 590.0) < 15.0  # well under one frame's worth of lag at that speed... x1.5


def test_first_sample_and_time_reset_pass_through():
    smoother = OneEuroFilter()
    first = np.array([[3.0, 4.0]], np.float32)
    np.testing.assert_array_equal(smoother(first, 1.0), first)
    np.testing.assert_array_equal(smoother(first + 10, 0.5), first + 10)  # time went back: restart
