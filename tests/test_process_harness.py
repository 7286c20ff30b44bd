"""tests/process_harness.py on real child processes: readiness, a server that dies or never
gets ready (the error carries its log), SIGTERM before SIGKILL, and process groups."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
from process_harness import running, start_process

pytestmark = pytest.mark.timeout(60)


def python(code: str) -> list[str]:
    return [sys.executable, "-u", "-c", code]


def test_ready_when_the_probe_says_so_and_stopped_after_the_block(tmp_path):
    flag = tmp_path / "ready"
    code = f"import pathlib, time; print('starting'); pathlib.Path({str(flag)!r}).touch(); time.sleep(60)"
    with running("sleeper", python(code), tmp_path / "log", flag.exists, timeout_s=20) as managed:
        assert managed.alive() and "starting" in managed.log()
    assert managed.process.returncode == -signal.SIGTERM


def test_a_process_that_exits_before_it_is_ready_says_why(tmp_path):
    with pytest.raises(AssertionError, match=r"(?s)crasher exited \(3\) before it was ready:.*bad config line 7"):
        with running("crasher", python("import sys; print('bad config line 7'); sys.exit(3)"), tmp_path / "log",
                     lambda: False, timeout_s=20):
            pass


def test_one_never_ready_is_stopped_with_its_log(tmp_path):
    code = "import time; print('still loading models'); time.sleep(60)"
    with pytest.raises(AssertionError, match=r"(?s)slow was not ready within 0.5 s:.*still loading models"):
        with running("slow", python(code), tmp_path / "log", lambda: False, timeout_s=0.5):
            pass


def test_sigterm_first_then_sigkill_after_the_grace_period(tmp_path):
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ignoring TERM', flush=True); "
            "time.sleep(60)")
    log = tmp_path / "log"
    managed = start_process("stubborn", python(code), log)
    managed.wait_until(lambda: "ignoring TERM" in managed.log(), timeout_s=20)
    managed.stop(grace_s=0.5)
    assert managed.process.returncode == -signal.SIGKILL


def dead(pid: int) -> bool:
    """Gone, or a zombie waiting for whoever adopted it to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_own_group_signals_reach_the_children(tmp_path):
    child = tmp_path / "child.pid"
    code = ("import pathlib, subprocess, sys, time; "
            "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
            f"pathlib.Path({str(child) + '.tmp'!r}).write_text(str(c.pid)); "
            f"pathlib.Path({str(child) + '.tmp'!r}).rename({str(child)!r}); time.sleep(60)")
    managed = start_process("parent", python(code), tmp_path / "log", own_group=True)
    managed.wait_until(child.exists, timeout_s=20)
    child_pid = int(child.read_text())
    managed.kill()
    assert managed.process.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while not dead(child_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert dead(child_pid)
