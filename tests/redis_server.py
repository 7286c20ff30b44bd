"""Tests import the real-Redis helpers from here: the single server lives in the package
(``swapcast bench cluster`` uses it too), the Redis Cluster only here."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from swapcast.local_cluster import RedisServer, free_port

__all__ = ["RedisClusterServer", "RedisServer", "free_port"]


def _free_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


class RedisClusterServer:
    """A real Redis Cluster on free loopback ports: ``masters`` redis-servers and
    ``replicas`` per master, made one with ``redis-cli --cluster create``; no persistence,
    every wait bounded. Each server's cluster bus gets its own free port (``--cluster-port``):
    the default, port + 10000, may be taken or past 65535. With replicas, a dead master is
    noticed within a second and any replica may take over, so a test sees a failover soon."""

    def __init__(self, masters: int = 3, replicas: int = 0) -> None:
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.cli = shutil.which("redis-cli") or "/usr/bin/redis-cli"
        for tool in (self.binary, self.cli):
            if not Path(tool).exists():
                raise RuntimeError(f"{tool} is not installed (scripts/bootstrap installs the Debian redis-server)")
        self.replicas = replicas
        count = masters * (1 + replicas)
        ports = _free_ports(2 * count)
        self.ports, self.bus_ports = ports[:count], ports[count:]
        self.workdir = Path(tempfile.mkdtemp(prefix="swapcast-redis-cluster-"))
        self.processes: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def client(self, port: int) -> redis.Redis:
        return redis.Redis(port=port, socket_connect_timeout=0.5, socket_timeout=5)

    def start(self, timeout: float = 20.0) -> RedisClusterServer:
        deadline = time.monotonic() + timeout
        failover = ["--cluster-node-timeout", "1000", "--cluster-replica-validity-factor", "0",
                    "--repl-diskless-sync-delay", "0"] if self.replicas else []
        for port, bus_port in zip(self.ports, self.bus_ports, strict=True):
            self.processes[port] = subprocess.Popen(
                [self.binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                 "--dir", str(self.workdir), "--protected-mode", "no", "--cluster-enabled", "yes",
                 "--cluster-config-file", f"nodes-{port}.conf", "--cluster-port", str(bus_port), *failover],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
            )
        self._wait_all(deadline, "to answer", lambda client: client.ping())
        created = subprocess.run(
            [self.cli, "--cluster", "create", *(f"127.0.0.1:{port}" for port in self.ports),
             "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            check=False, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            timeout=max(deadline - time.monotonic(), 1),
        )
        if created.returncode:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout.decode(errors='replace')[-2000:]}")
        self._wait_all(deadline, "to report cluster_state:ok and its replication up",
                       lambda client: client.cluster("info")["cluster_state"] == "ok"
                       and client.info("replication").get("master_link_status", "up") == "up")
        return self

    def _wait_all(self, deadline: float, what: str, ready: Callable[[redis.Redis], bool]) -> None:
        for port in self.ports:
            with self.client(port) as client:
                while not self._ready(port, client, ready):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"timed out waiting for the redis-server on port {port} {what}")
                    time.sleep(0.05)

    def _ready(self, port: int, client: redis.Redis, ready: Callable[[redis.Redis], bool]) -> bool:
        if self.processes[port].poll() is not None:
            raise RuntimeError(f"the redis-server on port {port} exited (port taken?)")
        try:
            return ready(client)
        except redis.RedisError:
            return False

    def kill_master_of(self, key: str) -> int:
        """SIGKILL the master that holds ``key``'s slot, once a replica has all its writes
        (so the failover loses none); its port."""
        with self.client(self.ports[0]) as client:
            slot = client.cluster("keyslot", key)
            port = next(master[1] for start, end, master, *_ in client.cluster("slots") if start <= slot <= end)
        with self.client(port) as master:
            if master.execute_command("WAIT", 1, 5000) < 1:
                raise RuntimeError(f"no replica of port {port} caught up within 5 s")
        self.processes[port].kill()
        self.processes[port].wait(timeout=10)
        return port

    def flush(self) -> None:
        for port in self.ports:
            with self.client(port) as client:
                if client.info("replication")["role"] == "master":
                    client.flushall()

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=10)
        self.processes = {}
        shutil.rmtree(self.workdir, ignore_errors=True)
