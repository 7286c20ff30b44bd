"""The queue's guarantees on a real Redis, without media: priorities, a split and a
finalisation that happen once however often their tasks run, leases, and the dead-letter
path for tasks whose workers keep dying or failing (an in-process ``Worker`` whose face
lookup fails stands in for a broken node)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from gpu.options import SwapOptions
from signaling.jobs import Chunk, Job, JobQueue, JobSettings
from signaling.jobs.model import Task
from signaling.jobs.storage import LocalStorage
from streamer.jobs.render import Encoding
from streamer.jobs.worker import Worker, WorkerSettings


def new_job(job_id: str, priority: str = "normal") -> Job:
    stamp = time.time()
    return Job(id=job_id, state="pending", priority=priority, input_path=f"{job_id}/input.mp4",  # type: ignore[arg-type]
               input_name="input.mp4", face_id="astronaut", source_path=None, webhook_url=None,
               idempotency_key=None, created=stamp, updated=stamp)


async def split(queue: JobQueue, task: Task, chunks: int) -> bool:
    pieces = [Chunk(i, f"{task.job_id}/chunk-{i}.mov", 10, 2.0 * i, 2.0) for i in range(chunks)]
    return await queue.commit_split(task, pieces, frames=10 * chunks, duration_s=2.0 * chunks, frame_s=0.2, has_audio=True)


def run(scenario, redis_url: str, claim_timeout_s: float = 30.0):
    async def main():
        queue = JobQueue.from_url(redis_url, claim_timeout_s=claim_timeout_s)
        try:
            await queue.ensure_groups()
            return await asyncio.wait_for(scenario(queue), 30)
        finally:
            await queue.close()

    return asyncio.run(main())


def test_priority_order_and_steps_that_happen_once(redis_url) -> None:
    async def scenario(queue: JobQueue) -> None:
        await queue.create(new_job("job_low", "low"))
        await queue.create(new_job("job_high", "high"))
        first = await queue.next_task("a", 10)
        assert (first.job_id, first.kind) == ("job_high", "split")  # created later, served first
        assert await split(queue, first, 3)
        assert not await split(queue, first, 3)  # a second run of the same split changes nothing
        job = await queue.get("job_high")
        assert (job.state, job.chunks_total, job.progress) == ("processing", 3, 20.0)
        tasks = [await queue.next_task("a", 10) for _ in range(3)]
        assert [(t.kind, t.index) for t in tasks] == [("chunk", 0), ("chunk", 1), ("chunk", 2)]
        assert [await queue.complete_chunk(t) for t in tasks] == ["ok", "ok", "last"]
        assert await queue.complete_chunk(tasks[2]) == "duplicate"  # counted once
        assert (await queue.get("job_high")).progress == 80.0
        final = await queue.next_task("a", 10)
        assert (final.job_id, final.kind) == ("job_high", "finalise")
        assert await queue.complete(final, "job_high/output.mp4")
        assert not await queue.complete(final, "job_high/output.mp4")
        job = await queue.get("job_high")
        assert (job.state, job.progress, job.output_path) == ("completed", 100.0, "job_high/output.mp4")
        low = await queue.next_task("a", 10)
        assert (low.job_id, low.kind) == ("job_low", "split")
        assert await queue.next_task("a", 10) is None  # nothing else: no second finalise anywhere

    run(scenario, redis_url)


def test_a_lease_passes_to_the_worker_that_reclaims(redis_url) -> None:
    async def scenario(queue: JobQueue) -> None:
        await queue.create(new_job("job_1"))
        held = await queue.next_task("a", 10)
        assert await queue.renew(held, "a")
        assert await queue.next_task("b", 10) is None  # renewed: not abandoned
        await asyncio.sleep(0.4)
        taken = await queue.next_task("b", 10)  # idle past the claim timeout: reclaimed
        assert taken.entry_id == held.entry_id
        assert not await queue.renew(held, "a") and await queue.renew(taken, "b")

    run(scenario, redis_url, claim_timeout_s=0.3)


def test_an_abandoned_task_deep_in_the_pending_list_is_found(redis_url) -> None:
    async def scenario(queue: JobQueue) -> None:
        for n in range(25):
            await queue.create(new_job(f"job_{n:02d}"))
        held = [await queue.next_task("busy", 10) for _ in range(25)]
        await queue.release(held[-1], "busy")  # only the newest is abandoned; 24 busy ones before it
        taken = await queue.next_task("other", 10)
        assert taken is not None and taken.job_id == "job_24"

    run(scenario, redis_url)


class BrokenFaces:
    """A face lookup that always fails, as a node with a broken dependency would."""

    async def for_job(self, job: Job):
        raise RuntimeError("the GPU fell off the bus")


def run_worker_until_final(queue: JobQueue, job_id: str, tmp_path: Path) -> asyncio.Future:
    settings = WorkerSettings(jobs=JobSettings(storage_dir=tmp_path, claim_timeout_s=0.3, max_attempts=3),
                              swap=SwapOptions(), encoding=Encoding(), name="w")
    worker = Worker(queue, None, BrokenFaces(), settings, LocalStorage(tmp_path))  # type: ignore[arg-type]  # never reaches the engine

    async def until_final() -> Job:
        serving = asyncio.create_task(worker.run())
        try:
            while not (job := await queue.get(job_id)).final:
                await asyncio.sleep(0.05)
            return job
        finally:
            worker.stop()
            await serving

    return until_final()


def test_failing_chunk_is_retried_then_dead_lettered(redis_url, tmp_path) -> None:
    async def scenario(queue: JobQueue):
        await queue.create(new_job("job_1"))
        await split(queue, await queue.next_task("setup", 10), 1)
        job = await run_worker_until_final(queue, "job_1", tmp_path)
        return job, await queue.attempts("job_1"), await queue.dead_letters()

    job, attempts, dead = run(scenario, redis_url, claim_timeout_s=0.3)
    reason = "chunk 0 failed: RuntimeError: the GPU fell off the bus"
    assert (job.state, job.error, attempts) == ("failed", reason, {"chunk:0": 3})
    assert [(d["job"], d["task"], d["error"], d["attempts"]) for d in dead] == [("job_1", "chunk:0", reason, "3")]


def test_chunk_whose_workers_keep_dying_is_dead_lettered(redis_url, tmp_path) -> None:
    async def scenario(queue: JobQueue):
        await queue.create(new_job("job_1"))
        await split(queue, await queue.next_task("setup", 10), 1)
        for ghost in ("g1", "g2", "g3"):  # each takes the chunk, counts its attempt, and dies
            task = await queue.next_task(ghost, 10)
            assert (task.kind, await queue.start_attempt(task)) == ("chunk", int(ghost[1]))
            await asyncio.sleep(0.35)
        job = await run_worker_until_final(queue, "job_1", tmp_path)
        return job, await queue.dead_letters()

    job, dead = run(scenario, redis_url, claim_timeout_s=0.3)
    reason = "chunk 0 was started 3 times and its worker stopped each time (crashed or killed)"
    assert (job.state, job.error) == ("failed", reason)
    assert [(d["task"], d["error"], d["attempts"]) for d in dead] == [("chunk:0", reason, "3")]
