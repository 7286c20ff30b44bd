"""A value a video track reads every few frames: kept between readings and through a reading
that finds nothing, folded with each new one, forgotten when the track has not been seen."""

from __future__ import annotations

from gpu.tracking.readings import ReadingsPerTrack


def _halfway(known: float, reading: float) -> float:
    return (known + reading) / 2.0


def test_a_track_reads_every_few_frames_and_keeps_its_value_between():
    values = ReadingsPerTrack(every=3, fold=_halfway)
    assert values.known(7) is None  # nothing read yet: read now
    assert values.update(7, 4.0) == 4.0  # the first reading is the value
    assert [values.known(7), values.known(7)] == [4.0, 4.0]
    assert values.known(7) is None  # a reading is due
    assert values.update(7, 8.0) == 6.0  # folded in
    assert values.update(7, None) == 6.0  # nothing read: kept
    assert values.known(7) == 6.0  # ... and the count starts again


def test_a_still_takes_its_own_reading_every_time():
    values = ReadingsPerTrack(every=3, fold=_halfway)
    for still in (None, -1):
        assert values.known(still) is None
        assert values.update(still, 2.0) == 2.0 and values.update(still, None) is None


def test_the_least_recently_seen_track_is_forgotten():
    values = ReadingsPerTrack(every=3, fold=_halfway, max_tracks=2)
    values.update(1, 1.0)
    values.update(2, 2.0)
    values.known(1)  # seen again: now track 2 is the oldest
    values.update(3, 3.0)
    assert values.known(2) is None and values.update(2, None) is None
    assert values.known(1) == 1.0
