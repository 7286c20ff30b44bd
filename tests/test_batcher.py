"""The node's micro-batcher: rows from concurrent sessions share runner calls, each caller
gets exactly its own rows back, lone rows wait only max_queue_delay_ms, batches are filled
round-robin across sessions, busy sessions are refused, close() leaves nothing behind."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from gpu.batcher import BatcherBusy, BatcherClosed, MicroBatcher
from gpu.runners.onnxruntime import OnnxRuntimeRunner
from gpu.swappers.base import FaceJob, run_jobs
from gpu.swappers.mesh_graph import build_mesh_swap_graph
from streamer.pipeline.frame_swapper import FrameSwapper
from streamer.samples import moving_face_frames

SIZE = 32


@pytest.fixture(scope="module")
def mesh_runner():
    return OnnxRuntimeRunner(build_mesh_swap_graph(), threads=1)


class RecordingRunner:
    """Wraps a runner: records every call's batch size and the rows' tags (the ``blend``
    value), and can hold calls at a gate so rows pile up behind a running batch."""

    def __init__(self, runner, gated: bool = False) -> None:
        self.inner = runner
        self.name, self.inputs, self.outputs = "recording", runner.inputs, runner.outputs
        self.calls: list[list[float]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        if not gated:
            self.gate.set()
        self.fail_next = False

    def run(self, feeds):
        self.calls.append([round(float(v), 3) for v in feeds["blend"].reshape(-1)])
        self.entered.set()
        assert self.gate.wait(30), "test gate never opened"
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("runner exploded")
        return self.inner.run(feeds)


def make_job(seed: int, tag: float = 1.0) -> FaceJob:
    """One row with its own target, source texture, grid and mask; ``tag`` rides in blend."""
    rng = np.random.default_rng(seed)
    feeds = {
        "target": rng.random((3, SIZE, SIZE), dtype=np.float32),
        "source": rng.random((3, SIZE, SIZE), dtype=np.float32),
        "grid": rng.uniform(-1, 1, (SIZE, SIZE, 2)).astype(np.float32),
        "mask": rng.random((1, SIZE, SIZE), dtype=np.float32),
        "blend": np.full((1, 1, 1), tag, np.float32),
        "colour": np.full((1, 1, 1), float(seed % 2), np.float32),
    }
    return FaceJob(feeds=feeds, matrix=np.eye(2, 3, dtype=np.float32))


def batcher_threads(batcher: MicroBatcher) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(batcher.name + "-")]


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.002)


def test_concurrent_sessions_share_runner_calls_and_get_their_own_rows(mesh_runner):
    runner = RecordingRunner(mesh_runner)
    sessions = 12
    jobs = {i: [make_job(100 + 2 * i, tag=0.5), make_job(101 + 2 * i, tag=0.5)] if i % 3 == 0 else [make_job(100 + 2 * i, tag=0.5)]
            for i in range(sessions)}
    expected = {i: run_jobs(mesh_runner, jobs[i]) for i in range(sessions)}
    rows = sum(len(j) for j in jobs.values())
    # a generous delay, so that a loaded CI box still gathers the threads' rows
    with MicroBatcher(runner, max_batch=8, max_queue_delay_ms=50.0, name="t-share") as batcher:
        start = threading.Barrier(sessions)
        results: dict[int, list] = {}

        def session(i: int) -> None:
            start.wait()
            results[i] = batcher.run(f"session-{i}", jobs[i], timeout=30)

        threads = [threading.Thread(target=session, args=(i,)) for i in range(sessions)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        metrics = batcher.metrics()
    assert sorted(results) == list(range(sessions))
    assert sum(len(call) for call in runner.calls) == rows
    assert len(runner.calls) < rows and max(len(call) for call in runner.calls) > 1
    assert all(len(call) <= 8 for call in runner.calls)
    for i in range(sessions):  # per-row results equal unbatched run_jobs, each with its own source
        assert len(results[i]) == len(jobs[i])
        for got, want in zip(results[i], expected[i], strict=True):
            np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    assert metrics["rows"] == rows and metrics["batches"] == len(runner.calls)
    assert sum(metrics["batch_size_histogram"].values()) == len(runner.calls)
    assert metrics["mean_batch_size"] > 1 and metrics["rows_per_s"] > 0
    assert 0 < metrics["device_busy_pct"] <= 100
    assert metrics["queue_delay_p99_ms"] >= metrics["queue_delay_p50_ms"] >= 0


def test_a_lone_row_ships_after_the_queue_delay_without_waiting_for_a_full_batch(mesh_runner):
    runner = RecordingRunner(mesh_runner)
    with MicroBatcher(runner, max_batch=32, max_queue_delay_ms=4.0, name="t-lone") as batcher:
        batcher.run("warm-up", [make_job(1)])
        started = time.perf_counter()
        batcher.run("alone", [make_job(2)], timeout=10)
        elapsed_ms = (time.perf_counter() - started) * 1000
        metrics = batcher.metrics()
    assert [len(call) for call in runner.calls] == [1, 1]
    assert elapsed_ms < 200  # ~4 ms + one small runner call; generous for a loaded CI box
    assert 3.9 <= metrics["queue_delay_p50_ms"] < 200  # it did wait the delay for company


def test_a_lone_attached_session_runs_inline_and_a_second_one_brings_batching_back(mesh_runner):
    runner = RecordingRunner(mesh_runner)
    threads_seen: list[str] = []
    original = runner.run
    runner.run = lambda feeds: (threads_seen.append(threading.current_thread().name), original(feeds))[1]
    with MicroBatcher(runner, max_batch=8, max_queue_delay_ms=4.0, name="t-solo") as batcher:
        batcher.attach("only")
        batcher.run("only", [make_job(1)])
        assert threads_seen == [threading.current_thread().name]  # no hop, no queue delay
        assert batcher.metrics()["inline_batches"] == 1
        batcher.attach("second")
        batcher.run("only", [make_job(2)])
        assert threads_seen[-1].startswith("t-solo-run")
        batcher.detach("second")
        batcher.run("only", [make_job(3)])
        assert batcher.metrics()["inline_batches"] == 2 and batcher.metrics()["batches"] == 3


def test_a_full_batch_ships_at_once(mesh_runner):
    runner = RecordingRunner(mesh_runner)
    with MicroBatcher(runner, max_batch=4, max_queue_delay_ms=10_000.0, name="t-full") as batcher:
        started = time.perf_counter()
        rows = batcher.run("four-faces", [make_job(i) for i in range(4)], timeout=30)
        assert time.perf_counter() - started < 5.0  # far less than the 10 s delay
    assert len(rows) == 4 and [len(call) for call in runner.calls] == [4]


def test_a_batch_ships_at_once_when_every_attached_session_has_rows_queued(mesh_runner):
    runner = RecordingRunner(mesh_runner)
    with MicroBatcher(runner, max_batch=8, max_queue_delay_ms=10_000.0, name="t-all-in") as batcher:
        batcher.attach("a")
        batcher.attach("b")
        first = batcher.submit("a", [make_job(1, tag=0.1)])
        time.sleep(0.3)
        assert not runner.calls and not first.done()  # b may still send rows: a waits for it
        started = time.perf_counter()
        second = batcher.submit("b", [make_job(2, tag=0.2)])
        assert len(second.result(30)) == 1 and len(first.result(30)) == 1
        assert time.perf_counter() - started < 5.0  # far less than the 10 s delay
    assert runner.calls == [[0.1, 0.2]]  # one batch, both sessions' rows


def test_without_waiting_for_company_rows_run_inline_on_free_slots_and_queue_only_when_all_are_busy(mesh_runner):
    runner = RecordingRunner(mesh_runner, gated=True)
    threads_seen: list[str] = []
    original = runner.run
    runner.run = lambda feeds: (threads_seen.append(threading.current_thread().name), original(feeds))[1]
    with MicroBatcher(runner, max_batch=8, max_queue_delay_ms=10_000.0, max_in_flight=2, wait_for_company=False,
                      name="t-free") as batcher:
        for session in ("a", "b", "c"):
            batcher.attach(session)
        results: dict[str, list] = {}
        callers = [threading.Thread(target=lambda s=s: results.setdefault(s, batcher.run(s, [make_job(1)], timeout=30)),
                                    name=f"caller-{s}") for s in ("a", "b")]
        for caller in callers:
            caller.start()
        wait_until(lambda: len(threads_seen) == 2)  # both run at once, each on its own thread
        assert sorted(threads_seen) == ["caller-a", "caller-b"]
        third = batcher.submit("c", [make_job(2, tag=0.5)])  # both slots busy: it queues
        time.sleep(0.2)
        assert not third.done() and len(runner.calls) == 2
        started = time.perf_counter()
        runner.gate.set()
        assert len(third.result(30)) == 1 and time.perf_counter() - started < 5.0  # shipped when a slot freed, not after 10 s
        for caller in callers:
            caller.join(30)
        assert sorted(results) == ["a", "b"] and batcher.metrics()["inline_batches"] == 2


def test_batches_are_filled_round_robin_across_sessions(mesh_runner):
    """A greedy session (many faces) queued first cannot crowd out a light one."""
    runner = RecordingRunner(mesh_runner, gated=True)
    with MicroBatcher(runner, max_batch=4, max_queue_delay_ms=0.0, max_pending_per_session=64, name="t-fair") as batcher:
        first = batcher.submit("greedy", [make_job(0, tag=1.0)])
        assert runner.entered.wait(10)  # the first batch is running and holds the runner
        greedy = [batcher.submit("greedy", [make_job(10 + i, tag=1.0) for i in range(4)]) for i in range(4)]
        other = batcher.submit("other", [make_job(50 + i, tag=0.75) for i in range(6)])
        light = batcher.submit("light", [make_job(99, tag=0.5)])
        wait_until(lambda: batcher.metrics()["queued_rows"] == 16 + 6 + 1)
        runner.gate.set()
        for future in (first, *greedy, other, light):
            future.result(30)
    calls = runner.calls[1:]
    assert [len(call) for call in calls] == [4] * 5 + [3]
    assert 0.5 in calls[0]  # the light session's only row is in the first batch after the wait
    # one row per session per turn: greedy, other, light, then greedy's second turn
    assert calls[0] == [1.0, 0.75, 0.5, 1.0]
    # the turn order carries over: the two sessions left alternate (greedy does not get 4)
    assert calls[1] == [0.75, 1.0, 0.75, 1.0]


def test_a_session_past_its_pending_limit_is_refused_at_once(mesh_runner):
    runner = RecordingRunner(mesh_runner, gated=True)
    with MicroBatcher(runner, max_batch=32, max_queue_delay_ms=0.0, max_pending_per_session=4, name="t-busy") as batcher:
        running = batcher.submit("cam", [make_job(1), make_job(2), make_job(3)])
        assert runner.entered.wait(10)
        queued = batcher.submit("cam", [make_job(4)])  # 4 outstanding: at the limit, admitted
        started = time.perf_counter()
        with pytest.raises(BatcherBusy, match="cam"):
            batcher.submit("cam", [make_job(5)])
        with pytest.raises(BatcherBusy):
            batcher.run("cam", [make_job(6)], timeout=10)
        assert time.perf_counter() - started < 1.0  # refused immediately, not after a wait
        assert batcher.pending("cam") == 4
        other = batcher.submit("other-session", [make_job(7)])  # other sessions are unaffected
        assert batcher.metrics()["rejected_rows"] == 2
        runner.gate.set()
        for future in (running, queued, other):
            future.result(30)
        assert batcher.pending("cam") == 0
        assert len(batcher.run("cam", [make_job(8)], timeout=10)) == 1  # drained: admitted again


def test_a_request_larger_than_the_limit_is_admitted_when_nothing_is_outstanding(mesh_runner):
    with MicroBatcher(mesh_runner, max_batch=8, max_queue_delay_ms=1.0, max_pending_per_session=2, name="t-large") as batcher:
        assert len(batcher.run("crowd", [make_job(i) for i in range(5)], timeout=30)) == 5


def test_a_timed_out_request_is_withdrawn(mesh_runner):
    runner = RecordingRunner(mesh_runner, gated=True)
    with MicroBatcher(runner, max_batch=4, max_queue_delay_ms=0.0, max_pending_per_session=2, name="t-timeout") as batcher:
        blocker = batcher.submit("a", [make_job(1)])
        assert runner.entered.wait(10)
        with pytest.raises(TimeoutError):
            batcher.run("b", [make_job(2), make_job(3)], timeout=0.05)
        assert batcher.pending("b") == 0 and batcher.metrics()["queued_rows"] == 0
        runner.gate.set()
        blocker.result(30)
        assert len(batcher.run("b", [make_job(4), make_job(5)], timeout=30)) == 2
    assert [len(call) for call in runner.calls] == [1, 2]  # the withdrawn rows never ran


def test_a_runner_error_reaches_every_caller_of_that_batch_and_the_batcher_goes_on(mesh_runner):
    runner = RecordingRunner(mesh_runner)
    runner.fail_next = True
    with MicroBatcher(runner, max_batch=4, max_queue_delay_ms=0.0, name="t-error") as batcher:
        with pytest.raises(RuntimeError, match="exploded"):
            batcher.run("a", [make_job(1)], timeout=10)
        assert batcher.pending("a") == 0
        assert len(batcher.run("a", [make_job(2)], timeout=10)) == 1
        assert batcher.metrics()["rows_failed"] == 1


def test_close_fails_pending_rows_and_leaves_no_thread(mesh_runner):
    runner = RecordingRunner(mesh_runner, gated=True)
    batcher = MicroBatcher(runner, max_batch=2, max_queue_delay_ms=0.0, name="t-close")
    running = batcher.submit("a", [make_job(1), make_job(2)])
    assert runner.entered.wait(10)
    queued = [batcher.submit("b", [make_job(3)]), batcher.submit("c", [make_job(4), make_job(5)])]
    assert batcher_threads(batcher)
    closer = threading.Thread(target=batcher.close)
    closer.start()
    for future in queued:  # failed at once, while the running batch still holds the runner
        with pytest.raises(BatcherClosed, match="closed before these rows ran"):
            future.result(10)
    runner.gate.set()
    closer.join(10)
    assert not closer.is_alive()
    assert len(running.result(10)) == 2  # the batch already running finished normally
    wait_until(lambda: not batcher_threads(batcher), timeout=5)
    with pytest.raises(BatcherClosed):
        batcher.submit("a", [make_job(6)])
    batcher.close()  # idempotent



def test_close_does_not_hang_on_a_stuck_batch(mesh_runner, caplog):
    """A runner stuck in a call (native code that never returns) must not hang the
    caller's shutdown: close gives it the timeout, logs it and returns."""
    runner = RecordingRunner(mesh_runner, gated=True)
    batcher = MicroBatcher(runner, max_batch=2, max_queue_delay_ms=0.0, name="t-stuck")
    running = batcher.submit("a", [make_job(1)])
    assert runner.entered.wait(10)
    closer = threading.Thread(target=batcher.close, kwargs={"timeout": 0.2})
    with caplog.at_level("WARNING", logger="gpu.batcher"):
        closer.start()
        closer.join(10)
        assert not closer.is_alive(), "close waited on the stuck batch"
    assert "t-stuck: 1 batch(es) still running" in caplog.text
    assert not running.done()
    runner.gate.set()  # the stuck call ends: its rows still reach their caller
    assert len(running.result(10)) == 1
    wait_until(lambda: not batcher_threads(batcher), timeout=5)

