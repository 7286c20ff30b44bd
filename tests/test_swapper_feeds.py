"""``gpu.swappers.base.stack_feeds``: the batch a runner gets from its jobs' rows."""

import numpy as np

from gpu.swappers.base import FaceJob, stack_feeds


def _job(seed: int) -> FaceJob:
    rng = np.random.default_rng(seed)
    return FaceJob(feeds={"target": rng.random((3, 8, 8), dtype=np.float32),
                          "albedo": rng.random((3, 4, 4), dtype=np.float32)}, matrix=np.eye(2, 3))


def test_one_jobs_batch_is_its_rows_without_a_copy() -> None:
    job = _job(0)
    batch = stack_feeds([job])
    for name, row in job.feeds.items():
        assert batch[name].shape == (1, *row.shape) and batch[name].flags.c_contiguous
        np.testing.assert_array_equal(batch[name][0], row)
        assert np.shares_memory(batch[name], row)


def test_a_non_contiguous_row_is_made_contiguous() -> None:
    job = _job(1)
    job.feeds["target"] = job.feeds["target"].transpose(0, 2, 1)
    batch = stack_feeds([job])
    assert batch["target"].flags.c_contiguous
    np.testing.assert_array_equal(batch["target"][0], job.feeds["target"])


def test_several_jobs_are_stacked_in_order() -> None:
    jobs = [_job(seed) for seed in range(3)]
    batch = stack_feeds(jobs)
    for name in ("target", "albedo"):
        np.testing.assert_array_equal(batch[name], np.stack([job.feeds[name] for job in jobs]))
        assert not any(np.shares_memory(batch[name], job.feeds[name]) for job in jobs)
