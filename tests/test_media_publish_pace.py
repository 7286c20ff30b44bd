"""``streamer.media.publish_pace``: a live publisher sends in real time, give or take a burst."""

import itertools

import pytest

from streamer.media.publish_pace import PublishingTooFast, PublishPace


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _publish(pace: PublishPace, clock: Clock, seconds: float, fps: float, speed: float = 1.0, start_dts: int = 0) -> int:
    """Samples at ``fps`` of media time, sent ``speed`` times faster than real time; the last dts."""
    dts = start_dts
    for index in range(int(seconds * fps)):
        dts = start_dts + round(index * 1000 / fps)
        clock.now += 1.0 / fps / speed
        pace.count(dts)
    return dts


def test_real_time_with_a_start_up_burst_is_fine():
    clock = Clock()
    pace = PublishPace(clock=clock)
    dts = _publish(pace, clock, 5.0, 30, speed=50.0)  # OBS's few seconds encoded while it connected, at once
    _publish(pace, clock, 120.0, 60, start_dts=dts + 17)  # then two minutes at 60 fps


def test_a_file_pushed_as_fast_as_it_reads_is_refused_saying_how_to_pace_it():
    clock = Clock()
    pace = PublishPace(clock=clock)
    with pytest.raises(PublishingTooFast, match=r"faster than real time.*-re before -i"):
        _publish(pace, clock, 60.0, 30, speed=8.0)
    assert clock.now < 3.0  # told within a few seconds: 20 s of video came in 2.5 s


def test_a_flood_with_timestamps_that_barely_move_is_refused_by_its_picture_rate():
    clock = Clock()
    pace = PublishPace(clock=clock)
    with pytest.raises(PublishingTooFast, match=r"pictures in 10 s.*faster than real time.*-re before -i"):
        for dts in itertools.count():
            clock.now += 0.001  # a thousand pictures a second, a millisecond of media apart
            pace.count(dts)
    assert len(pace._samples) <= 2401  # what it remembers stays bounded however long the flood


def test_a_jump_in_the_timestamps_is_not_taken_for_speed():
    clock = Clock()
    pace = PublishPace(clock=clock)
    dts = _publish(pace, clock, 3.0, 30)
    _publish(pace, clock, 30.0, 30, start_dts=dts + 3_600_000)  # an hour later by the encoder's clock


def test_a_new_publish_starts_afresh():
    clock = Clock()
    pace = PublishPace(clock=clock)
    _publish(pace, clock, 19.0, 30, speed=1.9)  # a publish that ran ahead, within the bound
    pace.restart()
    _publish(pace, clock, 5.0, 30, speed=50.0)  # the next one's start-up burst: over the bound had it counted on
