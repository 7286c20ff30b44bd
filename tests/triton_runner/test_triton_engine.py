"""A node's face engine on ``runner: triton``: a stream swaps through the server, keeps
delivering (unswapped, counted) frames while Triton is down, and swaps again once it is
back; the model server's numbers reach the engine's statistics for /metrics."""

from __future__ import annotations

import pytest

from streamer.metrics import _model_server_metrics
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.samples import moving_face_frames


@pytest.mark.slow
def test_stream_goes_on_unswapped_while_triton_is_down_and_swaps_after_restart(
        triton_engine, triton_server, astronaut_image, grace_image) -> None:
    engine = triton_engine
    assert engine.swapper.runner.choice.runner == "triton"
    assert [spec.name for spec in engine.swapper.runner.inputs][0] == "target"
    swapper = FrameSwapper(engine, engine.register_source(astronaut_image), batch_timeout_s=10)
    frames = iter(moving_face_frames(grace_image, 12, (640, 480)))
    clock = iter(i / 30 for i in range(100))

    def next_frame():
        frame = next(frames)
        before = frame.copy()
        return frame, before, swapper.process(frame, next(clock))

    for _ in range(3):
        frame, before, times = next_frame()
        assert times.faces_swapped == 1 and (frame != before).any()
    assert engine.runner_health()[0]
    triton_server.kill()
    for _ in range(3):
        frame, before, times = next_frame()
        assert times.faces_seen == 1 and times.faces_swapped == 0 and times.dropped_by_batcher == 1
        assert (frame == before).all()  # delivered as it came
    assert swapper.frames_dropped_by_batcher == 3
    ready, why = engine.runner_health()
    assert not ready and "unreachable" in why
    triton_server.start()
    for _ in range(3):
        frame, before, times = next_frame()
        assert times.faces_swapped == 1 and (frame != before).any()
    numbers = engine.runner_statistics()
    assert numbers["model"] == "mesh3d_swap" and numbers["requests"] >= 3 and numbers["batch_sizes"]
    names = {metric.name for metric in _model_server_metrics(numbers)}
    assert {"swapcast_model_server_requests", "swapcast_model_server_batch_size",
            "swapcast_model_server_queue_seconds"} <= names
