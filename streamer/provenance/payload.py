"""What the watermark says: the issuer (a number the operator configures), a hash of the
session or job id, and the hour it was made, protected by a CRC-16 (72 bits in all)."""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np

from gpu.watermark import ecc
from gpu.watermark.pattern import MESSAGE_BITS

EPOCH_S = datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp()  # hour 0
ISSUER_BITS, STREAM_BITS, HOUR_BITS = 16, 24, 16
CRC_BITS = MESSAGE_BITS - ISSUER_BITS - STREAM_BITS - HOUR_BITS


def stream_hash(stream_id: str) -> int:
    """The 24 bits of a session or job id the mark carries (the first 3 bytes of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(stream_id.encode()).digest()[:3], "big")


def hour_of(seconds: float) -> int:
    return int((seconds - EPOCH_S) // 3600) % (1 << HOUR_BITS)


@dataclass(frozen=True)
class Payload:
    issuer: int
    stream: int  # stream_hash() of the session or job id
    hour: int  # hours since 2026-01-01 UTC, modulo 2^16 (7.5 years)

    @classmethod
    def for_stream(cls, issuer: int, stream_id: str, seconds: float | None = None) -> Payload:
        return cls(issuer, stream_hash(stream_id), hour_of(time.time() if seconds is None else seconds))

    def bits(self) -> np.ndarray:
        fields = [(self.issuer, ISSUER_BITS), (self.stream, STREAM_BITS), (self.hour, HOUR_BITS)]
        data = np.array([(value >> (width - 1 - i)) & 1 for value, width in fields for i in range(width)], dtype=np.uint8)
        return np.concatenate([data, ecc.crc16(data)])

    @classmethod
    def from_bits(cls, bits: np.ndarray) -> Payload:
        """The payload of a message whose CRC the detector already checked."""
        values, at = [], 0
        for width in (ISSUER_BITS, STREAM_BITS, HOUR_BITS):
            values.append(int("".join(str(int(b)) for b in bits[at:at + width]), 2))
            at += width
        return cls(*values)

    def to_dict(self) -> dict:
        start = datetime.fromtimestamp(EPOCH_S + self.hour * 3600, tz=timezone.utc)
        return {"issuer": self.issuer, "stream_hash": f"{self.stream:06x}", "hour_utc": start.strftime("%Y-%m-%dT%H:00Z")}
