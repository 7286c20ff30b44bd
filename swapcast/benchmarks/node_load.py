"""How loaded a node is while a benchmark drives it, beyond its CPU seconds: busy time per
core, how late its event loop answers, how much of the time one of its threads holds the
GIL; and ``ReplicaServers``, N node processes on one machine behind the gateway.

A node that holds the GIL most of the time cannot use more cores however many sessions it
runs: its per-stage times and event-loop lag grow while cores stay idle. Several node
processes per machine (replicas behind ``swapcast gateway``, which already spreads sessions
over the nodes in its registry) each have their own GIL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np

from swapcast.benchmarks.proc import cpu_seconds, rss_mb
from swapcast.local_cluster import Cluster, token

GIL_SAMPLE_RATE = 100  # py-spy samples per second


def core_busy_seconds() -> list[float]:
    """CPU seconds each core of the machine has been busy (``/proc/stat`` cpuN lines)."""
    ticks = os.sysconf("SC_CLK_TCK")
    busy = []
    for line in Path("/proc/stat").read_text().splitlines():
        name, *values = line.split()
        if name.startswith("cpu") and name != "cpu":
            numbers = [int(v) for v in values[:8]]
            busy.append((sum(numbers) - numbers[3] - numbers[4]) / ticks)  # all but idle and iowait
    return busy


class LoopLagProbe:
    """Asks each node's ``/healthz`` every ``interval_s`` from a thread of its own and keeps
    the answer times: a handler that does nothing, so the time is the node's event loop
    getting to it (plus loopback HTTP, ~1 ms)."""

    def __init__(self, urls: list[str], interval_s: float = 0.2) -> None:
        self.urls, self.interval_s = urls, interval_s
        self.samples_ms: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-loop-lag", daemon=True)

    def __enter__(self) -> LoopLagProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _run(self) -> None:
        index = 0
        while not self._stop.wait(self.interval_s):
            url = self.urls[index % len(self.urls)] + "/healthz"
            index += 1
            started = time.monotonic()
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    response.read()
            except OSError:
                continue
            self.samples_ms.append((time.monotonic() - started) * 1000.0)

    def summary(self) -> dict[str, float | None]:
        values = self.samples_ms
        return {key: float(np.percentile(values, q)) if values else None for key, q in (("p50_ms", 50), ("p99_ms", 99))}


def py_spy() -> str | None:
    """The py-spy binary (``pip install py-spy``), next to this Python or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class GilSampler:
    """Share of wall time one of a process's threads held the GIL, by py-spy (``--gil``:
    only samples taken while a thread holds it are kept). Sampling without stopping the
    process (``--nonblocking``); on a saturated machine py-spy itself can miss ticks, which
    reads as less GIL."""

    def __init__(self, pids: list[int], seconds: float) -> None:
        binary = py_spy()
        if binary is None:
            raise RuntimeError("--gil needs py-spy: pip install py-spy")
        self.seconds = max(1, int(seconds))
        self._workdir = Path(tempfile.mkdtemp(prefix="swapcast-gil-"))
        self._runs = [(pid, self._workdir / f"{pid}.txt", subprocess.Popen(
            [binary, "record", "--gil", "--nonblocking", "-r", str(GIL_SAMPLE_RATE), "-d", str(self.seconds),
             "-p", str(pid), "-f", "raw", "-o", str(self._workdir / f"{pid}.txt")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)) for pid in pids]

    def held(self) -> list[float | None]:
        """Per process: GIL-held samples / samples due; None where py-spy gave nothing."""
        shares: list[float | None] = []
        for _, path, process in self._runs:
            try:
                process.wait(self.seconds + 20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)
            try:
                samples = sum(int(line.rsplit(" ", 1)[1]) for line in path.read_text().splitlines() if line.strip())
            except (OSError, ValueError, IndexError):
                shares.append(None)
                continue
            shares.append(min(1.0, samples / (GIL_SAMPLE_RATE * self.seconds)))
        shutil.rmtree(self._workdir, ignore_errors=True)
        return shares


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds per OS thread name of a process (``/proc/<pid>/task/*``)."""
    ticks = os.sysconf("SC_CLK_TCK")
    names: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1: stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        names[name] = names.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return names


class ReplicaServers:
    """``processes`` nodes (``swapcast serve --redis``) on this machine behind ``swapcast
    gateway``, their registry a loopback ``redis-server``: what a deployment with several
    node replicas per machine (or per GPU) runs. Clients talk to the gateway as to one node;
    each session's media goes straight to the node the gateway placed it on. The same face
    and thread settings as a single node, from the same config file."""

    def __init__(self, config_path: Path, sessions: int, workdir: Path, processes: int, runner_threads: int = 0) -> None:
        (workdir / "cluster").mkdir(parents=True, exist_ok=True)
        # the config file's runner threads, not the local cluster's 1 (its environment wins over the file)
        self.cluster = Cluster(nodes_count=processes, capacity=sessions + 1, workdir=workdir / "cluster",
                               env={"SWAPCAST_CONFIG": str(config_path), "SWAPCAST_ENGINE__RUNNER_THREADS": str(runner_threads)})
        self.token = token("bench", role="admin")
        self.base_url = ""
        self._peak_rss_mb = 0.0

    def start(self) -> None:
        self.cluster.start()  # blocks until the gateway and every node are ready
        self.base_url = self.cluster.gateway.url

    @property
    def node_urls(self) -> list[str]:
        return [node.url for node in self.cluster.nodes.values()]

    @property
    def node_pids(self) -> list[int]:
        return [node.popen.pid for node in self.cluster.nodes.values()]

    def _pids(self) -> list[int]:
        return [self.cluster.gateway.popen.pid, *self.node_pids]

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(pid) for pid in self._pids())

    def thread_cpu_seconds(self) -> dict[str, float]:
        names: dict[str, float] = {"gateway": cpu_seconds(self.cluster.gateway.popen.pid)}
        for pid in self.node_pids:
            for name, seconds in thread_cpu_seconds(pid).items():
                names[name] = names.get(name, 0.0) + seconds
        return names

    def memory_mb(self) -> dict[str, float]:
        rss = sum(rss_mb(pid) for pid in self._pids())
        self._peak_rss_mb = max(self._peak_rss_mb, rss)
        return {"rss_mb": rss, "peak_rss_mb": self._peak_rss_mb}

    def log_tail(self, lines: int = 30) -> str:
        return self.cluster.logs()

    def stop(self) -> None:
        self.cluster.close()
