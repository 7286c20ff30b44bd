"""The node under fuzz: a real ``swapcast serve`` process on 127.0.0.1 (with a Redis of its
own when ``redis-server`` is installed, so the job routes are live too), a raw HTTP/1.1
client that can send any bytes, and the probes that say whether the node is still well:
``/healthz``, thread count and RSS from /proc, and the tracebacks in its log."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from signaling.auth import mint_token
from swapcast.benchmarks import proc
from swapcast.local_cluster import RedisServer, free_port

SECRET = "swapcast-fuzz-" + "f" * 40  # the HS256 secret of the fuzzed node (the fuzzer signs tokens with it)
STARTUP_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 30.0  # longest wait for one answer; past it the request counts as a hang
MAX_ANSWER_BYTES = 4 * 1024 * 1024
MISFRAMED_WAIT_S = 2.0
# log lines that mean something escaped its handler or a thread died
_BAD_LOG = re.compile(r"Traceback \(most recent call last\)|Exception in thread|Task exception was never retrieved"
                      r"|Unhandled exception|^(ERROR|CRITICAL) |\bFatal Python error\b", re.MULTILINE)


@dataclass(frozen=True)
class Answer:
    status: int  # 0: no status line came back (closed, reset, hang, garbage)
    head: bytes
    body: bytes
    error: str = ""  # why there is no status (timeout, reset, ...)
    hung: bool = False  # nothing at all within the timeout


def token(subject: str, role: str = "user", **claims: object) -> str:
    return mint_token(SECRET, subject, role=role) if not claims else _signed(subject, role, claims)


def _signed(subject: str, role: str, claims: dict) -> str:
    import jwt

    now = int(time.time())
    payload = {"sub": subject, "role": role, "iat": now, "exp": now + 3600, **claims}
    return jwt.encode(payload, SECRET, algorithm="HS256")


class FuzzNode:
    """``swapcast serve`` with rate limits out of the way (the fuzzer is one address with
    a handful of tokens) and short RTMP stalls; everything under ``workdir``."""

    def __init__(self, workdir: Path, *, with_redis: bool = True) -> None:
        self.workdir = workdir
        self.http_port, self.rtmp_port = free_port(), free_port()
        self.log_path = workdir / "node.log"
        self.redis: RedisServer | None = None
        if with_redis and shutil.which("redis-server"):
            self.redis = RedisServer()
        self.process: subprocess.Popen | None = None
        self._log_offset = 0

    def start(self) -> FuzzNode:
        args = ["serve", "--host", "127.0.0.1", "--port", str(self.http_port), "--rtmp-port", str(self.rtmp_port)]
        if self.redis is not None:
            self.redis.start()
            args += ["--redis", self.redis.url, "--node-id", "fuzz-node"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWAPCAST_")}
        env.update({
            "SWAPCAST_SERVER__DATA_DIR": str(self.workdir / "data"),
            "SWAPCAST_AUTH__JWT_SECRET": SECRET,
            "SWAPCAST_AUTH__REQUESTS_PER_MINUTE_PER_TOKEN": "100000000",
            "SWAPCAST_AUTH__REQUESTS_PER_MINUTE_PER_IP": "100000000",
            "SWAPCAST_WEBRTC__HOST_ADDRESSES": "[127.0.0.1]",
            "SWAPCAST_WEBRTC__MAX_SESSIONS": "8",
            "SWAPCAST_ENGINE__RUNNER_THREADS": "1",
            "SWAPCAST_RTMP__STALL_TIMEOUT_S": "2",
            "PYTHONUNBUFFERED": "1",
        })
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "swapcast.cli", *args], env=env,
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the node exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if asyncio.run(self.request(b"GET", b"/healthz")).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"the node did not answer /healthz within {STARTUP_TIMEOUT_S:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if self.redis is not None:
            self.redis.close()

    # -- probes -------------------------------------------------------------------------------------

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.process.pid}/task"))

    def thread_names(self) -> dict[str, int]:
        names: dict[str, int] = {}
        for task in os.listdir(f"/proc/{self.process.pid}/task"):
            try:
                name = Path(f"/proc/{self.process.pid}/task/{task}/comm").read_text().strip()
            except OSError:
                continue
            names[name] = names.get(name, 0) + 1
        return names

    def cpu_s(self) -> float:
        """CPU seconds the node has used (user + system)."""
        return proc.cpu_seconds(self.process.pid)

    def rss_mb(self) -> float:
        return proc.rss_mb(self.process.pid)

    def new_log_problems(self) -> list[str]:
        """Lines of the log written since the last call that say something went wrong, each
        with the few lines after it (the exception)."""
        with self.log_path.open("rb") as log:
            log.seek(self._log_offset)
            text = log.read().decode("utf-8", "replace")
        cut = text.rfind("\n") + 1  # a half-written line is read next time
        self._log_offset += len(text[:cut].encode("utf-8", "replace"))
        lines = text[:cut].splitlines()
        problems, covered = [], -1
        for i, line in enumerate(lines):
            if i > covered and _BAD_LOG.search(line):  # an ERROR line and its traceback are one problem
                problems.append("\n".join(lines[i:i + 12]))
                covered = i + 11
        return problems

    def log_tail(self, count: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-count:])

    # -- a raw HTTP/1.1 client ----------------------------------------------------------------------

    async def request(self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]] | None = None,
                      body: bytes = b"", *, content_length: bytes | None = None,
                      timeout: float = READ_TIMEOUT_S) -> Answer:
        """One request on its own connection (``Connection: close``), any bytes anywhere."""
        return await send_raw(self.http_port, build_request(method, target, headers or [], body,
                                                            content_length=content_length), timeout)


def build_request(method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes, *,
                  content_length: bytes | None = None, chunked: bool = False) -> bytes:
    """The request's bytes; ``body`` goes as it is (already chunk-framed when ``chunked``)."""
    lines = [method + b" " + target + b" HTTP/1.1", b"Host: 127.0.0.1", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if chunked:
        lines.append(b"Transfer-Encoding: chunked")
    elif body or content_length is not None or method in (b"POST", b"PUT", b"PATCH"):
        lines.append(b"Content-Length: " + (content_length if content_length is not None else str(len(body)).encode()))
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def send_raw(port: int, raw: bytes, timeout: float = READ_TIMEOUT_S, *, misframed: bool = False) -> Answer:
    """Send ``raw`` on a new connection and read the answer until the server closes.
    ``misframed``: the request announces more body than it carries, so the server rightly
    waits for the rest; silence then is no hang (and is not waited for long)."""
    timeout = min(timeout, MISFRAMED_WAIT_S) if misframed else timeout
    data = bytearray()
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                writer.write(raw)
                await writer.drain()
                while chunk := await reader.read(65536):
                    data += chunk
                    if len(data) > MAX_ANSWER_BYTES or data.startswith(b"HTTP/1.1 101"):  # enough (or a WebSocket)
                        break
            finally:
                writer.close()
    except TimeoutError:
        if not data:
            return Answer(0, b"", b"", f"no answer within {timeout:g} s", hung=not misframed)
    except OSError as exc:  # reset, refused, broken pipe: what came before still counts
        if not data:
            return Answer(0, b"", b"", f"{type(exc).__name__}: {exc}")
    answer = bytes(data)
    while re.match(rb"HTTP/1\.[01] 1(?!01)\d\d", answer):  # interim answers (100 Continue) before the real one
        answer = answer.partition(b"\r\n\r\n")[2]
    head, _, body = answer.partition(b"\r\n\r\n")
    match = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    if match is None:
        return Answer(0, head, body, "no status line" if head else "closed without an answer")
    return Answer(int(match.group(1)), head, body)
