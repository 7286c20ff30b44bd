"""Per-stream swapping: pass-through, face selection, live option changes, video tracking."""

import numpy as np
import pytest

from gpu.options import SwapOptions
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.samples import moving_face_frames


@pytest.fixture(scope="module")
def astronaut_source(engine, astronaut_image):
    return engine.register_source(astronaut_image)


def _face_boxes(engine, image):
    faces = sorted(engine.analyse_image(image), key=lambda f: f.box[0])  # left to right
    return [f.box.astype(int) for f in faces]


def _changed_in(before, after, box):
    x0, y0, x1, y1 = box
    return bool(np.any(before[y0:y1, x0:x1] != after[y0:y1, x0:x1]))


def test_a_frame_without_a_face_passes_through_unchanged(engine, astronaut_source):
    swapper = FrameSwapper(engine, astronaut_source)
    rng = np.random.default_rng(0)
    frame = rng.integers(0, 255, (360, 480, 3), dtype=np.uint8)
    original = frame.copy()
    times = swapper.process(frame, 0.0)
    assert times.faces_seen == 0 and times.faces_swapped == 0
    np.testing.assert_array_equal(frame, original)
    assert swapper.process_still(frame).faces_swapped == 0
    np.testing.assert_array_equal(frame, original)


def test_all_swaps_every_face_largest_only_the_largest(engine, astronaut_source, two_faces):
    boxes = _face_boxes(engine, two_faces)  # [astronaut (smaller), grace (larger)]
    everything = two_faces.copy()
    assert FrameSwapper(engine, astronaut_source).process_still(everything).faces_swapped == 2
    largest = two_faces.copy()
    assert FrameSwapper(engine, astronaut_source, SwapOptions(face_selection="largest")).process_still(largest).faces_swapped == 1
    assert not _changed_in(two_faces, largest, boxes[0])
    assert _changed_in(two_faces, largest, boxes[1])


def test_reference_swaps_only_the_matching_person(engine, astronaut_source, two_faces, astronaut_image, identity_of):
    boxes = _face_boxes(engine, two_faces)
    options = SwapOptions(face_selection="reference")
    frame = two_faces.copy()
    swapper = FrameSwapper(engine, astronaut_source, options, reference=identity_of(astronaut_image))
    assert swapper.process_still(frame).faces_swapped == 1
    assert _changed_in(two_faces, frame, boxes[0])  # the astronaut, who matches the reference
    assert not _changed_in(two_faces, frame, boxes[1])


def test_reference_without_an_identity_is_refused(engine, astronaut_source):
    with pytest.raises(ValueError, match="reference"):
        FrameSwapper(engine, astronaut_source, SwapOptions(face_selection="reference"))


def test_live_option_changes_take_effect(engine, astronaut_source, grace_image):
    swapper = FrameSwapper(engine, astronaut_source)
    frames = moving_face_frames(grace_image, 6, (480, 360))
    swapped = frames[0].copy()
    assert swapper.process(swapped, 0.0).faces_swapped == 1
    assert np.any(swapped != frames[0])
    swapper.enabled = False
    off = frames[1].copy()
    swapper.process(off, 1 / 30)
    np.testing.assert_array_equal(off, frames[1])
    swapper.enabled = True
    swapper.update(blend=0.0)
    zero = frames[2].copy()
    swapper.process(zero, 2 / 30)
    np.testing.assert_array_equal(zero, frames[2])


def test_video_frames_are_tracked_and_swapped_with_stage_times(engine, astronaut_source, grace_image):
    swapper = FrameSwapper(engine, astronaut_source)
    results = [swapper.process(frame, i / 30) for i, frame in enumerate(moving_face_frames(grace_image, 15, (640, 480)))]
    assert all(r.faces_swapped == 1 for r in results)
    assert all(r.track > 0 and r.prepare > 0 and r.run > 0 and r.paste > 0 for r in results)
    assert all(r.identity == 0 or r.identity < 1 for r in results)  # no identity work for "all"
    # the swap thread's own CPU per stage: some for each, never more than the stage's wall time
    # (a lone stream's rows run on its own thread, not the batcher's)
    for r in results:
        assert {"track", "identity", "prepare", "run", "paste"} <= set(r.cpu_ms)
        assert r.cpu_ms["prepare"] > 0 and r.cpu_ms["run"] > 0
        assert all(r.cpu_ms[stage] <= getattr(r, stage) + 1.0 for stage in ("track", "prepare", "run", "paste"))


