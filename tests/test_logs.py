"""JSON logs: one parseable object per line, extra fields and tracebacks inside it, and the
format chosen by ``--log-format`` or the config (``SWAPCAST_SERVER__LOG_FORMAT``)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from collections.abc import Iterator
from datetime import datetime

import pytest

from swapcast.cli import main
from swapcast.logs import TEXT_FORMAT, JsonFormatter, TextFormatter, configure_logging


def json_logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger(name)
    logger.handlers[:] = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_extra_fields_and_exceptions():
    logger, stream = json_logger("swapcast.test.json")
    logger.info("session %s started", "abc", extra={"session_id": "abc", "fps": 29.5, "where": object()})
    try:
        raise ValueError("bad frame\nsecond line")
    except ValueError:
        logger.exception("swap failed")
    logger.warning("héllo \"quoted\"")

    started, failed, quoted = lines(stream)  # three records, three lines: the traceback stays inside
    assert started["message"] == "session abc started" and started["level"] == "INFO"
    assert started["logger"] == "swapcast.test.json"
    assert started["session_id"] == "abc" and started["fps"] == 29.5
    assert started["where"].startswith("<object object")  # not JSON: written as its str
    assert "exc" not in started
    assert datetime.fromisoformat(started["time"]).tzinfo is not None
    assert failed["level"] == "ERROR" and failed["exc"].startswith("Traceback")
    assert "ValueError: bad frame\nsecond line" in failed["exc"]
    assert quoted["message"] == 'héllo "quoted"'


@contextlib.contextmanager
def bare_root() -> Iterator[None]:
    """The root logger without pytest's capture handlers (added for each test phase), as a
    fresh process has it; restored afterwards."""
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    root.handlers[:] = []
    try:
        yield
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers[:] = saved
        root.setLevel(level)


@pytest.mark.parametrize(("flag", "env", "expected"), [
    (["--log-format", "json"], None, "json"),
    ([], "json", "json"),  # the config's server.log_format, from the environment
    (["--log-format", "text"], "json", "text"),  # the flag wins
    ([], None, "text"),
])
def test_cli_log_format(monkeypatch, capsys, tmp_path, flag, env, expected):
    monkeypatch.setenv("SWAPCAST_SERVER__DATA_DIR", str(tmp_path))
    if env is None:
        monkeypatch.delenv("SWAPCAST_SERVER__LOG_FORMAT", raising=False)
    else:
        monkeypatch.setenv("SWAPCAST_SERVER__LOG_FORMAT", env)
    with bare_root():
        assert main([*flag, "keys", "list"]) == 0
        logging.getLogger("swapcast.test.cli").warning("ready", extra={"port": 8080})
    (line,) = capsys.readouterr().err.splitlines()
    if expected == "json":
        assert json.loads(line) | {"time": None} == {"time": None, "level": "WARNING", "logger": "swapcast.test.cli",
                                                     "message": "ready", "port": 8080}
    else:
        assert line == "WARNING swapcast.test.cli: ready"


def test_configure_logging_refuses_unknown_formats():
    with pytest.raises(ValueError, match="'text' or 'json'"):
        configure_logging(fmt="yaml")  # type: ignore[arg-type]


def test_no_message_or_traceback_starts_a_line_of_its_own_and_no_key_is_kept_whole():
    """What a client chose (a key's name, an exception's message quoting it) goes into a
    record's own line, escaped; tracebacks are indented; swapcast's secrets are cut to hints."""
    key, token = "sk_" + "Q" * 32, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2lnbmF0dXJl"
    forged = "ERROR signaling.auth.middleware: admin token accepted"
    hostile = f"cam\n{forged}\r{forged}\u2028{forged}\x85{forged}\x1b[2K\u202e{key} {token}"
    text, lines = io.StringIO(), io.StringIO()
    logger = logging.getLogger("test.forging")
    handlers = [logging.StreamHandler(text), logging.StreamHandler(lines)]
    handlers[0].setFormatter(TextFormatter(TEXT_FORMAT))
    handlers[1].setFormatter(JsonFormatter())
    logger.handlers[:], logger.propagate = handlers, False
    logger.setLevel(logging.INFO)
    logger.info("rtmp: %s publishing", hostile)
    try:
        raise ValueError(hostile)
    except ValueError:
        logger.exception("stream %s failed", hostile)
    written = text.getvalue()
    assert [line.split(" ", 1)[0] for line in written.splitlines() if not line.startswith("    ")] == ["INFO", "ERROR"]
    assert "\\n" + forged in written and "\\u2028" in written and "\\x1b" in written and "\\u202e" in written
    for stream in (written, lines.getvalue()):
        assert key not in stream and token not in stream and "sk_QQQ…" in stream
    assert [len(line.splitlines()) for line in lines.getvalue().splitlines()] == [1, 1]
    assert json.loads(lines.getvalue().splitlines()[0])["message"].startswith("rtmp: cam\n" + forged)


def test_access_log_masks_tokens_in_query_strings():
    """The events socket takes its token in the query; the access log must not keep it."""
    import asyncio

    from aiohttp import ClientSession, web

    from swapcast.local_cluster import free_port
    from swapcast.logs import RedactingAccessLogger

    stream = io.StringIO()
    logger = logging.getLogger("test.access")
    logger.handlers[:] = [logging.StreamHandler(stream)]
    logger.propagate = False
    logger.setLevel(logging.INFO)

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def scenario() -> None:
        app = web.Application()
        app.router.add_get("/api/v1/events", ok)
        runner = web.AppRunner(app, access_log=logger, access_log_class=RedactingAccessLogger,
                               access_log_format='%a "%r" %s')
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with ClientSession() as client:
                for query in ("?token=eyJsecret.part.sig&x=1", "?access_token=abc123", "?x=2"):
                    async with client.get(f"http://127.0.0.1:{port}/api/v1/events{query}") as response:
                        assert response.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(scenario())
    logged = stream.getvalue().splitlines()
    assert len(logged) == 3
    assert '"GET /api/v1/events?token=***&x=1 HTTP/1.1" 200' in logged[0]
    assert '"GET /api/v1/events?access_token=*** HTTP/1.1" 200' in logged[1]
    assert '"GET /api/v1/events?x=2 HTTP/1.1" 200' in logged[2]
    assert "eyJsecret" not in stream.getvalue() and "abc123" not in stream.getvalue()
    assert logged[0].startswith("127.0.0.1 ")  # the other fields come from the request as they are


# Runs in its own process: fd 2 is process-wide, and pytest's capture moves it per test.
NATIVE_CHATTER_PROBE = r"""
import json, logging, os, threading
import numpy as np
from gpu.analysis.blazeface import BlazeFaceDetector
from gpu.analysis.face_mesh import _mesh_graph