# -- through the engine and the frame swapper ----------------------------------------------------


@pytest.fixture(scope="module")
def astronaut_source(engine, astronaut_image):
    return engine.register_source(astronaut_image)


def test_frame_swappers_of_several_sessions_swap_through_the_engine_batcher(engine, astronaut_source, astronaut_image, grace_image, identity_of):
    batcher = engine.batcher
    assert batcher.max_batch == engine.settings.max_batch
    assert batcher.max_queue_delay_ms == engine.settings.max_queue_delay_ms
    before = batcher.metrics()
    clip = moving_face_frames(grace_image, 4, (480, 360))
    outputs: dict[int, list[np.ndarray]] = {}
    swappers = [FrameSwapper(engine, astronaut_source, session_id=f"test-session-{i}") for i in range(3)]

    def session(i: int) -> None:
        frames = [frame.copy() for frame in clip]
        for index, frame in enumerate(frames):
            assert swappers[i].process(frame, index / 30).faces_swapped == 1
        outputs[i] = frames

    threads = [threading.Thread(target=session, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    after = batcher.metrics()
    for swapper in swappers:
        swapper.close()
    assert sorted(outputs) == [0, 1, 2]
    assert after["rows"] - before["rows"] == 3 * len(clip)
    assert after["batches"] - before["batches"] <= 3 * len(clip)
    # identity rule on a swapped sample face: closer to the source than to the target
    still = grace_image.copy()
    solo = FrameSwapper(engine, astronaut_source, session_id="still")
    inline_before = batcher.metrics()["inline_batches"]
    assert solo.process_still(still).faces_swapped == 1
    assert batcher.metrics()["inline_batches"] == inline_before + 1  # a lone session runs inline
    solo.close()
    out = identity_of(still)
    d_source = float(np.linalg.norm(out - identity_of(astronaut_image)))
    d_target = float(np.linalg.norm(out - identity_of(grace_image)))
    assert d_source < 0.6 and d_source < d_target


def test_a_frame_refused_by_the_batcher_goes_on_unswapped_and_is_counted(engine, astronaut_source, grace_image, monkeypatch):
    swapper = FrameSwapper(engine, astronaut_source, session_id="refused")

    def busy(session_id, jobs, timeout=None):
        raise BatcherBusy(f"session {session_id} busy")

    monkeypatch.setattr(engine.batcher, "run", busy)
    frame = grace_image.copy()
    times = swapper.process_still(frame)
    assert times.dropped_by_batcher == 1 and times.faces_swapped == 0 and times.faces_seen == 1
    np.testing.assert_array_equal(frame, grace_image)
    assert swapper.frames_dropped_by_batcher == 1
    swapper.close()


# -- the benchmark ---------------------------------------------------------------------------------


def test_bench_engine_sessions_compares_batched_with_unbatched(capsys):
    import json

    from swapcast.cli import main

    code = main(["bench", "engine", "--sessions", "2", "--device", "cpu", "--seconds", "0.5", "--max-sessions", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    for needle in ("batched", "unbatched", "batched / unbatched faces/s: x", "largest number of 1280x720@30"):
        assert needle in out, f"{needle!r} missing from the bench output:\n{out}"
    report = json.loads(out.strip().splitlines()[-1])
    throughput = report["throughput"]
    assert throughput["batched"]["faces_per_s"] > 0 and throughput["unbatched"]["faces_per_s"] > 0
    assert throughput["unbatched"]["batcher"]["batch_size_histogram"].keys() == {"1"}
    assert throughput["batched_vs_unbatched"] > 0
    assert report["capacity"]["steps"][0]["sessions"] == 1 and "max_sessions_held" in report["capacity"]


def test_bench_engine_device_cuda_without_a_gpu_is_a_clear_error(monkeypatch, capsys):
    from types import SimpleNamespace

    import gpu.device
    from swapcast.cli import main

    no_gpu = SimpleNamespace(backend="numpy", name="CPU", memory_gb=None, reason="no CUDA device visible")
    monkeypatch.setattr(gpu.device, "detect_device", lambda: no_gpu)
    assert main(["bench", "engine", "--sessions", "1", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "--device cuda" in err and "no CUDA device" in err and "Traceback" not in err
