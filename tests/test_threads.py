"""The node's thread budget (``gpu.threads``): sized from the core count, applied once, and
read by ONNX Runtime sessions, OpenCV, the live codecs and PyAV's frame converters; the
OS threads carry their Python names so per-thread CPU is readable."""

from __future__ import annotations

import fractions
import threading
from pathlib import Path

import av
import cv2
import numpy as np
import pytest
from aiortc.rtcrtpparameters import RTCRtpCodecParameters

from gpu import threads
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.swappers.mesh_graph import build_mesh_swap_graph
from gpu.threads import ThreadBudget
from streamer.media.hwcodecs import bounded_threads, scale_threads
from streamer.webrtc.encoders import RealtimeH264Encoder, RealtimeVp8Encoder, bounded_decoder
from swapcast.benchmarks.webrtc import _verdicts, thread_group
from swapcast.config import load_config


@pytest.fixture
def budget():
    """Apply a budget for one test; the process's budget and OpenCV's pool come back after."""
    before, opencv = threads.current(), cv2.getNumThreads()

    def use(chosen: ThreadBudget) -> ThreadBudget:
        threads.apply(chosen)
        return chosen

    yield use
    threads.apply(before)
    cv2.setNumThreads(opencv)


def _session_options(runner: OnnxRuntimeRunner):
    return runner._session.get_session_options()


def test_auto_budget_is_one_thread_per_call_on_small_machines_and_grows_with_cores():
    for cpus in (1, 2, 8, 15):
        small = ThreadBudget.auto(cpus)
        assert (small.runner_threads, small.opencv_threads, small.codec_threads, small.torch_threads) == (1, 1, 1, 1)
        assert not small.runner_spinning
    assert ThreadBudget.auto(16).runner_threads == 2
    assert ThreadBudget.auto(128).runner_threads == 4  # capped
    assert ThreadBudget.auto(128).codec_threads == 1


def test_legacy_profile_is_the_libraries_defaults():
    legacy = ThreadBudget.legacy(2)
    assert (legacy.runner_threads, legacy.runner_spinning) == (2, True)
    assert (legacy.opencv_threads, legacy.codec_threads, legacy.torch_threads) == (0, 0, 0)
    assert ThreadBudget.legacy(64).runner_threads == 4


def test_config_builds_the_budget_with_explicit_sizes_over_the_profile():
    assert load_config(environ={}).threads.budget() == ThreadBudget.auto()
    config = load_config(environ={"SWAPCAST_THREADS__PROFILE": "legacy", "SWAPCAST_THREADS__OPENCV": "3",
                                  "SWAPCAST_ENGINE__RUNNER_THREADS": "2"})
    chosen = config.threads.budget(config.engine.runner_threads)
    assert (chosen.profile, chosen.opencv_threads, chosen.runner_threads, chosen.runner_spinning) == ("legacy", 3, 2, True)
    with pytest.raises(ValueError, match="thread profile"):
        ThreadBudget.of("fast")  # type: ignore[arg-type]


def test_onnxruntime_sessions_follow_the_budget(budget):
    budget(ThreadBudget.auto(2))
    options = _session_options(OnnxRuntimeRunner(build_mesh_swap_graph()))
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (1, 1)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert options.get_session_config_entry("session.inter_op.allow_spinning") == "0"

    budget(ThreadBudget.legacy(2))
    options = _session_options(OnnxRuntimeRunner(build_mesh_swap_graph()))
    assert options.intra_op_num_threads == 2
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "1"


def test_an_explicit_runner_thread_count_wins_over_the_budget(budget):
    budget(ThreadBudget.auto(2))
    options = _session_options(OnnxRuntimeRunner(build_mesh_swap_graph(), threads=3))
    assert options.intra_op_num_threads == 3
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_apply_sizes_opencvs_pool(budget):
    budget(ThreadBudget.of("budget", opencv_threads=3))
    assert cv2.getNumThreads() == 3
    budget(ThreadBudget.auto(2))
    assert cv2.getNumThreads() == 1


def _h264_params() -> RTCRtpCodecParameters:
    return RTCRtpCodecParameters(mimeType="video/H264", clockRate=90000, payloadType=102)


