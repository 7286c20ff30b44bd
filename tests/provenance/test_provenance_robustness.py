"""The issue's robustness list: the payload comes back whole from 2 s of marked 720p video
after H.264 at 1.5 Mbps, then a downscale to 480p, a 10 % crop, and a second re-encode at a
low bitrate (500 kbps at 480p); clean video and a wrong key find nothing."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.watermark.detect import Detector
from gpu.watermark.embed import LumaPattern, mark
from gpu.watermark.pattern import WatermarkKey
from streamer.provenance.payload import EPOCH_S, Payload
from provenance_kit import crop, downscale, h264, luma, natural_clip, psnr

pytestmark = pytest.mark.slow

KEY = WatermarkKey(b"robustness key")
# a fixed hour: from the clock the payload changes every hour, and what a test checks should not
PAYLOAD = Payload.for_stream(3, "job-1234", seconds=EPOCH_S)
SECONDS = 2


@pytest.fixture(scope="module")
def clips():
    clean = natural_clip(1280, 720, SECONDS * 30, seed=5)
    pattern = LumaPattern.make(KEY, PAYLOAD.bits(), 720, 1280, strength=3.0)
    marked = [frame.copy() for frame in clean]
    for frame in marked:
        mark(frame, pattern)
    encoded = h264(marked, 1500)
    return {"clean": clean, "marked": marked, "h264_1500k_720p": encoded}


def test_psnr_of_the_marked_clip(clips):
    values = [psnr(c, m) for c, m in zip(clips["clean"], clips["marked"], strict=True)]
    assert min(values) >= 40.0


@pytest.mark.parametrize("attack", ["h264_1500k_720p", "downscale_480p", "crop_10pct", "reencode_500k_480p"])
def test_payload_survives(attack, clips):
    encoded = clips["h264_1500k_720p"]
    frames = {
        "h264_1500k_720p": lambda: encoded,
        "downscale_480p": lambda: downscale(encoded, 480),
        "crop_10pct": lambda: crop(encoded, 0.1),
        "reencode_500k_480p": lambda: h264(downscale(encoded, 480), 500),
    }[attack]()
    found = _detect(KEY, frames)
    assert found.found, f"{attack}: sync z {found.sync_z:.1f}, chip agreement {found.chip_agreement:.2f}"
    assert np.mean(found.message == PAYLOAD.bits()) >= 0.99  # the CRC makes it all or nothing
    assert Payload.from_bits(found.message) == PAYLOAD


def test_clean_video_and_a_wrong_key_find_nothing(clips):
    assert not _detect(KEY, h264(clips["clean"][:30], 1500)).found
    assert not _detect(WatermarkKey(b"not the key"), clips["h264_1500k_720p"]).found


def _detect(key, frames):
    detector = Detector(key)
    for frame in frames:
        detector.add(luma(frame))
    return detector.result()
