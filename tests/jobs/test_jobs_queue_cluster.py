"""The job queue's guarantees again, on a real Redis Cluster (``redis_cluster`` in the top
conftest): its keys share the ``{jobs}`` hash tag, so its scripts, transactions and
multi-stream blocking reads stay in one slot, which only works with the cluster client
that ``JobQueue.from_url`` opens for a ``redis+cluster://`` URL."""

from __future__ import annotations

import asyncio

import pytest
import test_jobs_queue as single_server
from redis.asyncio.cluster import RedisCluster

from signaling.jobs import JobQueue


@pytest.fixture
def redis_url(redis_cluster_url: str) -> str:
    """In this module "the Redis" is the shared cluster, for the scenarios taken below."""
    return redis_cluster_url


test_priority_order_and_steps_that_happen_once = single_server.test_priority_order_and_steps_that_happen_once
test_a_lease_passes_to_the_worker_that_reclaims = single_server.test_a_lease_passes_to_the_worker_that_reclaims
test_an_abandoned_task_deep_in_the_pending_list_is_found = single_server.test_an_abandoned_task_deep_in_the_pending_list_is_found
test_failing_chunk_is_retried_then_dead_lettered = single_server.test_failing_chunk_is_retried_then_dead_lettered
test_chunk_whose_workers_keep_dying_is_dead_lettered = single_server.test_chunk_whose_workers_keep_dying_is_dead_lettered


def test_the_queue_talks_to_the_cluster(redis_url: str) -> None:
    """The scenarios above prove something only if the queue really opened a cluster
    client, and its keys share one slot."""

    async def main() -> tuple[bool, set[int]]:
        queue = JobQueue.from_url(redis_url)
        try:
            await queue.ensure_groups()
            await queue.create(single_server.new_job("job_slot"))
            slots = {queue.redis.keyslot(key) for key in (queue.job_key("job_slot"), *queue.streams, queue.dead_letter)}
            return isinstance(queue.redis, RedisCluster), slots
        finally:
            await queue.close()

    is_cluster, slots = asyncio.run(main())
    assert is_cluster and len(slots) == 1
