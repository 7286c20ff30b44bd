"""Errors the compute plane raises for bad *input* (as opposed to bugs).

Every user-facing entry point (CLI, HTTP API, RTMP) turns a ``SwapcastError`` into a clear
message (exit code 2, HTTP 4xx, RTMP ``_error``) instead of a traceback.
"""

from __future__ import annotations


class SwapcastError(Exception):
    """Bad input from a user: reported with its message, never as a traceback."""


class ModelFileError(SwapcastError):
    """A user-supplied model file is missing, unreadable or has the wrong signature."""

    def __init__(self, path: object, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)
        self.problem = problem


class ImageError(SwapcastError):
    """A file that should be an image cannot be read as one."""


class NoFaceError(SwapcastError):
    """An image that must show a face shows none."""


class ManyFacesError(SwapcastError):
    """An image that must show one face shows several and no index picks one."""

    def __init__(self, message: str, count: int) -> None:
        super().__init__(message)
        self.count = count