def test_frames_overlapped_at_a_shared_batcher_come_out_as_one_at_a_time(engine, astronaut_source, grace_image):
    """While another stream shares the batcher, a stream begins its next frame while the last
    one's faces run; the frames come out as swapping them one at a time makes them."""
    frames = moving_face_frames(grace_image, 8, (480, 360))
    one_at_a_time = [frame.copy() for frame in frames]
    alone = FrameSwapper(engine, astronaut_source)
    assert not alone.overlaps()  # a lone stream: its rows run inline
    for index, frame in enumerate(one_at_a_time):
        alone.process(frame, index / 30)
    alone.close()
    engine.batcher.attach("another-stream")
    try:
        swapper = FrameSwapper(engine, astronaut_source)
        assert not swapper.overlaps()  # a CPU node's batcher does not wait for company: rows run at once, inline
        overlapped = [frame.copy() for frame in frames]
        flights = [swapper.begin(overlapped[0], 0.0, overlap=True)]
        for index in range(1, len(frames)):
            flights.append(swapper.begin(overlapped[index], index / 30, overlap=True))  # the last one still queued
            assert flights[-2].rows is not None and swapper.complete(flights[-2]).faces_swapped == 1
        assert swapper.complete(flights[-1]).faces_swapped == 1
        swapper.close()
    finally:
        engine.batcher.detach("another-stream")
    for expected, got in zip(one_at_a_time, overlapped, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_streams_overlap_only_at_a_shared_batcher_that_waits_for_company(engine, astronaut_source, monkeypatch):
    from gpu.batcher import MicroBatcher

    waiting = MicroBatcher(engine.swapper.runner, wait_for_company=True, name="gpu-like")
    monkeypatch.setattr(type(engine), "batcher", property(lambda self: waiting))
    try:
        swapper = FrameSwapper(engine, astronaut_source)
        assert not swapper.overlaps()  # alone
        waiting.attach("another-stream")
        assert swapper.overlaps()
        swapper.close()
    finally:
        waiting.close()


def test_file_stages_make_the_frames_process_makes(engine, astronaut_source, grace_image):
    """The three steps a file's frames take on threads of their own (track, prepare, run and
    paste) swap exactly as ``process`` does, frame by frame, with every stateful step
    (tracker, smoothing, per-track shape and occlusion models) fed in order."""
    from streamer.pipeline.stage_threads import run_stages

    frames = moving_face_frames(grace_image, 10, (480, 360))
    one_by_one = [frame.copy() for frame in frames]
    serial = FrameSwapper(engine, astronaut_source, offline=True)
    for number, frame in enumerate(one_by_one):
        serial.process(frame, number / 30)
    staged = FrameSwapper(engine, astronaut_source, offline=True)
    steps = staged.file_stages()
    stages = [lambda item, step=step: (step(item[0], item[1]), item[1]) for step in steps]
    out: list[np.ndarray] = []
    run_stages(((frame.copy(), number / 30) for number, frame in enumerate(frames)), stages, lambda item: out.append(item[0]))
    assert len(out) == len(frames)
    assert sum(bool(np.any(a != b)) for a, b in zip(out, frames, strict=True)) == len(frames)  # every frame swapped
    for expected, got in zip(one_by_one, out, strict=True):
        np.testing.assert_array_equal(got, expected)


def test_a_files_frames_wait_for_a_busy_batcher_rather_than_go_unswapped(engine, astronaut_source, grace_image, monkeypatch):
    """A file's rows queued ahead at a batcher that waits for company (a GPU node's) can fill
    the session's allowance: the next frame's rows then run when there is room again, in
    the last step, instead of the frame going out unswapped as a live frame would."""
    import time

    from gpu.batcher import MicroBatcher
    from streamer.pipeline.stage_threads import run_stages

    frames = moving_face_frames(grace_image, 8, (480, 360))
    serial = [frame.copy() for frame in frames]
    one_by_one = FrameSwapper(engine, astronaut_source, offline=True)
    for number, frame in enumerate(serial):
        one_by_one.process(frame, number / 30)
    class SlowRunner:  # the engine's runner, slower than a frame's prepare: rows of two frames overlap
        def run(self, feeds):
            time.sleep(0.05)
            return engine.swapper.runner.run(feeds)

    strict = MicroBatcher(SlowRunner(), max_pending_per_session=1, wait_for_company=True, name="strict")
    monkeypatch.setattr(engine, "_batcher", strict)
    try:
        staged = FrameSwapper(engine, astronaut_source, offline=True)
        steps = staged.file_stages()
        stages = [lambda item, step=step: (step(item[0], item[1]), item[1]) for step in steps]
        out: list[np.ndarray] = []
        run_stages(((f.copy(), n / 30) for n, f in enumerate(frames)), stages, lambda item: out.append(item[0]))
        refused = strict.metrics()["rejected_rows"]
    finally:
        strict.close()
    assert refused > 0  # the allowance was full at times: those frames' rows ran later
    assert staged.frames_dropped_by_batcher == 0
    for expected, got in zip(serial, out, strict=True):
        np.testing.assert_array_equal(got, expected)
