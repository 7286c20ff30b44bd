"""One way to open Redis for the whole control plane: a single server
(``redis://host:port/0``, ``rediss://`` for TLS) or a Redis Cluster
(``redis+cluster://host:port[,host:port...]``, ``rediss+cluster://``), found from any of the
nodes named, with credentials and ``?options`` as in a ``redis://`` URL.

The registry and the job queue both keep every key under one hash tag, so in a cluster all
of their keys, scripts and transactions live in one slot; they only need the right client.
Both kinds fail fast alike: a connect timeout of about a second, one immediate retry (on a
cluster, after refreshing the topology).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ClusterError, RedisClusterException
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

# What "Redis cannot be reached" looks like from redis-py and the socket underneath; a
# cluster adds CLUSTERDOWN and redirections without end (ClusterError), and no reachable
# node or an uncovered slot (RedisClusterException).
UNREACHABLE = (RedisConnectionError, RedisTimeoutError, TimeoutError, OSError, ClusterError, RedisClusterException)
CONNECT_TIMEOUT_S = 1.0
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}  # and the scheme of one of its nodes

RedisClient = aioredis.Redis | RedisCluster


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0] in CLUSTER_SCHEMES


def open_redis(url: str, *, max_connections: int, socket_timeout: float, decode_responses: bool = False,
               pool_timeout: float | None = None) -> RedisClient:
    """A client for one Redis server, or for a Redis Cluster when the URL says so.

    One server: a blocking pool of ``max_connections`` (a burst waits up to
    ``pool_timeout`` for a connection; a pooled connection Redis dropped reconnects
    transparently). A cluster: pools of ``max_connections`` per node, which raise rather
    than wait when full (callers bound their own concurrency)."""
    options: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT_S, "socket_timeout": socket_timeout,
        "retry": Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        "decode_responses": decode_responses,
    }
    if is_cluster_url(url):
        return _cluster(url, max_connections, options)
    pool = aioredis.BlockingConnectionPool.from_url(
        url, max_connections=max_connections, timeout=pool_timeout if pool_timeout is not None else socket_timeout,
        **options)
    return aioredis.Redis(connection_pool=pool)


def _cluster(url: str, max_connections: int, options: dict[str, Any]) -> RedisCluster:
    """The cluster of ``redis+cluster://[user:password@]host:port[,host:port...][/0][?options]``,
    the hosts being some of its nodes. redis-py parses the credentials, TLS and options
    from the URL of the first one."""
    scheme, _, rest = url.partition("://")
    netloc = re.sub(r"[/?#].*", "", rest, flags=re.DOTALL)
    userinfo, at, hosts = netloc.rpartition("@")
    addresses = [urlsplit("//" + host) for host in hosts.split(",")]
    if not all(address.hostname for address in addresses):
        raise ValueError(f"a Redis Cluster URL names its nodes: {scheme}://host:port[,host:port...], not {hosts!r}")
    return RedisCluster.from_url(
        f"{CLUSTER_SCHEMES[scheme]}://{userinfo}{at}{hosts.split(',')[0]}{rest[len(netloc):]}",
        startup_nodes=[ClusterNode(address.hostname, address.port or 6379) for address in addresses],
        max_connections=max_connections,
        require_full_coverage=False,  # only the one slot of our hash tag matters
        # a MOVED just re-points the slot: a full refresh every few (the default) closes
        # every connection, under the calls still using them (redis-py 8.1), and calls made
        # before the client knows the slots go anywhere, so a burst at start-up failed
        reinitialize_steps=0,
        **options,
    )
