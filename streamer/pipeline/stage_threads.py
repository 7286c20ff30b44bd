"""In-order stages, each on a thread of its own: how a file's frames overlap.

An offline render knows every frame in advance and has no real-time limit, so it need not
finish a frame before starting the next: while one frame is encoded the next is swapped, the
one after tracked and the one after that decoded. ``run_stages`` runs a source iterator on
one thread, each stage function on its own thread and the sink on the caller's, linked by
small bounded queues, so every item passes every stage in the source's order (a stage that
keeps state across frames, such as a tracker, sees them as a loop would show them) and at
most ``depth`` items wait between two stages (memory stays a few frames).

The stages overlap where they leave Python: the codecs, swscale, ONNX Runtime, OpenCV and
large NumPy operations release the GIL. The first error of any thread (or of the sink) stops
every thread and is raised in the caller, after they have all ended.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

_POLL_S = 0.05  # how often a blocked thread looks whether another has failed
_END = object()  # after the source's last item


class _Stopped(Exception):
    """Another thread failed: this one ends without an error of its own."""


class _Run:
    def __init__(self, stages: int, depth: int) -> None:
        self.queues: list[queue.Queue] = [queue.Queue(maxsize=depth) for _ in range(stages + 1)]
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._lock = threading.Lock()

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if self.error is None:
                self.error = error
        self.stop.set()

    def put(self, index: int, item: Any) -> None:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                self.queues[index].put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def get(self, index: int) -> Any:
        while True:
            if self.stop.is_set():
                raise _Stopped
            try:
                return self.queues[index].get(timeout=_POLL_S)
            except queue.Empty:
                continue


def run_stages(source: Iterable[Any], stages: Sequence[Callable[[Any], Any]], sink: Callable[[Any], None], *,
               depth: int = 2, name: str = "stage") -> None:
    """``sink(stage_n(... stage_1(item)))`` for every item of ``source``, in order; the source
    and each stage on a thread of its own (named ``{name}-read``, ``{name}-1`` ...), the sink
    on the calling thread. Raises the first error any of them raised."""
    run = _Run(len(stages), max(1, depth))
    threads = [threading.Thread(target=_read, args=(run, source), name=f"{name}-read", daemon=True)]
    threads += [threading.Thread(target=_work, args=(run, index, stage), name=f"{name}-{index + 1}", daemon=True)
                for index, stage in enumerate(stages)]
    for thread in threads:
        thread.start()
    try:
        while (item := run.get(len(stages))) is not _END:
            sink(item)
    except _Stopped:
        pass
    except BaseException as exc:
        run.fail(exc)
    finally:
        run.stop.set()  # a normal end: every thread has already put its _END
        for thread in threads:
            thread.join()
    if run.error is not None:
        raise run.error


def _read(run: _Run, source: Iterable[Any]) -> None:
    try:
        for item in source:
            run.put(0, item)
        run.put(0, _END)
    except _Stopped:
        pass
    except BaseException as exc:  # noqa: BLE001 - raised again in the caller
        run.fail(exc)


def _work(run: _Run, index: int, stage: Callable[[Any], Any]) -> None:
    try:
        while (item := run.get(index)) is not _END:
            run.put(index + 1, stage(item))
        run.put(index + 1, _END)
    except _Stopped:
        pass
    except BaseException as exc:  # noqa: BLE001 - raised again in the caller
        run.fail(exc)
