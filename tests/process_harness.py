"""The real servers the tests start (coturn's ``turnserver``, ``swapcast serve``,
``tritonserver``), started and stopped one way: the output to a log file, a readiness probe
polled until it answers or the process dies or time is up (then the log's tail is the
error), SIGTERM with a grace period before SIGKILL, and the log's tail printed at teardown
when it shows a traceback (pytest shows it with the failing test)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

TAIL_CHARS = 3000


@dataclass
class ManagedProcess:
    """A server process whose stdout and stderr go to ``log_path``. With ``own_group`` it
    leads a process group of its own and signals reach its children too (tritonserver's
    backend stubs)."""

    name: str
    process: subprocess.Popen
    log_path: Path
    own_group: bool = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def tail(self, chars: int = TAIL_CHARS) -> str:
        return self.log()[-chars:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_until(self, ready: Callable[[], bool], timeout_s: float, interval_s: float = 0.2) -> None:
        """Poll ``ready`` until it is true; when the process exits first or ``timeout_s``
        passes, stop it and raise with the log's tail."""
        deadline = time.monotonic() + timeout_s
        while not ready():
            if not self.alive():
                raise AssertionError(f"{self.name} exited ({self.process.returncode}) before it was ready:\n{self.tail()}")
            if time.monotonic() > deadline:
                tail = self.tail()
                self.stop()
                raise AssertionError(f"{self.name} was not ready within {timeout_s:g} s:\n{tail}")
            time.sleep(interval_s)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # it exited in between
            if self.own_group:
                os.killpg(self.process.pid, signum)
            else:
                self.process.send_signal(signum)

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL (as a crash would) and reap it, so its ports are free again."""
        if self.alive():
            self._signal(signal.SIGKILL)
        self.process.wait(timeout_s)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM; SIGKILL when it has not exited ``grace_s`` later."""
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self.kill()
        else:
            self.process.wait()


def start_process(name: str, command: Sequence[str], log_path: Path, *, env: Mapping[str, str] | None = None,
                  own_group: bool = False) -> ManagedProcess:
    """``command`` started with its output appended to ``log_path`` and no stdin."""
    with open(log_path, "ab") as log:  # the process writes to its own copy of the descriptor
        process = subprocess.Popen(list(command), env=None if env is None else dict(env), stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=own_group)
    return ManagedProcess(name, process, log_path, own_group)


@contextlib.contextmanager
def running(name: str, command: Sequence[str], log_path: Path, ready: Callable[[], bool], *, timeout_s: float,
            env: Mapping[str, str] | None = None, grace_s: float = 10.0,
            own_group: bool = False) -> Iterator[ManagedProcess]:
    """The process, ready, for the block; stopped after it (its log's tail printed when it
    shows a traceback)."""
    managed = start_process(name, command, log_path, env=env, own_group=own_group)
    try:
        managed.wait_until(ready, timeout_s)
        yield managed
    finally:
        managed.stop(grace_s)
        tail = managed.tail()
        if "Traceback" in tail:
            print(f"--- {name} log (tail) ---\n{tail}")


def http_ok(url: str, **urlopen_options) -> Callable[[], bool]:
    """A readiness probe: ``GET url`` answers 200."""
    def probe() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2, **urlopen_options) as answer:
                return answer.status == 200
        except OSError:
            return False
    return probe


def free_tcp_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]
