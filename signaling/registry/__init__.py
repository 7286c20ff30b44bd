"""Session registry: ``Registry`` (the contract), ``MemoryRegistry`` (embedded single node),
``RedisRegistry`` (cluster), and ``open_registry(url)`` to pick one from the config."""

from signaling.registry.base import (
    FaceLimitError,
    FaceRecord,
    NoCapacityError,
    NodeInfo,
    Registry,
    RegistryError,
    RegistryUnavailable,
    SessionRecord,
    UnknownSessionError,
)
from signaling.registry.memory import MemoryRegistry
from signaling.registry.redis_store import RedisRegistry


def open_registry(url: str | None, *, ttl_s: float) -> Registry:
    """The registry the config names: Redis at ``url``, or the in-process one when there is
    none (the embedded single node). ``redis://host:port/0`` (``rediss://`` for TLS) is one
    Redis server; ``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://``) is a
    Redis Cluster, found from any of the nodes named (credentials and ``?options`` as in a
    ``redis://`` URL). Connects lazily: a Redis that is down shows up as
    ``RegistryUnavailable`` on first use, not here."""
    if url is None:
        return MemoryRegistry(ttl_s=ttl_s)
    return RedisRegistry(url, ttl_s=ttl_s)


__all__ = [
    "FaceLimitError",
    "FaceRecord",
    "MemoryRegistry",
    "NoCapacityError",
    "NodeInfo",
    "RedisRegistry",
    "Registry",
    "RegistryError",
    "RegistryUnavailable",
    "SessionRecord",
    "UnknownSessionError",
    "open_registry",
]
