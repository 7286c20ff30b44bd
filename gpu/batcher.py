"""The node's micro-batcher: face rows from all sessions share runner calls.

One ``MicroBatcher`` per model per node. Callers on any thread (each session's worker)
``submit(session_id, jobs)`` their prepared ``FaceJob`` rows and get a
``concurrent.futures.Future`` with, per job, its output rows (the same answer as
``run_jobs``). A small asyncio loop in a daemon thread owned by the batcher collects rows
and ships a batch when ``max_batch`` rows are waiting, when every attached session has
rows queued (nobody else could join it), or when the oldest row has waited
``max_queue_delay_ms``. The runner call itself runs on an executor thread (up to
``max_in_flight`` batches at once: 2+ on GPU streams, a core each on the CPU), so collection goes on
while a batch runs, and the rows that arrive meanwhile form the next batch.

Fairness: queued rows are taken round-robin across sessions, one row per session per turn,
and the turn order carries over from batch to batch, so a session with many faces cannot
crowd out a session with one.

Backpressure: a session that would have more than ``max_pending_per_session`` rows
outstanding (queued or running) is refused at once with ``BatcherBusy``; the caller drops
that frame instead of queueing it (the live latency policy: never queue, drop).

Solo fast path (``run()`` only): while exactly one session is attached and nothing is
queued or running, waiting ``max_queue_delay_ms`` could gather nobody else's rows, so the
rows run at once on the caller's thread (same runner, same metrics). A single-stream render
(``swapcast swap``) thus costs what a direct ``run_jobs`` costs.

With ``wait_for_company=False`` (a runner whose calls gain nothing from company: ONNX
Runtime and OpenCV on the CPU, where two rows cost what two calls cost) nothing waits for
company: ``run()`` goes inline whenever one of the ``max_in_flight`` slots is free and
nothing is queued, and queued rows ship as soon as a slot is free; rows batch only while
every slot is busy. On 2 cores with 2 sessions the tracking calls then run side by side on
both cores instead of waiting 4 ms for each other and queueing for one executor thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
import weakref
from collections import Counter, deque
from collections.abc import Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Self

import numpy as np

from gpu.runners.base import Runner
from gpu.swappers.base import FaceJob, run_jobs

log = logging.getLogger(__name__)

SessionId = Hashable

_batcher_ids = itertools.count(1)


class BatcherBusy(RuntimeError):
    """The session already has too many rows outstanding: drop this frame."""


class BatcherClosed(RuntimeError):
    """The batcher was closed before (or while) the rows could run."""


@dataclass(eq=False)
class _Request:
    session: SessionId
    jobs: Sequence[FaceJob]
    future: Future
    enqueued: float  # perf_counter() at submit
    results: list[Any] = field(default_factory=list)
    remaining: int = 0
    started: bool = False  # a row has shipped: the future can no longer be cancelled
    released: bool = False  # its rows no longer count as the session's pending rows

    def __post_init__(self) -> None:
        self.results = [None] * len(self.jobs)
        self.remaining = len(self.jobs)


class MicroBatcher:
    """Stacks rows from many sessions into runner calls; see the module docstring."""

    def __init__(
        self,
        runner: Runner,
        *,
        max_batch: int = 32,
        max_queue_delay_ms: float = 4.0,
        max_pending_per_session: int = 16,
        max_in_flight: int = 1,
        wait_for_company: bool = True,
        name: str | None = None,
        window: int = 4096,
    ) -> None:
        if max_batch < 1 or max_in_flight < 1 or max_pending_per_session < 1:
            raise ValueError("max_batch, max_in_flight and max_pending_per_session must be >= 1")
        if max_queue_delay_ms < 0:
            raise ValueError("max_queue_delay_ms must be >= 0")
        self.runner = runner
        self.max_batch = int(max_batch)
        self.max_queue_delay_ms = float(max_queue_delay_ms)
        self.max_pending_per_session = int(max_pending_per_session)
        self.max_in_flight = int(max_in_flight)
        self.name = name or f"batcher-{next(_batcher_ids)}"
        self._delay_s = self.max_queue_delay_ms / 1000.0
        self.wait_for_company = bool(wait_for_company)

        # all state below is guarded by _lock (touched by callers, the loop and executors)
        self._lock = threading.Lock()
        self._closed = False
        self._queues: dict[SessionId, deque[tuple[_Request, int]]] = {}
        self._turns: deque[SessionId] = deque()  # sessions with queued rows, in round-robin order
        self._queued_rows = 0
        self._inbox: dict[int, _Request] = {}  # submitted, not yet on the loop
        self._pending: dict[SessionId, int] = {}  # rows outstanding per session (queued + running)
        self._attached: Counter = Counter()
        self._in_flight = 0
        self._running: set[Future] = set()  # batches handed to the executor, not yet done
        self._timer: asyncio.TimerHandle | None = None
        self._timer_due = 0.0
        self._window = window
        self.reset_metrics()

        self._executor = ThreadPoolExecutor(max_workers=self.max_in_flight, thread_name_prefix=f"{self.name}-run")
        self._loop = asyncio.new_event_loop()
        self._loop_ready = threading.Event()
        self._thread = threading.Thread(target=self._loop_main, name=f"{self.name}-loop", daemon=True)
        self._thread.start()
        self._loop_ready.wait()

    # -- callers (any thread) -----------------------------------------------------------------

    def attach(self, session_id: SessionId) -> None:
        """Say a session exists (it may submit soon); only used for the solo fast path."""
        with self._lock:
            self._attached[session_id] += 1

    def detach(self, session_id: SessionId) -> None:
        with self._lock:
            if self._attached[session_id] <= 1:
                self._attached.pop(session_id, None)
            else:
                self._attached[session_id] -= 1

    def submit(self, session_id: SessionId, jobs: Sequence[FaceJob]) -> Future:
        """Queue a session's rows; the future gives, per job, its row of every output.

        Raises ``BatcherBusy`` at once when the session would have more than
        ``max_pending_per_session`` rows outstanding (a request is always admitted when the
        session has nothing outstanding, however many rows it has), ``BatcherClosed``
        after ``close()``. Cancelling the future before its rows ship withdraws them."""
        future: Future = Future()
        if not jobs:
            future.set_result([])
            return future
        request = _Request(session_id, list(jobs), future, time.perf_counter())
        with self._lock:
            self._admit(request)
            self._inbox[id(request)] = request
        # a weak reference: a future that held its request (which holds the future) would be a
        # cycle per frame, keeping crops and results until the garbage collector's next pass
        future.add_done_callback(lambda f, r=weakref.ref(request): self._on_done(f, r()))
        try:
            self._loop.call_soon_threadsafe(self._enqueue, request)
        except RuntimeError:  # the loop closed meanwhile
            self._fail(request, BatcherClosed(f"{self.name} is closed"))
        return future

    def run(self, session_id: SessionId, jobs: Sequence[FaceJob], timeout: float | None = None) -> list[list[np.ndarray]]:
        """Blocking ``submit``: the rows' outputs, or ``BatcherBusy`` / ``TimeoutError`` /
        ``BatcherClosed`` / the runner's own error. On a timeout, rows not yet shipped are
        withdrawn."""
        if not jobs:
            return []
        if self._start_inline(session_id, jobs):
            return self._run_inline(jobs)
        future = self.submit(session_id, jobs)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"{self.name}: rows of session {session_id!r} did not run within {timeout} s") from None

    def pending(self, session_id: SessionId) -> int:
        with self._lock:
            return self._pending.get(session_id, 0)

    def close(self, timeout: float = 5.0) -> None:
        """Fail every queued row with ``BatcherClosed``, give running batches ``timeout``
        seconds to finish, stop the loop thread and the executor threads. Idempotent.
        A batch still running then (a runner stuck in native code) is logged and left
        behind: the caller's shutdown goes on instead of hanging on it."""
        deadline = time.monotonic() + timeout
        with self._lock:
            if self._closed:
                return
            self._closed = True
            queued = {id(req): req for q in self._queues.values() for req, _ in q}
            queued.update(self._inbox)
            self._inbox.clear()
            self._queues.clear()
            self._turns.clear()
            self._queued_rows = 0
        error = BatcherClosed(f"{self.name} was closed before these rows ran")
        for request in queued.values():
            self._fail(request, error)
        try:
            self._loop.call_soon_threadsafe(self._loop.stop)
        except RuntimeError:  # already closed
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            running = list(self._running)
        self._executor.shutdown(wait=False)
        _, stuck = concurrent.futures.wait(running, max(0.0, deadline - time.monotonic()))
        if stuck:
            log.warning("%s: %d batch(es) still running %.1f s after close; left behind", self.name, len(stuck), timeout)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def session_count(self) -> int:
        """Sessions attached now (a lone one runs its rows inline, see ``run``)."""
        with self._lock:
            return len(self._attached)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- metrics --------------------------------------------------------------------------------

    def reset_metrics(self) -> None:
        """Start a new measurement window (benchmarks call this between runs)."""
        with self._lock:
            now = time.perf_counter()
            self._t0 = now
            self._busy_s = 0.0
            self._busy_since: float | None = now if self._in_flight else None
            self._batch_sizes: Counter = Counter()
            self._delays_ms: deque[float] = deque(maxlen=self._window)
            self._rows_run = 0
            self._rows_failed = 0
            self._rejected_rows = 0
            self._batches = 0
            self._inline_batches = 0

    def metrics(self) -> dict[str, Any]:
        """Batch size histogram, queue delay p50/p99 (ms), device busy % (share of wall time
        at least one batch was running), rows/s, rejected rows, since the last reset."""
        with self._lock:
            now = time.perf_counter()
            wall = max(now - self._t0, 1e-9)
            busy = self._busy_s + (now - self._busy_since if self._busy_since is not None else 0.0)
            delays = np.array(self._delays_ms) if self._delays_ms else None
            batches = self._batches
            return {
                "max_batch": self.max_batch,
                "max_queue_delay_ms": self.max_queue_delay_ms,
                "max_in_flight": self.max_in_flight,
                "batches": batches,
                "inline_batches": self._inline_batches,
                "rows": self._rows_run,
                "rows_failed": self._rows_failed,
                "rejected_rows": self._rejected_rows,
                "batch_size_histogram": {str(size): count for size, count in sorted(self._batch_sizes.items())},
                "mean_batch_size": self._rows_run / batches if batches else 0.0,
                "queue_delay_p50_ms": float(np.percentile(delays, 50)) if delays is not None else None,
                "queue_delay_p99_ms": float(np.percentile(delays, 99)) if delays is not None else None,
                "device_busy_pct": 100.0 * min(busy / wall, 1.0),
                "rows_per_s": self._rows_run / wall,
                "wall_s": wall,
                "queued_rows": self._queued_rows,
                "in_flight": self._in_flight,
                "sessions_pending": sum(1 for n in self._pending.values() if n),
            }

    # -- internals: admission and withdrawal (under _lock) -------------------------------------

    def _admit(self, request: _Request) -> None:
        if self._closed:
            raise BatcherClosed(f"{self.name} is closed")
        rows = len(request.jobs)
        pending = self._pending.get(request.session, 0)
        if pending and pending + rows > self.max_pending_per_session:
            self._rejected_rows += rows
            raise BatcherBusy(
                f"{self.name}: session {request.session!r} has {pending} row(s) outstanding "
                f"(limit {self.max_pending_per_session}); drop this frame"
            )
        self._pending[request.session] = pending + rows

    def _release(self, request: _Request) -> None:
        """The request's rows stop counting against its session."""
        if request.released:
            return
        request.released = True
        left = self._pending.get(request.session, 0) - len(request.jobs)
        if left > 0:
            self._pending[request.session] = left
        else:
            self._pending.pop(request.session, None)

    def _purge(self, request: _Request) -> None:
        """Withdraw a cancelled request's queued rows."""
        queue = self._queues.get(request.session)
        if not queue:
            return
        kept = deque(item for item in queue if item[0] is not request)
        self._queued_rows -= len(queue) - len(kept)
        if kept:
            self._queues[request.session] = kept
        else:
            del self._queues[request.session]
            try:
                self._turns.remove(request.session)
            except ValueError:
                pass

    def _on_done(self, future: Future, request: _Request | None) -> None:
        if request is not None:  # None: finished and let go of already
            self._on_cancelled(future, request)

    def _on_cancelled(self, future: Future, request: _Request) -> None:
        if future.cancelled():
            with self._lock:
                self._purge(request)
                self._release(request)

    def _fail(self, request: _Request, error: BaseException) -> None:
        with self._lock:
            self._release(request)
        if not request.started:
            request.started = True
            if not request.future.set_running_or_notify_cancel():
                return
        try:
            request.future.set_exception(error)
        except concurrent.futures.InvalidStateError:  # already failed by another batch
            pass

    # -- internals: the solo fast path -------------------------------------------------------------

    def _start_inline(self, session_id: SessionId, jobs: Sequence[FaceJob]) -> bool:
        """Check for the solo case (or a free slot of a runner that gains nothing from
        company) and claim the runner in one step (under the lock, so the loop cannot ship a
        batch between the check and the call)."""
        with self._lock:
            solo = len(self._attached) == 1 and session_id in self._attached and self._in_flight == 0
            free = not self.wait_for_company and self._in_flight < self.max_in_flight
            solo = (
                (solo or free)
                and not self._closed
                and self._queued_rows == 0
                and not self._inbox
                and len(jobs) <= self.max_batch
            )
            if solo:
                self._batch_started_locked()
                self._inline_batches += 1
            return solo

    def _run_inline(self, jobs: Sequence[FaceJob]) -> list[list[np.ndarray]]:
        ok = False
        try:
            rows = run_jobs(self.runner, jobs)
            ok = True
            return rows
        finally:
            with self._lock:
                self._batch_finished_locked(len(jobs), ok)
                self._delays_ms.extend([0.0] * len(jobs))
                poke = self._queued_rows > 0 and not self._closed
            if poke:
                self._poke()

    # -- internals: the loop thread ---------------------------------------------------------------

    def _loop_main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._loop_ready.set)
        try:
            self._loop.run_forever()
        finally:
            if self._timer is not None:
                self._timer.cancel()
            self._loop.close()

    def _poke(self) -> None:
        """Ask the loop to look at the queue again (any thread)."""
        try:
            self._loop.call_soon_threadsafe(self._schedule)
        except RuntimeError:  # the loop has closed: close() fails what is left
            pass

    def _enqueue(self, request: _Request) -> None:
        """Loop thread: a submitted request joins its session's queue."""
        with self._lock:
            if self._inbox.pop(id(request), None) is None:  # close() has failed it already
                return
            closed = self._closed
            if not closed and not request.future.cancelled():
                queue = self._queues.get(request.session)
                if queue is None:
                    queue = self._queues[request.session] = deque()
                    self._turns.append(request.session)
                queue.extend((request, index) for index in range(len(request.jobs)))
                self._queued_rows += len(request.jobs)
        if closed:
            self._fail(request, BatcherClosed(f"{self.name} was closed before these rows ran"))
            return
        self._schedule()

    def _schedule(self) -> None:
        """Loop thread: ship every batch that is due, then arm the timer for the oldest row."""
        while True:
            with self._lock:
                if self._closed or not self._queued_rows or self._in_flight >= self.max_in_flight:
                    return
                now = time.perf_counter()
                # each session's queue is FIFO: the oldest row is one of the heads
                due = min(queue[0][0].enqueued for queue in self._queues.values()) + self._delay_s
                if (self.wait_for_company and self._queued_rows < self.max_batch and now < due
                        and not self._everyone_queued_locked()):
                    self._arm(due, now)
                    return
                batch = self._take_locked(now)
                if not batch:
                    continue
                self._batch_started_locked()
            future = self._executor.submit(self._run_batch, batch)
            with self._lock:
                self._running.add(future)
            future.add_done_callback(self._forget_batch)

    def _forget_batch(self, future: Future) -> None:
        with self._lock:
            self._running.discard(future)

    def _everyone_queued_locked(self) -> bool:
        """Every attached session has rows queued: waiting longer adds nobody's rows, only
        latency (each session waits for its own before it sends more)."""
        return bool(self._attached) and all(session in self._queues for session in self._attached)

    def _arm(self, due: float, now: float) -> None:
        if self._timer is not None and self._timer_due <= due:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._timer_due = due
        self._timer = self._loop.call_later(max(due - now, 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self._schedule()

    def _take_locked(self, now: float) -> list[tuple[_Request, int]]:
        """Up to max_batch rows, one per session per turn; the turn order carries over."""
        batch: list[tuple[_Request, int]] = []
        while self._turns and len(batch) < self.max_batch:
            session = self._turns.popleft()
            queue = self._queues[session]
            request, index = queue.popleft()
            self._queued_rows -= 1
            shipped = request.started or request.future.set_running_or_notify_cancel()
            if shipped:
                request.started = True
                batch.append((request, index))
                self._delays_ms.append((now - request.enqueued) * 1000.0)
            else:  # cancelled just now: withdraw its other rows too, the session keeps its turn
                queue = deque(item for item in queue if item[0] is not request)
                self._queued_rows -= len(self._queues[session]) - len(queue)
                self._queues[session] = queue
            if not queue:
                del self._queues[session]
            elif shipped:
                self._turns.append(session)
            else:
                self._turns.appendleft(session)
        return batch

    def _batch_started_locked(self) -> None:
        if self._in_flight == 0:
            self._busy_since = time.perf_counter()
        self._in_flight += 1

    def _batch_finished_locked(self, rows: int, ok: bool) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._busy_since is not None:
            self._busy_s += time.perf_counter() - self._busy_since
            self._busy_since = None
        self._batches += 1
        self._batch_sizes[rows] += 1
        if ok:
            self._rows_run += rows
        else:
            self._rows_failed += rows

    def _run_batch(self, batch: list[tuple[_Request, int]]) -> None:
        """Executor thread: one runner call, then hand each row to its request."""
        error: BaseException | None = None
        rows: list[list[np.ndarray]] = []
        try:
            rows = run_jobs(self.runner, [request.jobs[index] for request, index in batch])
        except BaseException as exc:  # noqa: BLE001 - handed to every caller in the batch
            error = exc
        finished: list[_Request] = []
        failed: dict[int, _Request] = {}
        with self._lock:
            self._batch_finished_locked(len(batch), error is None)
            for position, (request, index) in enumerate(batch):
                if error is not None:
                    failed[id(request)] = request
                    continue
                request.results[index] = rows[position]
                request.remaining -= 1
                if request.remaining == 0:
                    finished.append(request)
                    self._release(request)
            poke = self._queued_rows > 0 and not self._closed
        for request in finished:
            try:
                request.future.set_result(request.results)
            except concurrent.futures.InvalidStateError:  # another batch with its rows failed
                pass
        for request in failed.values():
            self._fail(request, error)
        if poke:
            self._poke()