BlazeFaceDetector()  # the first graph of the process
seen, stop = set(), threading.Event()

def watch():
    while not stop.is_set():
        seen.add(os.readlink("/proc/self/fd/2"))

def work():
    graphs = [_mesh_graph(True), BlazeFaceDetector()._graph]
    blank = np.zeros((96, 96, 3), np.uint8)  # no face: the old code silenced every one of these
    for _ in range(60):
        for graph in graphs:
            graph.process(blank)
    for graph in graphs:
        graph.close()

watcher = threading.Thread(target=watch)
watcher.start()
workers = [threading.Thread(target=work) for _ in range(4)]
for thread in workers:
    thread.start()
for thread in workers:
    thread.join()
stop.set()
watcher.join()
print(json.dumps(sorted(seen)), flush=True)
os.write(2, b"native line after the graphs\n")
logging.basicConfig(format="%(message)s")
logging.getLogger("probe").warning("python warning after the graphs")
"""


def test_native_chatter_is_filtered_without_moving_stderr_while_graphs_run_in_threads(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "probe.py"
    script.write_text(NATIVE_CHATTER_PROBE)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("SWAPCAST_NATIVE_LOGS", None)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    targets = json.loads(result.stdout.strip().splitlines()[-1])  # where fd 2 pointed while graphs ran
    assert len(targets) == 1 and "/dev/null" not in targets[0], targets
    assert "native line after the graphs" in result.stderr and "python warning after the graphs" in result.stderr
    assert "Feedback manager" not in result.stderr and "XNNPACK" not in result.stderr, result.stderr
