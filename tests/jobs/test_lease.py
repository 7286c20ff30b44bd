"""The lease keeper of a task: it must end when the work ends, even when a Redis call
swallowed its cancellation (redis-py's ``wait_for`` can return normally when cancelled)."""

from __future__ import annotations

import asyncio

from signaling.jobs.model import Task
from streamer.jobs.worker import Lease


class SwallowingRenewQueue:
    """A queue whose first renew returns normally when cancelled, as a redis-py command does
    when the cancellation lands just as its send completes."""

    def __init__(self) -> None:
        self.renewing = asyncio.Event()
        self.swallowed = 0
        self.renewals = 0

    async def renew(self, task: Task, consumer: str) -> bool:
        self.renewals += 1
        if not self.swallowed:
            self.renewing.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.swallowed += 1
        return True

    async def job_state(self, job_id: str) -> str:
        return "processing"


def test_leaving_a_lease_ends_a_keeper_whose_renew_lost_the_cancellation():
    queue = SwallowingRenewQueue()
    task = Task(stream="jobs:chunks", entry_id="1-0", job_id="j1", kind="chunk", index=0)

    async def scenario() -> bool:
        lease = Lease(queue, task, "worker-1", interval_s=0.01, watch_job=True, stopping=asyncio.Event())

        async def work() -> None:
            async with lease:
                await queue.renewing.wait()  # a renew is in flight when the work ends

        done, _ = await asyncio.wait({asyncio.ensure_future(work())}, timeout=10)  # the old keeper looped for ever
        return bool(done)

    assert asyncio.run(scenario()), "Lease.__aexit__ waited on a keeper that lost its cancellation"
    assert queue.swallowed == 1
