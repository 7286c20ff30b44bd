"""Session registry: ``Registry`` (the contract), ``MemoryRegistry`` (embedded single node),
``RedisRegistry`` (cluster), and ``open_registry(url)`` to pick one from the config."""

from signaling.registry.base import (
    FaceRecord,
    NoCapacityError,
    NodeInfo,
    Registry,
    RegistryError,
    RegistryUnavailable,
    SessionRecord,
    UnknownSessionError,
)

__all__ = [
    "FaceRecord", "NoCapacityError", "NodeInfo", "Registry", "RegistryError", "RegistryUnavailable",
    "SessionRecord", "UnknownSessionError",
]
