"""Scratch folders of killed processes: a ``swapcast worker`` SIGKILLed mid-chunk leaves its
scratch folder (its cleanup never runs); the next worker removes it at start, and keeps the
folders of live processes. Which folders go: one of this host whose process is gone, once
untouched for the claim timeout; one of another host (a shared folder) only once untouched
for ten claim timeouts; never one of a live process."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from jobs_harness import CLAIM_TIMEOUT_S, JOB_TIMEOUT_S

from signaling.jobs.storage import SCRATCH_MARKER, LocalStorage, ScratchFolders, Swept
from swapcast.benchmarks.jobs import WorkerProcess, worker_env

DEAD_AFTER_S = 30.0


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def age(folder: Path, seconds: float) -> None:
    """Make everything in ``folder`` look untouched for ``seconds``."""
    stamp = time.time() - seconds
    for path in [folder, *folder.rglob("*")]:
        os.utime(path, (stamp, stamp), follow_symlinks=False)


def left(folders: ScratchFolders, name: str, owner: dict | None, untouched_s: float) -> Path:
    """A scratch folder as a process that made it and died would leave it: a marker, a file."""
    folder = folders.root / name
    folder.mkdir(parents=True)
    (folder / "rendered.mov").write_bytes(bytes(1000))
    if owner is not None:
        (folder / SCRATCH_MARKER).write_text(json.dumps(owner))
    age(folder, untouched_s)
    return folder


def this_host(folders: ScratchFolders) -> str:
    """The host as this process's markers name it."""
    with folders.new() as folder:
        return json.loads((folder / SCRATCH_MARKER).read_text())["host"]


def test_only_the_folders_of_gone_processes_are_swept(tmp_path) -> None:
    folders = ScratchFolders(tmp_path / "scratch")
    host = this_host(folders)
    gone = dead_pid()
    with folders.new() as mine:
        age(mine, 100 * DEAD_AFTER_S)  # old, but its process (this one) runs: kept
        removed = {
            "dead": left(folders, "dead", {"host": host, "pid": gone}, 2 * DEAD_AFTER_S),
            "other host, long untouched": left(folders, "far", {"host": "elsewhere", "pid": 1}, 11 * DEAD_AFTER_S),
            "no marker, long untouched": left(folders, "unmarked", None, 11 * DEAD_AFTER_S),
        }
        kept = {
            "mine": mine,
            "live process": left(folders, "live", {"host": host, "pid": os.getppid()}, 100 * DEAD_AFTER_S),
            "dead, just touched": left(folders, "fresh", {"host": host, "pid": gone}, 1),
            "other host, recent": left(folders, "near", {"host": "elsewhere", "pid": gone}, 5 * DEAD_AFTER_S),
            "no marker yet": left(folders, "new", None, 1),
            "unreadable marker": left(folders, "garbled", {"host": host, "pid": -1}, 2 * DEAD_AFTER_S),
        }
        size = sum(path.stat().st_size for folder in removed.values() for path in folder.iterdir())
        assert folders.sweep(DEAD_AFTER_S, 10 * DEAD_AFTER_S) == Swept(folders=3, bytes=size)
        assert {name: path.exists() for name, path in {**removed, **kept}.items()} == {
            **{name: False for name in removed}, **{name: True for name in kept}}
    assert not mine.exists()  # and its own cleanup still works
    assert ScratchFolders(tmp_path / "never made").sweep(1, 10) == Swept()


def test_scratch_folders_live_under_one_root_per_storage(tmp_path) -> None:
    storage = LocalStorage(tmp_path / "jobs")
    storage.check()
    with storage.scratch() as folder:
        assert folder.parent == tmp_path / "jobs" / ".scratch"
        marker = json.loads((folder / SCRATCH_MARKER).read_text())
        assert marker["pid"] == os.getpid() and folder.name.split("-")[-2] == str(os.getpid())
    assert list((tmp_path / "jobs" / ".scratch").iterdir()) == []


def rendering_folder(folders: ScratchFolders, worker: WorkerProcess) -> Path:
    """The scratch folder ``worker`` renders a chunk in, once it does."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while True:
        for folder in folders.root.glob(f"*-{worker.popen.pid}-*"):
            if any(folder.glob("*rendered.mov*")):  # the render writes a part file, renamed when complete
                return folder
        assert time.monotonic() < deadline, "the worker never rendered a chunk\n" + worker.log()
        time.sleep(0.01)


@pytest.mark.slow
def test_a_worker_sweeps_the_scratch_folder_of_one_killed_mid_chunk(client, redis_url, clips, storage, tmp_path) -> None:
    env = worker_env(storage, SWAPCAST_JOBS__CLAIM_TIMEOUT_S=str(CLAIM_TIMEOUT_S), SWAPCAST_JOBS__CHUNK_SECONDS="2",
                     SWAPCAST_ENGINE__RUNNER_THREADS="1")
    folders = LocalStorage(storage).scratch_folders
    victim = WorkerProcess(redis_url, "victim", env, tmp_path).wait_ready()
    try:
        status, job = client.submit(clips.medium, face_id="astronaut")
        assert status == 201
        leftover = rendering_folder(folders, victim)
        victim.kill()
    finally:
        victim.stop()
    assert leftover.is_dir()  # the SIGKILLed worker never removed it
    with folders.new() as live:  # this process's, in use and long untouched: never swept
        age(live, 100 * CLAIM_TIMEOUT_S)
        time.sleep(CLAIM_TIMEOUT_S)  # the dead worker's folder, untouched for the claim timeout
        sweeper = WorkerProcess(redis_url, "sweeper", env, tmp_path).wait_ready()
        try:
            deadline = time.monotonic() + 30
            while "removed 1 scratch folder(s) of stopped processes from" not in sweeper.log():
                assert time.monotonic() < deadline, sweeper.log()
                time.sleep(0.1)
            assert not leftover.exists() and live.is_dir()
            assert client.cancel(job["id"])[0] == 200
        finally:
            sweeper.stop()
