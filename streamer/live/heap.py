"""Give the memory a finished stream freed back to the system.

A stream's codecs, swap thread and frames are freed when it ends, but glibc keeps freed
heap in its per-thread arenas, and every stream runs on threads of its own (x264's,
FFmpeg's, its swap thread): measured over 10 RTMP lifecycles, RSS grew 750 -> 1,006 MB
with no object left behind, and ``malloc_trim`` brought it to 625 MB. So each finished
stream or session trims the heap once (off the event loop: it can take milliseconds)."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable



def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


_TRIM = _malloc_trim()


def release_freed_memory() -> None:
    """Return the free parts of the heap to the system (a no-op where libc cannot)."""
    if _TRIM is not None:
        _TRIM(0)
