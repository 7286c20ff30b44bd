"""``swapcast worker``: render offline jobs from the Redis queue (``streamer.jobs.worker``).

Run as many as there are machines (or GPUs) to share; they only need the same Redis and
the same job storage (``jobs.storage_dir``, a shared folder, or an S3 bucket with
``jobs.storage: s3``). The storage is checked before the engine loads: one that is missing,
unreachable or refuses the credentials ends the command at once with the reason.
SIGINT/SIGTERM hand the chunk in progress back to the queue and exit; a worker killed
outright loses nothing either: its chunk is reclaimed by another worker after
``jobs.claim_timeout_s``."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
from typing import TYPE_CHECKING

from gpu import threads
from gpu.engine import FaceEngine
from gpu.errors import SwapcastError
from swapcast.commands.common import add_engine_flags, config_from_args
from swapcast.config import Config

if TYPE_CHECKING:
    from signaling.jobs import JobSettings
    from signaling.jobs.storage import JobStorage


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "worker",
        help="render offline video jobs from the Redis queue",
        description="Take split, chunk and finalise tasks of offline jobs from Redis Streams and render them "
        "with the face engine. Job files live in jobs.storage_dir, which every worker and API node must share, "
        "or in an S3 bucket (jobs.storage: s3).",
    )
    parser.add_argument("--redis", metavar="URL", help="the job queue's Redis (default: cluster.redis_url)")
    # also accepted after the command; SUPPRESS keeps `swapcast --config F worker` working
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="YAML config file")
    parser.add_argument("--name", help="this worker's consumer name (default: <hostname>-<pid>)")
    add_engine_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if not config.cluster.redis_url:
        raise SwapcastError("a worker needs the job queue's Redis: give --redis URL (or cluster.redis_url in the config)")
    if config.swap.face_selection == "reference":
        raise SwapcastError("offline jobs cannot use swap.face_selection 'reference'; use 'all' or 'largest'")
    from signaling.jobs import JobSettings

    settings = JobSettings.from_config(config.jobs, config.server.data_dir)
    storage = _checked_storage(settings)
    name = args.name or f"{socket.gethostname()}-{os.getpid()}"
    threads.apply(config.threads.budget(config.engine.runner_threads))  # before the engine loads, as in `serve`
    engine = FaceEngine(config.engine.settings())
    try:
        asyncio.run(_serve(config, config.cluster.redis_url, name, engine, settings, storage))
    finally:
        engine.close()
    return 0


def _checked_storage(settings: JobSettings) -> JobStorage:
    """The job storage, if it answers: otherwise its reason, as this command's error."""
    from signaling.jobs.storage import JobStorageError

    try:
        storage = settings.open_storage()
        storage.check()
    except JobStorageError as exc:
        raise SwapcastError(str(exc)) from None
    return storage


async def _serve(
    config: Config, url: str, name: str, engine: FaceEngine, settings: JobSettings, storage: JobStorage
) -> None:
    from signaling.jobs import JobQueue
    from signaling.push_policy import PushPolicy
    from signaling.registry import RedisRegistry
    from streamer.jobs.render import Encoding
    from streamer.jobs.sources import SourceFaces
    from streamer.jobs.worker import Worker, WorkerSettings

    try:
        queue = JobQueue.from_url(url, claim_timeout_s=settings.claim_timeout_s)
        registry = RedisRegistry(url, ttl_s=config.cluster.node_ttl_s)
    except ValueError as exc:
        raise SwapcastError(f"--redis {url}: {exc}") from None
    encode = config.encode
    worker = Worker(
        queue, engine, SourceFaces(engine, registry, storage),
        WorkerSettings(jobs=settings, swap=config.swap.options(), name=name,
                       push_policy=PushPolicy.from_lists(config.push.allowed_hosts, config.push.allowed_networks),
                       encoding=Encoding(codec=encode.codec, preset=encode.preset, crf=encode.crf),
                       provenance=config.provenance.settings()),
        storage,
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, worker.stop)
    print(f"swapcast worker {name}: rendering jobs from {url}, storage {storage.where} (Ctrl+C stops)", flush=True)
    print(config.provenance.settings().describe(), flush=True)
    try:
        await worker.run()
    finally:
        await queue.close()
        await registry.close()
