"""``JobQueue``: offline jobs and their tasks in Redis Streams.

Key layout (``P`` = ``swapcast:{jobs}:``; the hash tag keeps every key in one Redis Cluster
slot, so each Lua script touches one slot):

- ``P job:<id>``           hash of the job's fields (``model.Job``), plus per-task counters
                           ``attempts:<task>`` and ``last_error:<task>``
- ``P job:<id>:chunks``    hash chunk index -> ``Chunk`` JSON (the split's plan)
- ``P job:<id>:done``      set of rendered chunk indices (a chunk counts once)
- ``P jobs``               sorted set of job ids by creation time (listing)
- ``P jobs:owner:<owner>`` the same for one owner's jobs
- ``P idem:<sha256>``      job id of an owner's ``Idempotency-Key`` (expires after a day)
- ``P tasks:<priority>``   one stream per priority, each with the consumer group ``workers``
- ``P dead``               dead-letter stream: tasks that failed for good, with the error

Crash safety: a task stays in its consumer's pending list until a script acknowledges it
together with its effect (``scripts``). A worker renews its lease on a task while it works
(``renew``); an entry left idle for ``claim_timeout_s`` (its worker died) is taken over by
the next worker that asks for work (``XAUTOCLAIM``). Attempts are counted per task in the
job hash when a worker starts one, so a task that keeps killing its workers still ends in
the dead-letter stream.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from gpu.errors import SwapcastError
from signaling.jobs import scripts
from signaling.jobs.model import PRIORITIES, Chunk, Job, Priority, Task
from signaling.redis_client import UNREACHABLE, RedisClient, open_redis

PREFIX = "swapcast:{jobs}:"
GROUP = "workers"
IDEMPOTENCY_TTL_S = 24 * 3600
DEAD_LETTER_CAP = 10_000  # approximate length the dead-letter stream is trimmed to
_RELEASE_IDLE_MS = 24 * 3600 * 1000  # an entry given back looks abandoned: reclaimable at once
_MAX_CONNECTIONS = 64  # requests and workers at once (a blocked read holds one for up to a second)
T = TypeVar("T")


class JobQueueUnavailable(SwapcastError):
    """Redis cannot be reached (the API answers 503; workers wait and retry)."""


def now() -> float:
    return time.time()


class JobQueue:
    """One connection pool; text in and out (``decode_responses``)."""

    def __init__(self, redis: RedisClient, *, claim_timeout_s: float = 30.0, prefix: str = PREFIX) -> None:
        self.redis = redis
        self.claim_timeout_ms = max(1, round(claim_timeout_s * 1000))
        self.prefix = prefix
        self._create = redis.register_script(scripts.CREATE)
        self._cancel = redis.register_script(scripts.CANCEL)
        self._lease = redis.register_script(scripts.LEASE)
        self._commit_split = redis.register_script(scripts.COMMIT_SPLIT)
        self._complete_chunk = redis.register_script(scripts.COMPLETE_CHUNK)
        self._finish = redis.register_script(scripts.FINISH)

    @classmethod
    def from_url(cls, url: str, *, claim_timeout_s: float = 30.0) -> JobQueue:
        """One Redis server or a Redis Cluster (see ``signaling.redis_client``): every key
        carries the ``{jobs}`` hash tag, so scripts, transactions and multi-stream reads stay
        in one slot. The socket timeout outlasts a blocking read (``next_task`` blocks <= 1 s)."""
        return cls(open_redis(url, max_connections=_MAX_CONNECTIONS, socket_timeout=10.0, decode_responses=True),
                   claim_timeout_s=claim_timeout_s)

    async def close(self) -> None:
        await self.redis.aclose()

    # -- keys -------------------------------------------------------------------------------

    def job_key(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def stream(self, priority: Priority) -> str:
        return f"{self.prefix}tasks:{priority}"

    @property
    def streams(self) -> list[str]:
        """The task streams, highest priority first."""
        return [self.stream(p) for p in PRIORITIES]

    @property
    def dead_letter(self) -> str:
        return f"{self.prefix}dead"

    def _idempotency_key(self, key: str, owner: str) -> str:
        """Keys are scoped to their owner: two users picking the same key get two jobs."""
        digest = hashlib.sha256(owner.encode() + b"\0" + key.encode()).hexdigest()
        return f"{self.prefix}idem:{digest}"

    def _index(self, owner: str | None) -> str:
        return f"{self.prefix}jobs" if owner is None else f"{self.prefix}jobs:owner:{owner}"

    # -- jobs (the API side) ------------------------------------------------------------------

    async def create(self, job: Job) -> tuple[Job, bool]:
        """Store a new job and enqueue its split. With an idempotency key already used, the
        earlier job is returned instead and nothing is stored: ``(job, created)``."""
        key = job.idempotency_key
        found = await self._call(
            self._create,
            [self.job_key(job.id), self._index(None), self.stream(job.priority),
             self._idempotency_key(key or "", job.owner), self._index(job.owner)],
            [job.id, job.created, IDEMPOTENCY_TTL_S, "1" if key else "0", *_pairs(job.to_fields())],
        )
        if found == job.id:
            return job, True
        existing = await self.get(found)
        if existing is None:  # the key outlived its job record (cannot happen unless deleted by hand)
            raise RuntimeError(f"idempotency key refers to a missing job {found}")
        return existing, False

    async def job_for_key(self, key: str, owner: str) -> Job | None:
        """The job ``owner``'s idempotency key already created, if any."""
        job_id = await self._run(self.redis.get(self._idempotency_key(key, owner)))
        return await self.get(job_id) if job_id else None

    async def get(self, job_id: str) -> Job | None:
        raw = await self._run(self.redis.hgetall(self.job_key(job_id)))
        return Job.from_fields(raw) if raw else None

    async def list(self, limit: int = 100, owner: str | None = None) -> list[Job]:
        """The newest jobs first: everyone's, or one ``owner``'s."""
        ids = await self._run(self.redis.zrevrange(self._index(owner), 0, limit - 1))
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hgetall(self.job_key(job_id))
            found = await self._run(pipe.execute())
        return [Job.from_fields(raw) for raw in found if raw]

    async def cancel(self, job_id: str) -> str | None:
        """Mark a running job cancelled; returns its state afterwards (None: unknown)."""
        return await self._call(self._cancel, [self.job_key(job_id)], [now()])

    async def chunk(self, job_id: str, index: int) -> Chunk:
        text = await self._run(self.redis.hget(f"{self.job_key(job_id)}:chunks", str(index)))
        if text is None:
            raise KeyError(f"job {job_id} has no chunk {index}")
        return Chunk.from_json(text)

    async def chunks(self, job_id: str) -> list[Chunk]:
        raw = await self._run(self.redis.hgetall(f"{self.job_key(job_id)}:chunks"))
        return sorted((Chunk.from_json(text) for text in raw.values()), key=lambda c: c.index)

    async def dead_letters(self, count: int = 100) -> list[dict[str, str]]:
        """The newest dead-letter entries (job, task, error, attempts, time)."""
        entries = await self._run(self.redis.xrevrange(self.dead_letter, count=count))
        return [fields for _, fields in entries]

    # -- tasks (the worker side) ----------------------------------------------------------------

    async def ensure_groups(self) -> None:
        """Create the consumer group of every stream (from the start of the stream, so tasks
        added before the group existed are served). Also after Redis lost its data."""
        for stream in self.streams:
            try:
                await self._run(self.redis.xgroup_create(stream, GROUP, id="0", mkstream=True))
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise

    async def next_task(self, consumer: str, block_ms: int = 1000) -> Task | None:
        """The next task for ``consumer``, highest priority first; within a priority an
        abandoned one (idle for ``claim_timeout_s``) before a new one. Waits up to ``block_ms``
        when there is none."""
        for stream in self.streams:
            entry = await self._reclaim(stream, consumer)
            if entry is None:
                read = await self._run(self.redis.xreadgroup(GROUP, consumer, {stream: ">"}, count=1))
                entry = read[0][1][0] if read else None
            if entry is not None:
                return await self._task(stream, entry)
        read = await self._run(
            self.redis.xreadgroup(GROUP, consumer, {s: ">" for s in self.streams}, count=1, block=block_ms)
        )
        if not read:
            return None
        by_stream = {stream: entries for stream, entries in read}
        held = [(s, e) for s in self.streams for e in by_stream.get(s, [])]
        for stream, (entry_id, _) in held[1:]:  # arrived together: keep the most urgent, give back the rest
            await self._call(self._lease, [stream], [GROUP, consumer, entry_id, _RELEASE_IDLE_MS])
        return await self._task(held[0][0], held[0][1])

    async def _reclaim(self, stream: str, consumer: str) -> tuple[str, dict[str, str] | None] | None:
        """Take over one abandoned entry of ``stream``. XAUTOCLAIM looks at a bounded part of
        the pending list per call, so the scan follows its cursor through the whole list."""
        cursor = "0-0"
        while True:
            cursor, claimed, _ = await self._run(
                self.redis.xautoclaim(stream, GROUP, consumer, self.claim_timeout_ms, cursor, count=1)
            )
            if claimed:
                return claimed[0]
            if cursor == "0-0":
                return None

    async def _task(self, stream: str, entry: tuple[str, dict[str, str] | None]) -> Task | None:
        entry_id, fields = entry
        if not fields or "job" not in fields or fields.get("kind") not in ("split", "chunk", "finalise", "notify"):
            await self.ack(Task(stream, entry_id, "", "split"))  # not ours (or deleted): drop it
            return None
        index = fields.get("index")
        return Task(stream, entry_id, fields["job"], fields["kind"], int(index) if index is not None else None)  # type: ignore[arg-type]

    async def renew(self, task: Task, consumer: str) -> bool:
        """Extend the lease; False when the task was reclaimed by another worker."""
        return bool(await self._call(self._lease, [task.stream], [GROUP, consumer, task.entry_id, 0]))

    async def release(self, task: Task, consumer: str) -> None:
        """Give a task back for another attempt at once (this worker stops or it failed)."""
        await self._call(self._lease, [task.stream], [GROUP, consumer, task.entry_id, _RELEASE_IDLE_MS])

    async def ack(self, task: Task) -> None:
        """Drop a task that needs no work (its job ended)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.xack(task.stream, GROUP, task.entry_id)
            pipe.xdel(task.stream, task.entry_id)
            await self._run(pipe.execute())

    async def start_attempt(self, task: Task) -> int:
        """Count an attempt at a task; returns the attempt number (1 = first)."""
        return int(await self._run(self.redis.hincrby(self.job_key(task.job_id), f"attempts:{task.name}", 1)))

    async def forget_attempt(self, task: Task) -> None:
        """Uncount an attempt that was given back unfinished because its worker stopped."""
        await self._run(self.redis.hincrby(self.job_key(task.job_id), f"attempts:{task.name}", -1))

    async def attempts(self, job_id: str) -> dict[str, int]:
        """Attempts per task name of a job (``{"split": 1, "chunk:0": 2, ...}``)."""
        raw = await self._run(self.redis.hgetall(self.job_key(job_id)))
        return {name.removeprefix("attempts:"): int(v) for name, v in raw.items() if name.startswith("attempts:")}

    async def record_error(self, task: Task, error: str) -> None:
        await self._run(self.redis.hset(self.job_key(task.job_id), f"last_error:{task.name}", error))

    async def last_error(self, task: Task) -> str | None:
        return await self._run(self.redis.hget(self.job_key(task.job_id), f"last_error:{task.name}"))

    async def commit_split(
        self, task: Task, chunks: Sequence[Chunk], *, frames: int, duration_s: float, frame_s: float, has_audio: bool
    ) -> bool:
        """Record the split and enqueue the chunks; False when another run already did (or
        the job ended), in which case this run's files are not used."""
        job = self.job_key(task.job_id)
        result = await self._call(
            self._commit_split,
            [job, f"{job}:chunks", task.stream],
            [GROUP, task.entry_id, now(), frames, duration_s, frame_s, "1" if has_audio else "0",
             *(c.to_json() for c in chunks)],
        )
        return result == "ok"

    async def complete_chunk(self, task: Task) -> str:
        """Count a rendered chunk ('last' when it was the last one: finalisation is queued)."""
        job = self.job_key(task.job_id)
        return await self._call(
            self._complete_chunk, [job, f"{job}:done", task.stream], [GROUP, task.entry_id, task.index, now()]
        )

    async def complete(self, task: Task, output_path: str) -> bool:
        """Mark the job completed with its output; False when it had ended meanwhile."""
        return await self._end(task, "completed", output_path=output_path)

    async def fail(self, task: Task, error: str, attempts: int) -> bool:
        """Send the task to the dead-letter stream and fail its job with ``error``."""
        return await self._end(task, "failed", error=error, attempts=attempts)

    async def _end(self, task: Task, state: str, *, error: str = "", output_path: str = "", attempts: int = 0) -> bool:
        result = await self._call(
            self._finish,
            [self.job_key(task.job_id), task.stream, self.dead_letter],
            [GROUP, task.entry_id, state, now(), error, output_path, task.name, attempts, DEAD_LETTER_CAP],
        )
        return bool(result)

    async def set_webhook_status(self, job_id: str, status: str) -> None:
        await self._run(self.redis.hset(self.job_key(job_id), mapping={"webhook_status": status, "updated": now()}))

    async def job_state(self, job_id: str) -> str | None:
        return await self._run(self.redis.hget(self.job_key(job_id), "state"))

    # -- plumbing -----------------------------------------------------------------------------

    async def _call(self, script: AsyncScript, keys: list[str], args: Iterable[object]) -> Any:
        return await self._run(script(keys=keys, args=list(args)))

    @staticmethod
    async def _run(awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except UNREACHABLE as exc:
            raise JobQueueUnavailable(f"job queue (Redis) unavailable: {exc or type(exc).__name__}") from exc


def lost_groups(exc: ResponseError) -> bool:
    """Whether Redis refused because the streams or their group are gone (data lost): the
    group must be created again. A blocked read is told so with ``UNBLOCKED``."""
    return str(exc).startswith(("NOGROUP", "UNBLOCKED"))


def _pairs(fields: dict[str, str]) -> list[str]:
    return [item for pair in fields.items() for item in pair]
