"""The job worker: takes tasks from the queue and does their media work.

One media task (split, chunk, finalise) at a time per worker process, since a render uses
every core it gets; webhook deliveries (``notify``) run beside it, as they only wait on the
network. The media work runs in a thread, so the event loop keeps the task's lease fresh
(``Lease``) and notices when the job was cancelled or failed elsewhere, the task was taken
over, or the worker is told to stop; the work is then abandoned at the next frame.

Failure policy: bad input (a ``SwapcastError``: damaged video, no face in the source photo,
unknown face) fails the job at once, since another attempt would fail the same way; any
other error is recorded and the task is given back for another attempt, up to
``jobs.max_attempts``. A worker that dies holding a task leaves it pending; another worker
reclaims it after ``jobs.claim_timeout_s``, which also counts as an attempt. A task out of
attempts goes to the dead-letter stream and fails its job with the last error. An outage of
the job storage (``JobStorageError``) is such an error: it is retried, it fails no job at once.

Files go through the job storage (``signaling.jobs.storage``): each step reads its inputs
with ``fetch`` and writes its results into a scratch folder, then ``put_file``s them, so a
step's result is stored whole or not at all, and S3 works like a shared folder. A worker
killed outright cannot remove its scratch folder; every worker removes such leftovers at
start and every ``SCRATCH_SWEEP_S`` (``JobStorage.sweep_scratch``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import TracebackType
from typing import Self

from redis.exceptions import ResponseError

from gpu.engine import FaceEngine
from gpu.errors import SwapcastError
from gpu.options import SwapOptions
from signaling.jobs.model import Chunk, Job, Task, TaskKind
from signaling.jobs.queue import JobQueue, JobQueueUnavailable, lost_groups
from signaling.jobs.settings import JobSettings
from signaling.jobs.storage import JobStorage, JobStorageError
from signaling.jobs.webhook import send_webhook
from signaling.push_policy import PushPolicy
from signaling.registry.base import cancel_requested
from streamer.jobs.assemble import Expected, assemble
from streamer.jobs.render import Abandoned, Encoding, render_chunk
from streamer.jobs.sources import SourceFaces
from streamer.jobs.split import SplitResult, split_video
from streamer.media.errors import VideoError
from streamer.provenance.credentials import ContentCredentials
from streamer.provenance.marker import ProvenanceSettings

log = logging.getLogger(__name__)
SCRATCH_SWEEP_S = 300.0


@dataclass(frozen=True)
class WorkerSettings:
    jobs: JobSettings
    swap: SwapOptions
    encoding: Encoding
    name: str  # the consumer name in the streams' group; unique per worker process
    push_policy: PushPolicy = PushPolicy()  # where users' webhooks may point, checked again at send
    provenance: ProvenanceSettings | None = None  # watermark in every frame, C2PA on the output


class Lease:
    """Renews a task's claim every third of the claim timeout while it is worked on, and
    stops the work (``stopped()`` turns true, ``reason`` says why) when the claim is lost,
    the job ended (``watch_job``), or the worker is stopping."""

    def __init__(self, queue: JobQueue, task: Task, consumer: str, *, interval_s: float, watch_job: bool,
                 stopping: asyncio.Event) -> None:
        self.queue, self.task, self.consumer = queue, task, consumer
        self.interval_s, self.watch_job, self.stopping = interval_s, watch_job, stopping
        self.reason: str | None = None  # "lost", "ended" or "stopping"
        self._flag = threading.Event()  # read by the render thread
        self._keeper: asyncio.Task[None] | None = None

    def stopped(self) -> bool:
        return self._flag.is_set()

    def check(self) -> None:
        if self._flag.is_set():
            raise Abandoned

    async def __aenter__(self) -> Self:
        self._keeper = asyncio.create_task(self._keep())
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper

    def _stop(self, reason: str) -> None:
        self.reason = reason
        self._flag.set()

    async def _keep(self) -> None:
        # not `while True`: a renew whose Redis call swallowed the cancellation (see
        # cancel_requested) would keep __aexit__, and with it the worker, waiting for ever
        while not cancel_requested():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), self.interval_s)
                self._stop("stopping")
                return
            try:
                if not await self.queue.renew(self.task, self.consumer):
                    self._stop("lost")
                    return
                if self.watch_job and (await self.queue.job_state(self.task.job_id)) not in ("pending", "processing"):
                    self._stop("ended")
                    return
            except JobQueueUnavailable as exc:  # keep working: the claim lapses only if Redis stays away
                log.warning("cannot renew %s of %s: %s", self.task.name, self.task.job_id, exc)


class Worker:
    def __init__(
        self, queue: JobQueue, engine: FaceEngine, faces: SourceFaces, settings: WorkerSettings, storage: JobStorage
    ) -> None:
        self.queue, self.engine, self.faces, self.settings, self.storage = queue, engine, faces, settings, storage
        self.name = settings.name
        self._stopping = asyncio.Event()
        self._steps: dict[TaskKind, Callable[[Task, Job, Lease], Awaitable[None]]] = {
            "split": self._split, "chunk": self._chunk, "finalise": self._finalise, "notify": self._notify,
        }

    def stop(self) -> None:
        """Finish soon: the current media work is given back to the queue for another worker."""
        self._stopping.set()

    async def run(self) -> None:
        """Serve tasks until ``stop()``."""
        background = {asyncio.create_task(self._sweep_scratch())}
        block_ms = round(min(1.0, self.settings.jobs.claim_timeout_s / 2) * 1000)
        groups_ready = False
        while not self._stopping.is_set():
            try:
                if not groups_ready:
                    await self.queue.ensure_groups()
                    groups_ready = True
                task = await self.queue.next_task(self.name, block_ms)
                if task is None:
                    continue
                if task.kind == "notify":
                    runner = asyncio.create_task(self._handle_beside(task))
                    background.add(runner)
                    runner.add_done_callback(background.discard)
                else:
                    await self._handle(task)
            except JobQueueUnavailable as exc:
                log.warning("%s; retrying in 1 s", exc)
                await asyncio.sleep(1.0)
            except ResponseError as exc:
                if not lost_groups(exc):
                    raise
                groups_ready = False  # Redis lost its data (flushed, or restarted without persistence)
        for runner in background:
            runner.cancel()
        await asyncio.gather(*background, return_exceptions=True)

    async def _sweep_scratch(self) -> None:
        """Remove the scratch folders of killed processes now and every ``SCRATCH_SWEEP_S``:
        a crash's leftovers (a chunk's worth of video each) would otherwise stay forever."""
        while True:
            try:
                await asyncio.to_thread(self.storage.sweep_scratch, self.settings.jobs.claim_timeout_s)
            except Exception:  # a background loop: the next round may succeed, the tasks go on anyway
                log.exception("sweeping the scratch folders failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), SCRATCH_SWEEP_S)
                return

    # -- one task ---------------------------------------------------------------------------

    async def _handle_beside(self, task: Task) -> None:
        """A task run beside the media work: its Redis outage is logged, not raised."""
        try:
            await self._handle(task)
        except JobQueueUnavailable as exc:
            log.warning("%s of %s interrupted: %s", task.name, task.job_id, exc)

    async def _handle(self, task: Task) -> None:
        job = await self.queue.get(task.job_id)
        if job is None or (job.final and task.kind != "notify"):
            await self._drop(task, job)
            return
        attempt = await self.queue.start_attempt(task)
        if attempt > self.settings.jobs.max_attempts:
            reason = await self.queue.last_error(task) or (
                f"{task.describe()} was started {attempt - 1} times and its worker stopped each time (crashed or killed)"
            )
            await self.queue.fail(task, reason, attempt - 1)
            return
        lease = Lease(self.queue, task, self.name, interval_s=self.settings.jobs.claim_timeout_s / 3,
                      watch_job=task.kind != "notify", stopping=self._stopping)
        started = time.perf_counter()
        try:
            async with lease:
                await self._steps[task.kind](task, job, lease)
        except Abandoned:
            await self._abandoned(task, job, lease.reason)
        except JobQueueUnavailable:
            raise  # the task stays pending and is reclaimed once Redis is back
        except SwapcastError as exc:
            log.warning("%s %s failed for good: %s", job.id, task.name, exc)
            await self.queue.fail(task, str(exc), attempt)
        except Exception as exc:
            log.exception("%s %s failed (attempt %d)", job.id, task.name, attempt)
            reason = f"{task.describe()} failed: {type(exc).__name__}: {exc}"
            if attempt >= self.settings.jobs.max_attempts:
                await self.queue.fail(task, reason, attempt)
            else:
                await self.queue.record_error(task, reason)
                await self.queue.release(task, self.name)
        else:
            log.info("%s %s done in %.2f s", job.id, task.name, time.perf_counter() - started)

    async def _abandoned(self, task: Task, job: Job, reason: str | None) -> None:
        if reason == "stopping":  # not the task's fault: another worker gets it, attempt uncounted
            await self.queue.forget_attempt(task)
            await self.queue.release(task, self.name)
        elif reason == "ended":
            await self._drop(task, job)
        # "lost": another worker reclaimed the task and owns it now

    async def _drop(self, task: Task, job: Job | None) -> None:
        """A task whose job ended (cancelled, failed) or vanished: acknowledge it and remove
        the chunk's files, so an ended job's leftovers go away task by task."""
        await self.queue.ack(task)
        if job is not None and task.kind == "chunk" and task.index is not None:
            keys = [self._rendered(job.id, task.index)]
            with contextlib.suppress(KeyError):
                keys.append((await self.queue.chunk(job.id, task.index)).path)
            await self._remove(job.id, keys=keys)

    async def _remove(self, job_id: str, *, keys: Iterable[str] = (), folders: Iterable[str] = ()) -> None:
        """Delete a job's intermediate files; a storage outage leaves them (logged), as they
        only take space."""
        try:
            for key in keys:
                await asyncio.to_thread(self.storage.delete, key)
            for folder in folders:
                await asyncio.to_thread(self.storage.delete_folder, folder)
        except JobStorageError as exc:
            log.warning("%s: intermediate files stay in the storage: %s", job_id, exc)

    # -- the steps ------------------------------------------------------------------------------

    @staticmethod
    def _rendered(job_id: str, index: int) -> str:
        return f"{job_id}/rendered/chunk-{index:04d}.mov"

    async def _split(self, task: Task, job: Job, lease: Lease) -> None:
        folder = f"{job.id}/split-{secrets.token_hex(4)}"  # per attempt: racing attempts never share files

        def cut(scratch: Path) -> SplitResult:
            try:
                source = self.storage.fetch(job.input_path, scratch)
            except FileNotFoundError:
                raise VideoError(f"{job.input_name}: no longer in the job storage") from None
            result = split_video(source, scratch / "chunks", self.settings.jobs.chunk_seconds, label=job.input_name,
                                 max_frames=self.settings.jobs.max_frames)
            for piece in result.pieces:
                self.storage.put_file(piece.path, f"{folder}/{piece.path.name}")
            return result

        try:
            with self.storage.scratch() as scratch:
                result = await asyncio.to_thread(cut, scratch)
            lease.check()
            chunks = [
                Chunk(p.index, f"{folder}/{p.path.name}", p.frames, round(p.start_s, 6), round(p.duration_s, 6))
                for p in result.pieces
            ]
            committed = await self.queue.commit_split(
                task, chunks, frames=result.frames, duration_s=result.duration_s, frame_s=result.frame_s,
                has_audio=result.has_audio,
            )
        except BaseException:
            await self._remove(job.id, folders=[folder])
            raise
        if not committed:
            await self._remove(job.id, folders=[folder])

    async def _chunk(self, task: Task, job: Job, lease: Lease) -> None:
        assert task.index is not None
        chunk = await self.queue.chunk(job.id, task.index)
        source = await self.faces.for_job(job)
        mapping = await self.faces.people_map(job, self.settings.swap.reference_threshold)
        lease.check()
        rendered = self._rendered(job.id, chunk.index)
        end = chunk.start_s + chunk.duration_s

        def render(scratch: Path) -> None:
            output = scratch / "rendered.mov"
            render_chunk(
                self.engine, source, self.settings.swap, self.storage.fetch(chunk.path, scratch), output,
                expected_frames=chunk.frames, encoding=self.settings.encoding, stopped=lease.stopped,
                label=f"{job.input_name} between {chunk.start_s:.1f} s and {end:.1f} s",
                session_id=f"{job.id}-{chunk.index}", max_seconds=self.settings.jobs.chunk_timeout_s,
                marker=self.settings.provenance.marker(job.id) if self.settings.provenance is not None else None,
                mapping=mapping,
            )
            self.storage.put_file(output, rendered)

        with self.storage.scratch() as scratch:
            await asyncio.to_thread(render, scratch)
        if await self.queue.complete_chunk(task) == "gone":
            await self._remove(job.id, keys=[rendered])

    async def _finalise(self, task: Task, job: Job, lease: Lease) -> None:
        if job.frames is None or job.duration_s is None or job.frame_s is None:
            raise RuntimeError(f"job {job.id} reached finalisation without the split's measurements")
        chunks = await self.queue.chunks(job.id)
        expected = Expected(job.frames, job.duration_s, job.frame_s, job.has_audio)

        def join(scratch: Path) -> str:
            fetch = self.storage.fetch
            result = assemble(
                fetch(job.input_path, scratch), [fetch(self._rendered(job.id, c.index), scratch) for c in chunks],
                scratch, expected,
            )
            if self.settings.provenance is not None:
                ContentCredentials(self.settings.provenance).sign(result.path, stream_id=job.id, title=job.input_name)
            # each attempt stores under its own name: if a reclaimed attempt races this one,
            # the one that does not complete the job deletes its own file, never the winner's
            key = f"{job.id}/{secrets.token_hex(4)}-{result.path.name}"
            self.storage.put_file(result.path, key)
            return key

        with self.storage.scratch() as scratch:
            output = await asyncio.to_thread(join, scratch)
        if await self.queue.complete(task, output):
            split_folders = {PurePosixPath(c.path).parent.as_posix() for c in chunks}
            await self._remove(job.id, folders=[f"{job.id}/rendered", *split_folders])
        else:
            await self._remove(job.id, keys=[output])

    async def _notify(self, task: Task, job: Job, lease: Lease) -> None:
        if job.webhook_url is None:
            await self.queue.ack(task)
            return
        event = f"job.{job.state}"
        delivery = await send_webhook(
            job.webhook_url, event, {"event": event, "job": job.public()}, self.settings.jobs.webhook_secret,
            delivery_id=f"{job.id}.{job.state}", policy=None if job.webhook_unrestricted else self.settings.push_policy,
        )
        if delivery.delivered:
            status = f"delivered ({delivery.detail}, attempt {delivery.attempts})"
        else:
            status = f"failed after {delivery.attempts} attempts ({delivery.detail})"
        await self.queue.set_webhook_status(job.id, status)
        await self.queue.ack(task)