def test_codec_contexts_take_the_budgets_threads(budget):
    budget(ThreadBudget.auto(2))
    assert bounded_threads(av.CodecContext.create("h264", "r")).thread_count == 1
    assert bounded_decoder(_h264_params()).codec.thread_count == 1
    frame = av.VideoFrame.from_ndarray(np.zeros((240 * 3 // 2, 320), np.uint8), format="yuv420p")
    frame.pts, frame.time_base = 0, fractions.Fraction(1, 90000)
    encoder = RealtimeH264Encoder()
    encoder.encode(frame)
    assert encoder.codec.thread_count == 1
    vp8 = RealtimeVp8Encoder()
    vp8.encode(frame)
    assert vp8.codec.thread_count == 1
    assert scale_threads() == 1

    budget(ThreadBudget.legacy(2))  # FFmpeg's own choice (0 = auto) is left alone
    assert bounded_decoder(_h264_params()).codec.thread_count == 0
    assert scale_threads() == 0


def test_os_threads_carry_their_python_names(budget):
    budget(ThreadBudget.auto(2))
    seen: dict[str, str] = {}

    def record() -> None:
        comm = Path(f"/proc/self/task/{threading.get_native_id()}/comm").read_text().strip()
        seen[threading.current_thread().name] = comm

    for name in ("swap-abcdef_0", "Thread-7 (decoder_worker)", "a-thread-name-longer-than-15"):
        thread = threading.Thread(target=record, name=name)
        thread.start()
        thread.join()
    assert seen == {"swap-abcdef_0": "swap-abcdef_0", "Thread-7 (decoder_worker)": "decoder_worker",
                    "a-thread-name-longer-than-15": "a-thread-name-l"}


def test_bench_groups_node_threads_by_stage():
    assert thread_group("swap-FEOHQB6s_0") == thread_group("swap-x") == "swap (track, prepare, run, paste)"
    assert thread_group("video-decoder") == "decode (aiortc)"
    assert thread_group("mediapipe/1024") == "tracking graphs (mediapipe)"
    assert thread_group("uvloop_0") == "encode (aiortc executor)"
    assert thread_group("batcher-mesh-lo") == "batcher"
    assert thread_group("python") == "unnamed native threads"
    assert thread_group("face-library_0") == "other (face-library_0)"


def _phase(sessions: int, fps: float, cpu_ms_per_frame: float) -> dict:
    return {"sessions": sessions, "fps_out_per_session": fps, "fps_out_min": fps, "server_latency_p50_ms": 20.0,
            "rtt_p50_ms": 90.0, "rtt_p99_first_half_ms": 100.0, "rtt_p99_second_half_ms": 110.0,
            "server_frames_dropped": 0, "server_cpu_ms_per_frame_out": cpu_ms_per_frame,
            "server_cpu_cores": cpu_ms_per_frame * fps / 1000, "other_cpu_cores": 0.0}


def test_bench_judges_cpu_per_session_at_30_fps_and_every_sessions_fps():
    def verdict(phases: list[dict], topic: str) -> str:
        return next(line for line in _verdicts({"resolution": "640x480", "phases": phases}) if topic in line)

    assert verdict([_phase(1, 30.0, 18.0)], "core per").endswith("PASS")  # 0.54 core
    assert verdict([_phase(1, 30.0, 24.0)], "core per").endswith("FAIL")  # 0.72 core: over the 0.6 target
    assert verdict([_phase(1, 15.0, 30.0)], "core per").endswith("FAIL")  # 0.45 core now, 0.9 at 30 fps
    assert verdict([_phase(1, 30.0, 24.0), _phase(2, 26.0, 24.0)], "each >=").endswith("PASS")
    assert verdict([_phase(1, 30.0, 24.0), _phase(2, 16.4, 24.0)], "each >=").endswith("FAIL")
    assert verdict([_phase(1, 30.0, 18.0), _phase(3, 24.5, 18.0)], "3 sessions each").endswith("PASS")
    assert verdict([_phase(1, 30.0, 18.0), _phase(3, 17.6, 18.0)], "3 sessions each").endswith("FAIL")
