"""Tests import the real-Redis helper from here (it lives in the package, which
``swapcast bench cluster`` uses too)."""

from swapcast.local_cluster import RedisServer, free_port

__all__ = ["RedisServer", "free_port"]
