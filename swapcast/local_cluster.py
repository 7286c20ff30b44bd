"""A real cluster on loopback: a redis-server, a gateway process and node processes
(``swapcast serve --redis``), started and stopped like an operator would, SIGKILL included.
Used by the cluster tests and by ``swapcast bench cluster``; every wait is bounded.

``RedisServer`` runs the Debian ``redis-server`` on a free loopback port with no
persistence, so a restart comes back empty, like a lost Redis."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RedisServer:
    def __init__(self, port: int | None = None) -> None:
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not Path(self.binary).exists():
            raise RuntimeError("redis-server is not installed (scripts/bootstrap installs the Debian package)")
        self.port = port or free_port()
        self.workdir = Path(tempfile.mkdtemp(prefix="swapcast-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.workdir), "--protected-mode", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode} (port {self.port} taken?)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port), timeout=2) as sock:
            sock.sendall(b"FLUSHALL\r\n")
            sock.recv(16)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

STARTUP_TIMEOUT_S = 90.0  # a node loads its face engine first (a few seconds, more on a busy machine)


CLUSTER_SECRET = "swapcast-local-cluster-" + "k" * 32  # the HS256 secret its gateway and nodes share


def token(subject: str = "tester", role: str = "user") -> str:
    """A token for the local cluster's API."""
    from signaling.auth import mint_token

    return mint_token(CLUSTER_SECRET, subject, role=role)


def cluster_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
    env.update({
        "SWAPCAST_AUTH__JWT_SECRET": CLUSTER_SECRET,
        "SWAPCAST_AUTH__TRUSTED_PROXIES": "[127.0.0.1]",  # the gateway, as seen by the nodes
        "SWAPCAST_SERVER__DATA_DIR": str(data_dir),  # nodes share stream keys like a shared volume
        "SWAPCAST_WEBRTC__HOST_ADDRESSES": "[127.0.0.1]",
        "SWAPCAST_CLUSTER__NODE_TTL_S": "2.5",  # 8 heartbeats: a node busy placing many sessions on a loaded host stays alive
        "SWAPCAST_CLUSTER__HEARTBEAT_S": "0.3",
        "SWAPCAST_ENGINE__RUNNER_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
        **extra,
    })
    return env


@dataclass
class Process:
    name: str
    args: list[str]
    env: dict[str, str]
    port: int
    log_path: Path
    popen: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Process:
        log = self.log_path.open("ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "swapcast.cli", *self.args], env=self.env,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        )
        return self

    def wait_ready(self, path: str = "/readyz", timeout: float = STARTUP_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen is None or self.popen.poll() is not None:
                raise RuntimeError(f"{self.name} exited early:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url + path, timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready within {timeout} s:\n{self.tail()}")

    def kill(self) -> None:
        """SIGKILL: no goodbye to the registry, connections just go silent."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait(timeout=10)

    def stop(self) -> None:
        if self.popen is not None and self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class Cluster:
    nodes_count: int = 3
    capacity: int = 20
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="swapcast-cluster-")))
    redis: RedisServer | None = None
    gateway: Process | None = None
    gateway_rtmp_port: int = 0
    nodes: dict[str, Process] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # more environment for every process (SWAPCAST_CONFIG, …)

    def start(self) -> Cluster:
        self.redis = RedisServer().start()
        env = self._env()
        port, self.gateway_rtmp_port = free_port(), free_port()
        self.gateway = Process("gateway", ["gateway", "--redis", self.redis.url, "--host", "127.0.0.1",
                                           "--port", str(port), "--rtmp-port", str(self.gateway_rtmp_port)],
                               env, port, self.workdir / "gateway.log").start()
        for index in range(1, self.nodes_count + 1):
            self.add_node(f"node-{index}", env, wait=False)
        for process in self.nodes.values():
            process.wait_ready()
        self.gateway.wait_ready()
        return self

    def add_node(self, node_id: str, env: dict[str, str] | None = None, wait: bool = True) -> Process:
        env = env or self._env()
        port = free_port()
        process = Process(node_id, ["serve", "--redis", self.redis.url, "--host", "127.0.0.1", "--port", str(port),
                                    "--rtmp-port", "0", "--advertise", f"127.0.0.1:{port}", "--node-id", node_id],
                          env, port, self.workdir / f"{node_id}.log").start()
        self.nodes[node_id] = process
        if wait:
            process.wait_ready()
        return process

    def _env(self) -> dict[str, str]:
        return cluster_env(self.workdir / "data", SWAPCAST_CLUSTER__CAPACITY=str(self.capacity), **self.env)

    def api(self, method: str, path: str, body: object | None = None, timeout: float = 10.0,
            subject: str = "tester", role: str = "admin") -> tuple[int, object]:
        """A JSON request to the gateway as ``subject`` (an admin by default): (status, body)."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Authorization": f"Bearer {token(subject, role)}"}
        if data:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.gateway.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw)
            except ValueError:
                return exc.code, raw.decode(errors="replace")

    def loads(self) -> dict[str, int]:
        status, nodes = self.api("GET", "/api/v1/nodes")
        assert status == 200, nodes
        return {node["id"]: node["load"] for node in nodes}

    def close(self) -> None:
        for process in [*self.nodes.values(), *([self.gateway] if self.gateway else [])]:
            process.stop()
        if self.redis is not None:
            self.redis.close()

    def logs(self) -> str:
        parts = [f"--- {p.name} ---\n{p.tail()}" for p in [*([self.gateway] if self.gateway else []), *self.nodes.values()]]
        return "\n".join(parts)
