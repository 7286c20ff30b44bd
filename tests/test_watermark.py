"""gpu/watermark: the code, the embed kernel's invisibility, and the detector on clean,
marked and wrongly keyed pictures (the robustness against re-encoding, rescaling and
cropping is in tests/provenance)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from skimage import data

from gpu.watermark import ecc
from gpu.watermark.detect import Detector
from gpu.watermark.embed import LumaPattern, mark
from gpu.watermark.pattern import MESSAGE_BITS, WatermarkKey
from streamer.provenance.payload import Payload
from provenance.provenance_kit import luma, natural_clip, psnr

KEY = WatermarkKey(b"test key")
MESSAGE = Payload(issuer=7, stream=0xABCDEF, hour=8000).bits()


def test_payload_bits_round_trip_and_carry_a_crc():
    payload = Payload.for_stream(42, "session-1", seconds=1_790_000_000)
    bits = payload.bits()
    assert bits.shape == (MESSAGE_BITS,)
    assert np.array_equal(ecc.crc16(bits[:-16]), bits[-16:])
    assert Payload.from_bits(bits) == payload


def test_convolutional_code_corrects_noisy_soft_bits():
    rng = np.random.default_rng(3)
    coded = ecc.encode(MESSAGE)
    soft = (1.0 - 2.0 * coded) + rng.normal(0, 1.0, coded.size)
    assert ((soft < 0) != coded).mean() > 0.1  # many raw errors ...
    assert np.array_equal(ecc.decode(soft, MESSAGE_BITS), MESSAGE)  # ... all corrected


@pytest.mark.parametrize("size", [(640, 480), (1280, 720)])
def test_mark_is_invisible_by_psnr(size, tmp_path):
    width, height = size
    clean = natural_clip(width, height, 1)[0]
    marked = clean.copy()
    mark(marked, LumaPattern.make(KEY, MESSAGE, height, width, strength=3.0))
    assert psnr(clean, marked) >= 40.0
    assert np.abs(marked.astype(int) - clean).max() <= 16


def test_a_marked_still_is_found_with_its_payload_and_not_with_another_key():
    clean = natural_clip(640, 480, 1, seed=2)[0]
    marked = clean.copy()
    mark(marked, LumaPattern.make(KEY, MESSAGE, 480, 640, strength=3.0))
    found = _detect(KEY, [marked])
    assert found.found and np.array_equal(found.message, MESSAGE)
    assert not _detect(WatermarkKey(b"another key"), [marked]).found
    assert not _detect(KEY, [clean]).found


def test_a_single_jpeg_still_gives_back_every_payload():
    """A photo marked with 32 payloads (other issuers, streams and hours), each saved once as
    a JPEG: every payload reads back from the one picture. With the whitening's contrast
    taken over 2 cells, 10 of these 32 were lost (the CRC failed on the decoded bits)."""
    photo = cv2.resize(data.astronaut(), (640, 480), interpolation=cv2.INTER_AREA)
    lost = []
    for n in range(32):
        payload = Payload(issuer=n * 977 % 65536, stream=n * 104729 % (1 << 24), hour=(n * 53 + 11) % 65536).bits()
        marked = photo.copy()
        mark(marked, LumaPattern.make(KEY, payload, 480, 640, strength=3.0))
        _, jpeg = cv2.imencode(".jpg", marked[..., ::-1], [cv2.IMWRITE_JPEG_QUALITY, 90])
        found = _detect(KEY, [cv2.imdecode(jpeg, cv2.IMREAD_COLOR)[..., ::-1]])
        if not (found.found and np.array_equal(found.message, payload)):
            lost.append(n)
    assert not lost


def test_mark_rejects_a_frame_of_another_size():
    with pytest.raises(ValueError, match="pattern is"):
        mark(np.zeros((240, 320, 3), np.uint8), LumaPattern.make(KEY, MESSAGE, 480, 640, strength=3.0))


@pytest.mark.slow
def test_no_false_positives_on_100_clean_pictures():
    """Photos of every kind, cropped and scaled at random, plus noise and flat pictures:
    none is reported marked."""
    rng = np.random.default_rng(11)
    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket(), data.immunohistochemistry(),
              np.dstack([data.camera()] * 3), np.dstack([data.brick()] * 3), np.dstack([data.grass()] * 3)]
    pictures = []
    for n in range(96):
        photo = photos[n % len(photos)]
        h, w = photo.shape[:2]
        ch, cw = rng.integers(h // 2, h + 1), rng.integers(w // 2, w + 1)
        y, x = rng.integers(0, h - ch + 1), rng.integers(0, w - cw + 1)
        pictures.append(np.ascontiguousarray(photo[y:y + ch, x:x + cw]))
    pictures += [rng.integers(0, 256, (480, 640, 3), dtype=np.uint8), np.full((480, 640, 3), 128, np.uint8),
                 np.tile(np.arange(640, dtype=np.uint8)[None, :, None], (480, 1, 3)),
                 np.tile(((np.arange(640) // 8) % 2 * 255).astype(np.uint8)[None, :, None], (480, 1, 3))]
    found = [i for i, picture in enumerate(pictures) if _detect(KEY, [picture]).found]
    assert len(pictures) >= 100 and found == []


def _detect(key, frames):
    detector = Detector(key)
    for frame in frames:
        detector.add(luma(frame))
    return detector.result()
