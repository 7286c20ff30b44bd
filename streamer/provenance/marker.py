"""The node's provenance settings and the per-stream watermark marker the frame swapper calls
on every swapped frame, just before it goes to the encoder."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gpu.watermark.embed import LumaPattern, mark
from gpu.watermark.pattern import WatermarkKey
from streamer.provenance.payload import Payload, hour_of

PUBLIC_KEY = b"swapcast-public-watermark-v1"  # the default: anyone can verify (and so can strip) it


@dataclass(frozen=True)
class ProvenanceSettings:
    """``provenance`` of the config, as the media plane uses it."""

    watermark: bool = True
    key: bytes = field(default=PUBLIC_KEY, repr=False)
    strength: float = 3.0  # RMS of the mark in luma code values (3.0 ~ 42 dB PSNR)
    issuer: int = 0
    issuer_name: str = "swapcast"
    c2pa_cert: Path | None = None  # PEM: signing certificate, then its chain
    c2pa_key: Path | None = None  # PEM private key of that certificate
    c2pa_trust_anchors: Path | None = None  # PEM CA certificates the verifier trusts

    @property
    def watermark_key(self) -> WatermarkKey:
        return WatermarkKey(self.key)

    def marker(self, stream_id: str) -> StreamMarker | None:
        """The marker for one session or job; None when the watermark is off."""
        if not self.watermark:
            return None
        return StreamMarker(self.watermark_key, self.strength, self.issuer, stream_id)

    def describe(self) -> str:
        """The start-up note: what this node marks (never the key itself)."""
        mark_note = (f"watermark on (issuer {self.issuer}, strength {self.strength}, "
                     f"{'public default key' if self.key == PUBLIC_KEY else 'configured key'})"
                     if self.watermark else "watermark OFF")
        c2pa_note = ("C2PA Content Credentials on files" if self.c2pa_cert and self.c2pa_key
                     else "no C2PA certificate configured: files get the watermark only")
        return f"provenance: {mark_note}; {c2pa_note}"


class StreamMarker:
    """Marks frames of one stream in place. The pattern is made once per frame size and
    hour (a few ms to tens of ms) and then costs two saturating adds per frame."""

    def __init__(self, key: WatermarkKey, strength: float, issuer: int, stream_id: str,
                 clock: Callable[[], float] = time.time) -> None:
        self.key, self.strength, self.issuer, self.stream_id = key, strength, issuer, stream_id
        self.clock = clock
        self._pattern: LumaPattern | None = None
        self._made_for: tuple[int, int, int] | None = None

    def __call__(self, frame: np.ndarray) -> None:
        now = self.clock()
        height, width = frame.shape[:2]
        wanted = (height, width, hour_of(now))
        if self._made_for != wanted:
            payload = Payload.for_stream(self.issuer, self.stream_id, now)
            self._pattern = LumaPattern.make(self.key, payload.bits(), height, width, self.strength)
            self._made_for = wanted
        mark(frame, self._pattern)
