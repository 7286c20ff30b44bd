"""The one exception type every RTMP parser raises on bad bytes from a peer.

Keeping a single type lets a connection turn *any* malformed input into "close this
connection, log at INFO" without catching real bugs (which raise something else)."""

from __future__ import annotations


class RtmpProtocolError(Exception):
    """The peer sent bytes that break the RTMP/AMF0/FLV rules (or timed out mid-protocol)."""


class RtmpHandshakeError(RtmpProtocolError):
    """The C0/C1/C2 (or S0/S1/S2) exchange failed: wrong version, short read or timeout."""
