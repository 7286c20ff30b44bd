"""Errors the media plane raises for bad *input* media (as opposed to bugs)."""

from __future__ import annotations

from gpu.errors import SwapcastError


class VideoError(SwapcastError):
    """A video file cannot be read, decoded or written; the message names the file."""
