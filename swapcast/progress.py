"""A progress bar for long CLI work (tqdm on a terminal, periodic lines otherwise)."""

from __future__ import annotations

import sys
import time

from tqdm import tqdm


class ProgressBar:
    """``update(done, total)`` as the media layer reports it; a context manager. On a
    terminal a tqdm bar; elsewhere (a log, a pipe) a line every ``log_every_s``; nothing
    when not ``enabled`` (``--no-progress``). Both forms show the rate: tqdm its own
    (frame/s), the periodic lines the average since the start."""

    def __init__(self, label: str, enabled: bool = True, log_every_s: float = 5.0) -> None:
        self.label = label
        self.enabled = enabled
        self.log_every_s = log_every_s
        self._bar: tqdm | None = None
        self._started = self._last_log = time.monotonic()

    def __enter__(self) -> ProgressBar:
        if self.enabled and sys.stderr.isatty():
            self._bar = tqdm(desc=self.label, unit="frame", dynamic_ncols=True, file=sys.stderr)
        return self

    def update(self, done: int, total: int | None) -> None:
        if self._bar is not None:
            if total and self._bar.total != max(total, done):
                self._bar.total = max(total, done)
            self._bar.update(done - self._bar.n)
        elif self.enabled and time.monotonic() - self._last_log >= self.log_every_s:
            self._last_log = time.monotonic()
            share = f"/{total} ({100 * done / total:.0f}%)" if total else ""
            rate = done / max(self._last_log - self._started, 1e-9)
            print(f"{self.label}: {done}{share} frames, {rate:.1f} frames/s", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
