"""The node's thread budget: how many threads each library's pool may use, set in one place.

A live session already runs on several threads of its own (decode, swap, encode, the event
loop) and a node runs many sessions, so the node's parallelism comes from its sessions.
Every library left to its defaults also sizes a pool to the whole machine: ONNX Runtime's
intra-op pool (spin-waiting between runs), OpenCV's, the codecs' (x264, libavcodec),
OpenMP/MKL and PyTorch's. Per session that is several pools fighting for the same cores
(measured on 2 cores: 1.46 cores for a 640x480@30 session whose work takes 0.33 core
alone). The budget sizes those pools for the node as a whole; the composition root
(``swapcast serve``) applies it once, before the engine loads. Until then the process
runs the ``legacy`` profile: every library's own defaults.

    from gpu import threads
    threads.apply(threads.ThreadBudget.auto())
    threads.current().runner_threads   # what a runner built now uses

Python 3.11 leaves every OS thread named after the process; :func:`apply` also names each
Python thread's OS thread after the thread (``/proc/<pid>/task/*/comm``, ``top -H``), so
per-thread CPU is readable. Native threads a thread starts inherit its name.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Literal

ThreadProfile = Literal["budget", "legacy"]
PROFILES: tuple[ThreadProfile, ...] = ("budget", "legacy")

# the OpenMP/BLAS libraries read these once, when they load
_POOL_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_PR_SET_NAME = 15
_OS_NAME_BYTES = 15  # the kernel keeps 16 bytes, NUL included


def usable_cpus() -> int:
    """The cores this process may run on (its affinity mask, a container's cpuset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class ThreadBudget:
    """Threads per pool. 0 means the library's own default (the whole machine)."""

    profile: ThreadProfile = "budget"
    runner_threads: int = 1  # ONNX Runtime intra-op threads per session (inter-op: 1)
    runner_spinning: bool = False  # ONNX Runtime's pool spin-waits for work between runs
    opencv_threads: int = 1  # cv2.setNumThreads: 1 = in the calling thread, no pool
    codec_threads: int = 1  # per libavcodec/x264 context (PyAV ``thread_count``)
    torch_threads: int = 1  # torch.set_num_threads, when PyTorch runs on the CPU

    @classmethod
    def auto(cls, cpus: int | None = None) -> ThreadBudget:
        """The default: one thread per call below 16 cores, where sessions outnumber cores
        and a second thread only spins; from 16 cores a call may take a core in 8, up to 4.
        Codecs get one thread each: x264 ultrafast encodes 720p at ~700 fps per core."""
        cpus = cpus or usable_cpus()
        per_call = max(1, min(4, cpus // 8))
        return cls("budget", per_call, False, per_call, 1, per_call)

    @classmethod
    def legacy(cls, cpus: int | None = None) -> ThreadBudget:
        """The settings before the budget, for side-by-side benchmarks: ONNX Runtime with
        min(4, cores) spinning threads, and every other library at its own default."""
        cpus = cpus or usable_cpus()
        return cls("legacy", min(4, cpus), True, 0, 0, 0)

    @classmethod
    def of(cls, profile: ThreadProfile, cpus: int | None = None, **overrides: int | bool) -> ThreadBudget:
        """The named profile, with explicit sizes (non-zero ones) put over its defaults."""
        if profile not in PROFILES:
            raise ValueError(f"thread profile must be one of {', '.join(PROFILES)} (got {profile!r})")
        base = cls.auto(cpus) if profile == "budget" else cls.legacy(cpus)
        chosen = {key: value for key, value in overrides.items() if value}
        return base if not chosen else cls(**{**base.__dict__, **chosen})

    def describe(self) -> str:
        def size(n: int) -> str:
            return str(n) if n else "library default"

        return (f"{self.profile}: ONNX Runtime {size(self.runner_threads)} intra-op thread(s), "
                f"spinning {'on' if self.runner_spinning else 'off'}; OpenCV {size(self.opencv_threads)}; "
                f"codecs {size(self.codec_threads)} per context; torch {size(self.torch_threads)}")


_current = ThreadBudget.legacy()  # until a composition root applies one: the libraries' own
_naming_installed = False


def current() -> ThreadBudget:
    """The budget in force: what runners and codec contexts created from now on use. A
    process that never called :func:`apply` (tests, one-off tools) keeps the libraries'
    defaults, as before there was a budget."""
    return _current


def apply(budget: ThreadBudget) -> None:
    """Make ``budget`` the process's: OpenMP/BLAS environment (where not set by the user, and
    only for libraries loaded later), OpenCV's pool, PyTorch's (when imported), and the one
    runners and codecs read from :func:`current`. Names OS threads after Python threads."""
    global _current
    _current = budget
    if budget.torch_threads:
        for name in _POOL_ENV:
            os.environ.setdefault(name, str(budget.torch_threads))
    import cv2

    if budget.opencv_threads:
        cv2.setNumThreads(budget.opencv_threads)
    if "torch" in sys.modules:  # never imported here: a CPU node runs without it
        size_torch_pool()
    name_os_threads()


def size_torch_pool() -> None:
    """PyTorch's CPU pool at the budget's size; the torch runner calls this when it loads
    torch after :func:`apply` ran."""
    import torch

    if _current.torch_threads and torch.get_num_threads() != _current.torch_threads:
        torch.set_num_threads(_current.torch_threads)


def os_thread_name(name: str) -> str:
    """A Python thread name as the kernel keeps it: ``Thread-3 (decoder_worker)`` ->
    ``decoder_worker``; cut to the kernel's 15 bytes."""
    target = re.fullmatch(r"Thread-\d+ \((.+)\)", name)
    text = (target.group(1) if target else name).encode("utf-8", "replace")
    return text[:_OS_NAME_BYTES].decode("utf-8", "ignore")


def set_os_thread_name(name: str) -> None:
    """Name the calling thread's OS thread (Linux; elsewhere a no-op)."""
    libc = _libc()
    if libc is not None:
        libc.prctl(_PR_SET_NAME, os_thread_name(name).encode(), 0, 0, 0)


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def name_os_threads() -> None:
    """Every Python thread started from now on names its OS thread after itself (Python
    3.14 does this itself); threads already running are named through ``/proc``."""
    global _naming_installed
    for thread in threading.enumerate():
        if thread.native_id is not None and thread is not threading.main_thread():
            try:
                with open(f"/proc/self/task/{thread.native_id}/comm", "w") as comm:
                    comm.write(os_thread_name(thread.name))
            except OSError:
                pass
    if _naming_installed:
        return
    _naming_installed = True
    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def named_bootstrap(self: threading.Thread) -> None:
        set_os_thread_name(self.name)
        bootstrap(self)

    threading.Thread._bootstrap_inner = named_bootstrap  # type: ignore[attr-defined]
